"""What to measure: the capacity study's presets and `run_study`, one capacity point
(`capacity`), and fixed-`p` sweeps.

`jaxmem demo` runs `DEMO` (CPU sized), `scripts/reproduce_paper.py` runs `PAPER` (accelerator
sized) or `QUICK`; the code path is the same. Every part is a unit of work with its own record
file, so an interrupted study resumes where it stopped, and `jaxmem capacity DIR` reads the same
threshold records as the report's capacity table.
"""

from __future__ import annotations

import json

import equinox as eqx
import numpy as np

from .._plan import SearchPlan
from .._validate import check_int, InvalidArgument
from ..solvers._adam import TrainConfig
from ..solvers._decide import DecideConfig
from ._analysis import threshold_rows
from ._records import Store
from ._runner import measure
from ._units import point_configs


def seed_pairs(name, value):
    try:
        out = tuple((int(d), int(n)) for d, n in value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{name} must be pairs (d, seeds), got {value!r}") from None
    for d, n in out:
        check_int(f"{name} d", d, 2)
        check_int(f"{name} seeds", n, 1)
    return out


def seed_points(name, value, group):
    """`(d, seeds, group)` of each point of a `ScalingSpec`: `(d, seeds)` pairs (`seed_pairs`), each
    with an optional third entry, its group (default `group`)."""
    try:
        items = [tuple(t) for t in value]
        if any(len(t) not in (2, 3) for t in items):
            raise ValueError
    except (TypeError, ValueError):
        raise InvalidArgument(
            f"{name} must be pairs (d, seeds) or triples (d, seeds, group), got {value!r}"
        ) from None
    pairs = seed_pairs(name, [t[:2] for t in items])
    groups = [check_int(f"{name} group", t[2] if len(t) == 3 else group, 1) for t in items]
    return tuple((d, n, g) for (d, n), g in zip(pairs, groups))


class CapacityEstimate(eqx.Module):
    """One measured capacity point (host side): per-seed thresholds and their median.

    `p_c` is the median threshold, `alpha_c = p_c ln p_c / d^2` (`p_c / d^2` for the tail
    average: `load`), `[ci_low, ci_high]` its distribution-free 95% interval in `alpha`; `p_star`
    and `p_hi` bracket each seed's threshold (`p_star` exactly when `p_hi == p_star + 1`);
    `undecided` counts seeds whose search stopped at an undecided instance; `theory_alpha_c` is
    `alpha_c(p_c, kappa)` of docs/science.md 2.1 (for the tail average `alpha_G,c(r)`, 2.6).
    """

    d: int
    problem: str
    model: str
    kappa: float
    solver: str
    seeds: int
    p_c: float
    alpha_c: float
    ci_low: float
    ci_high: float
    undecided: int
    theory_alpha_c: float | None
    p_star: np.ndarray
    p_hi: np.ndarray
    criterion: str = "all"
    load: str = "p ln p / d^2"

    def to_json(self) -> dict:
        out = {
            k: getattr(self, k)
            for k in (
                "d",
                "problem",
                "model",
                "kappa",
                "solver",
                "seeds",
                "p_c",
                "alpha_c",
                "ci_low",
                "ci_high",
                "undecided",
                "theory_alpha_c",
            )
        }
        if self.criterion != "all":
            out.update(criterion=self.criterion, load=self.load)
        return dict(out, p_star=self.p_star.tolist(), p_hi=self.p_hi.tolist())


def capacity(
    *,
    d: int,
    problem: str = "op",
    seeds: int = 64,
    model: str = "full",
    kappa: float | None = None,
    solver: str = "certified",
    seed0: int = 0,
    embedding: str = "gaussian",
    decide_config: DecideConfig = DecideConfig(),
    adam_config: TrainConfig = TrainConfig(),
    plan: SearchPlan | None = None,
    out: str | None = None,
    log=None,
    criterion: str = "all",
) -> CapacityEstimate:
    """Measure the capacity at dimension `d` from per-seed thresholds on nested tasks.

    **Arguments:**

    - `d`, `problem` (`"op"`/`"dp"`), `seeds`: the point and its number of seeds.
    - `model`, `kappa`: `"full"`, or `"factored"` with rank fraction `kappa` (a certified lower bound).
    - `solver`: `"certified"` (what the problem allows) or `"adam"` (the paper's protocol).
    - `seed0`: seed `s` is the task `make_task(fold_in(key(seed0), s), ...)`.
    - `embedding`: of the inputs and targets (`EMBEDDINGS`; `"unit"` for Nichani et al.'s).
    - `decide_config`, `adam_config`, `plan`: solver settings and the search plan (default from theory).
    - `out`: optional folder that keeps the records (as `jaxmem capacity --out`: resumable,
      one JSON line per seed under `out/records/`).
    - `log`: optional file for progress lines.
    - `criterion`: what counts as stored: `"all"` (top-1, the default) or `"tail:r"` (the
      target above the mean of its `ceil(r (p - 1))` best competitors; certified, full rank; its
      load is `p / d^2`).

    **Returns:** a `CapacityEstimate`.
    """
    units = point_configs(
        d=d,
        problem=problem,
        model=model,
        kappa=kappa,
        solver=solver,
        seeds=seeds,
        seed0=seed0,
        embedding=embedding,
        decide_config=decide_config,
        adam_config=adam_config,
        plan=plan,
        criterion=criterion,
    )
    store = None if out is None else Store(out)
    if store is not None:
        call = dict(d=d, problem=problem, seeds=seeds, model=model, kappa=kappa, solver=solver, seed0=seed0)
        if criterion != "all":
            call["criterion"] = criterion
        store.note_command(["jaxmem.capacity", json.dumps(dict(call, units=len(units)), sort_keys=True)])
    recs = measure(units, store=store, log=log)
    row = threshold_rows(recs)[0]
    recs = sorted(recs, key=lambda r: r["seed"])
    return CapacityEstimate(
        d=row["d"],
        problem=row["problem"],
        model=row["model"],
        kappa=row["kappa"],
        solver=row["solver"],
        seeds=row["seeds"],
        p_c=row["p_c"],
        alpha_c=row["alpha_c"],
        ci_low=row["ci_low"],
        ci_high=row["ci_high"],
        undecided=row["undecided"],
        theory_alpha_c=row.get("theory_alpha_c"),
        p_star=np.array([r["p_star"] for r in recs]),
        p_hi=np.array([r["p_hi"] for r in recs]),
        criterion=units[0].get("criterion", "all"),
        load=row.get("load", "p ln p / d^2"),
    )
