"""One ensemble experiment: a config (d, p, problem, model, kappa, seeds, knobs) -> outcome.

Shared by `jaxmem train`, the sweeps and the demo, so each of them runs the same code path.
"""

from __future__ import annotations

import time

import equinox as eqx
import jax
import numpy as np

from ._metrics import ensemble_metrics
from ._models import hebbian, MODELS, resolve_kappa
from ._tasks import alpha_of, EMBEDDINGS, make_tasks, MATERIALISE_LIMIT, p_from_alpha, PROBLEMS
from ._train import NO_TRAINING, outcomes, padded_size, train, train_bytes
from ._validate import check_choice, check_int, check_memory, InvalidArgument
from .solvers._adam import TrainConfig


def resolve_p(d: int, p: int | None, alpha: float | None) -> int:
    if (p is None) == (alpha is None):
        raise InvalidArgument("give exactly one of p and alpha")
    return check_int("p", p, 2) if p is not None else p_from_alpha(d, alpha)


class Experiment(eqx.Module):
    """One ensemble experiment: its config, one `Outcome` per seed, and its wall time."""

    d: int
    p: int
    problem: str
    model: str
    kappa: float
    m: int
    seed0: int
    embedding: str
    train: dict
    outcomes: list
    seconds: float

    def to_json(self) -> dict:
        """The config (the training settings whole under `train`) and per-seed lists of the
        outcome fields (no per-input detail)."""
        outs = [o.to_json(detail=False) for o in self.outcomes]
        per = {k: [o[k] for o in outs] for k in outs[0]}
        return dict(
            d=self.d,
            p=self.p,
            alpha=alpha_of(self.d, self.p),
            problem=self.problem,
            model=self.model,
            kappa=self.kappa,
            m=self.m,
            seeds=len(self.outcomes),
            seed0=self.seed0,
            embedding=self.embedding,
            train=self.train,
            **per,
            fraction_all_stored=float(np.mean(per["all_stored"])),
            seconds=self.seconds,
        )


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
) -> Experiment:
    """Train (or build, for Hebbian) `seeds` memories.

    Seed `s` uses task key `fold_in(key(seed0), s)`; the memory's initialisation comes from
    the task, so any seed can be rerun alone with the same numbers.

    **Arguments:** the config (`d`, `p` or `alpha`, `problem`, `model`, `kappa`, `seeds`,
    `seed0`, `embedding`) and the `TrainConfig` (default `TrainConfig()`).

    **Returns:** an `Experiment`.
    """
    d = check_int("d", d, 2)
    check_choice("problem", problem, PROBLEMS)
    check_choice("model", model, MODELS)
    check_choice("embedding", embedding, EMBEDDINGS)
    seeds = check_int("seeds", seeds, 1)
    p = resolve_p(d, p, alpha)
    config = TrainConfig() if config is None else config
    m, kappa_eff = resolve_kappa(model, d, kappa)
    # trained at a padded size (masked), so that a sweep over p compiles once per bucket
    P = p if model == "hebbian" else padded_size(p, d)
    dp_materialised = problem == "dp" and P * P * d <= MATERIALISE_LIMIT
    check_memory("d, p and seeds", train_bytes(seeds, d, P, m, dp_materialised))
    t = time.perf_counter()
    tasks = make_tasks(jax.random.key(seed0), n=seeds, d=d, p=P, problem=problem, embedding=embedding)
    if model == "hebbian":
        met = ensemble_metrics(hebbian(tasks), tasks)
        stored = np.asarray(met.stored)
        outs = outcomes(
            met,
            accuracy=stored.mean(axis=1),
            all_stored=stored.all(axis=1),
            steps_to_store=[0 if s else None for s in stored.all(axis=1)],
            diverged=[False] * seeds,
            final_loss=[None] * seeds,
        )
    else:
        run = train(model, tasks, config, n=p, m=m if model == "factored" else None, progress=progress)
        outs = run.outcomes()
    return Experiment(
        d=d,
        p=p,
        problem=problem,
        model=model,
        kappa=kappa_eff,
        m=m,
        seed0=seed0,
        embedding=embedding,
        train=dict(NO_TRAINING) if model == "hebbian" else config.identity(),
        outcomes=outs,
        seconds=time.perf_counter() - t,
    )
