"""One ensemble experiment: a config (d, p, problem, model, kappa, seeds, knobs) -> outcome.

Shared by `jaxmem train`, the sweeps and the demo, so each of them runs the same code path.
"""

from __future__ import annotations

import math
import time

import jax
import numpy as np

from ._metrics import ensemble_metrics
from ._models import hebbian, MODELS, resolve_kappa
from ._tasks import alpha_of, EMBEDDINGS, make_tasks, MATERIALISE_LIMIT, p_from_alpha, PROBLEMS
from ._train import train, train_bytes, TrainConfig
from ._validate import check_choice, check_int, check_memory, InvalidArgument


def resolve_p(d: int, p: int | None, alpha: float | None) -> int:
    if (p is None) == (alpha is None):
        raise InvalidArgument("give exactly one of p and alpha")
    return check_int("p", p, 2) if p is not None else p_from_alpha(d, alpha)


def run_experiment(
    *,
    d: int,
    p: int | None = None,
    alpha: float | None = None,
    problem: str = "op",
    model: str = "full",
    kappa: float | None = None,
    seeds: int = 8,
    seed0: int = 0,
    config: TrainConfig | None = None,
    embedding: str = "gaussian",
    progress: bool = False,
    keep_metrics: bool = False,
) -> dict:
    """Train (or build, for Hebbian) `seeds` memories and return a JSON-ready dict.

    Seed `s` uses task key `fold_in(key(seed0), s)`; the memory's initialisation comes from
    the task, so any seed can be rerun alone with the same numbers.
    """
    d = check_int("d", d, 2)
    check_choice("problem", problem, PROBLEMS)
    check_choice("model", model, MODELS)
    check_choice("embedding", embedding, EMBEDDINGS)
    seeds = check_int("seeds", seeds, 1)
    p = resolve_p(d, p, alpha)
    config = TrainConfig() if config is None else config
    m, kappa_eff = resolve_kappa(model, d, kappa)
    dp_materialised = problem == "dp" and p * p * d <= MATERIALISE_LIMIT
    check_memory("d, p and seeds", train_bytes(seeds, d, p, m, dp_materialised))
    t = time.perf_counter()
    tasks = make_tasks(jax.random.key(seed0), n=seeds, d=d, p=p, problem=problem, embedding=embedding)
    if model == "hebbian":
        met = ensemble_metrics(hebbian(tasks), tasks)
        stored = np.asarray(met.stored)
        out = dict(
            accuracy=stored.mean(axis=1).tolist(),
            all_stored=stored.all(axis=1).tolist(),
            steps_to_store=[0 if s else None for s in stored.all(axis=1)],
            diverged=[False] * seeds,
            final_loss=[None] * seeds,
        )
    else:
        run = train(model, tasks, config, m=m if model == "factored" else None, progress=progress)
        met = run.metrics
        out = dict(
            accuracy=run.accuracy.tolist(),
            all_stored=run.all_stored.tolist(),
            steps_to_store=run.steps_to_store,
            diverged=run.diverged.tolist(),
            final_loss=[float(x) if math.isfinite(x) else None for x in run.final_loss],
        )
    res = dict(
        d=d,
        p=p,
        alpha=alpha_of(d, p),
        problem=problem,
        model=model,
        kappa=kappa_eff,
        m=m,
        seeds=seeds,
        seed0=seed0,
        embedding=embedding,
        **(dict(steps=0, lr=0.0, init_scale=0.0) if model == "hebbian" else config.identity()),
        **out,
        fraction_all_stored=float(np.mean(out["all_stored"])),
        seconds=time.perf_counter() - t,
    )
    if keep_metrics:
        res["_metrics"] = met
    return res
