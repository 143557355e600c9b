"""What to measure: the capacity study's presets and `run_study`, one capacity point
(`capacity`), and fixed-`p` sweeps.

`jaxmem demo` runs `DEMO` (CPU sized), `scripts/reproduce_paper.py` runs `PAPER` (accelerator
sized) or `QUICK`; the code path is the same. Every part is a unit of work with its own record
file, so an interrupted study resumes where it stopped, and `jaxmem capacity DIR` reads the same
threshold records as the report's capacity table.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field

import equinox as eqx
import numpy as np

from .._models import rank_of
from .._tasks import p_from_alpha
from .._threshold import SearchPlan
from .._train import TrainConfig
from .._validate import check_int, check_real, InvalidArgument
from ..solvers._decide import DecideConfig
from ._analysis import threshold_rows
from ._records import config_id, MARGIN_KIND, select, Store
from ._runner import check_jobs, measure, run_units
from ._units import Knobs, make_config, point_configs


def _pairs(name, value):
    try:
        out = tuple((int(d), int(n)) for d, n in value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{name} must be pairs (d, seeds), got {value!r}") from None
    for d, n in out:
        check_int(f"{name} d", d, 2)
        check_int(f"{name} seeds", n, 1)
    return out


def _points(name, value, group):
    """`(d, seeds, group)` of each point of a `ScalingSpec`: `(d, seeds)` pairs (`_pairs`), each
    with an optional third entry, its group (default `group`)."""
    try:
        items = [tuple(t) for t in value]
        if any(len(t) not in (2, 3) for t in items):
            raise ValueError
    except (TypeError, ValueError):
        raise InvalidArgument(
            f"{name} must be pairs (d, seeds) or triples (d, seeds, group), got {value!r}"
        ) from None
    pairs = _pairs(name, [t[:2] for t in items])
    groups = [check_int(f"{name} group", t[2] if len(t) == 3 else group, 1) for t in items]
    return tuple((d, n, g) for (d, n), g in zip(pairs, groups))


class StudySpec(eqx.Module):
    """What a study measures.

    **Arguments:**

    - `certified`: `(d, seeds)` pairs: certified capacity of the OP and the DP.
    - `adam`: `(d, seeds)` pairs: Adam (the paper's protocol, `steps`, `lr`) on the same nested
      OP tasks, seeds `0..seeds-1` (a subset of the certified ones).
    - `hebbian`: `(d, seeds)` pairs: the Hebbian rule's all-stored threshold (OP).
    - `factored_d`, `kappas`, `factored_seeds`, `factored_adam_seeds`: rank-constrained memories
      `W = Q R^T` (certified lower bound, and Adam) at one `d` (0: none); `factored_max_iter`: the
      iteration budget of a rank-`m` decision's rank phase (`DecideConfig.rank_max_iter`; an
      undecided instance lowers the bound, never raises it).
    - `spectra_seeds`: max-margin memories at `factored_d` for the spectra and scores (OP, DP,
      and the factored memory at `spectra_kappa`), at each seed's certified threshold.
    - `peer`, `peer_seeds`, `peer_lr`: Nichani, Lee and Bietti's protocol (unit-norm embeddings,
      Adam to training accuracy 0.99) and the certified all-stored capacity of the same tasks.
    - `group`: seeds per unit of work.
    """

    certified: tuple
    adam: tuple
    hebbian: tuple
    factored_d: int
    kappas: tuple
    factored_seeds: int
    factored_adam_seeds: int
    spectra_seeds: int
    spectra_kappa: float
    peer: tuple
    peer_seeds: int
    peer_lr: float = 5.0
    factored_max_iter: int = DecideConfig().rank_max_iter
    steps: int = 5000
    lr: float = 3e-2
    group: int = 16

    def __check_init__(self):
        for name in ("certified", "adam", "hebbian"):
            _pairs(name, getattr(self, name))
        check_int("factored_d", self.factored_d, 0)
        if self.factored_d == 1:
            raise InvalidArgument("factored_d must be 0 (none) or at least 2, got 1")
        for k in self.kappas:
            check_real("kappas", k, low=0.0, low_open=True, high=1.0)
        check_real("spectra_kappa", self.spectra_kappa, low=0.0, low_open=True, high=1.0)
        check_int("factored_max_iter", self.factored_max_iter, 1)
        for name in ("factored_seeds", "factored_adam_seeds", "spectra_seeds", "peer_seeds", "steps"):
            check_int(name, getattr(self, name), 0)
        for d in self.peer:
            check_int("peer d", d, 2)
        check_real("peer_lr", self.peer_lr, low=0.0, low_open=True)
        check_real("lr", self.lr, low=0.0, low_open=True)
        check_int("group", self.group, 1)


# The CPU study of `jaxmem demo` (seeds chosen for 95% CIs no wider than 0.03 in alpha: at
# d = 16 the threshold is discrete in steps of 0.02, so the DP needs 160 seeds for one step).
DEMO = StudySpec(
    certified=((16, 160), (24, 64), (32, 48), (48, 16)),
    adam=((16, 8), (24, 8), (32, 8)),
    hebbian=((16, 256), (24, 256), (32, 256), (48, 128), (64, 128), (96, 64), (128, 64)),
    factored_d=16,
    kappas=(0.25, 0.5, 0.75),
    factored_seeds=8,
    factored_adam_seeds=4,
    spectra_seeds=6,
    spectra_kappa=0.5,
    peer=(8, 16),
    peer_seeds=8,
    factored_max_iter=500,
)


# The accelerator study of `scripts/reproduce_paper.py`.
PAPER = StudySpec(
    certified=(
        (16, 256),
        (24, 128),
        (32, 128),
        (48, 64),
        (64, 64),
        (96, 64),
        (128, 64),
        (192, 64),
        (256, 64),
    ),
    adam=((16, 64), (24, 64), (32, 64), (48, 64), (64, 64), (128, 64)),
    hebbian=tuple((d, 1024) for d in (16, 24, 32, 48, 64, 96, 128, 192, 256)),
    factored_d=32,
    kappas=(0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875),
    factored_seeds=64,
    factored_adam_seeds=32,
    spectra_seeds=32,
    spectra_kappa=0.5,
    peer=(8, 11, 16, 22, 32, 45, 64),
    peer_seeds=16,
)


# A minutes-long CPU check of the same path (`reproduce_paper.py --quick`, and the tests).
QUICK = StudySpec(
    certified=((8, 16), (12, 16)),
    adam=((8, 8),),
    hebbian=((8, 64), (16, 64)),
    factored_d=8,
    kappas=(0.5,),
    factored_seeds=8,
    factored_adam_seeds=4,
    spectra_seeds=4,
    spectra_kappa=0.5,
    peer=(8,),
    peer_seeds=4,
    steps=2000,
)


class ScalingSpec(eqx.Module):
    """The scaling study: certified capacities of the OP and the DP against `d`, for the
    equivalence of the two problems as `d` grows (`scripts/scaling.py`).

    **Arguments:**

    - `op`, `dp`: the certified full-rank points of each problem, as `(d, seeds)`, or
      `(d, seeds, group)` where a point needs its own group size (the DP's held candidates,
      `p^2 d` floats per seed, must fit `HOLD_BYTES` for a whole group).
    - `group`: seeds per unit of work where a point does not say.
    """

    op: tuple
    dp: tuple
    group: int = 16

    def __check_init__(self):
        check_int("group", self.group, 1)
        _points("op", self.op, self.group)
        _points("dp", self.dp, self.group)


# The CPU scaling study: every `d` of both problems in under 3 hours on the 2-core machine (163
# min: the sum of its units' search times in `docs/scaling`; docs/results/scaling.md). Seeds:
# 64 where a point takes minutes; at d = 16, 24 and 32 one step of `p` is 0.020,
# 0.010 and 0.006 in `alpha`, and the 95% CIs of the differences are 0.02 to 0.04 wide; at
# d = 48, 128 seeds give 0.012 (OP - DP). From d = 64 every difference's CI is at most 0.010
# wide: 32 seeds at d = 96, 16 at 128 (the DP's in groups of 4, whose candidates, 7.3 GB, are
# held in memory; 16 seeds' would be generated at every pass), 8 at 192 and 256 (groups of 4;
# a group took 280 to 394 s at d = 192, 678 to 1101 s at 256).
SCALING = ScalingSpec(
    op=((16, 64), (24, 64), (32, 64), (48, 128), (64, 64), (96, 32), (128, 16), (192, 8, 4), (256, 8, 4)),
    dp=((16, 64), (24, 64), (32, 64), (48, 128), (64, 64), (96, 32), (128, 16, 4)),
)

# More seeds where `SCALING` has few: 32 at d = 128 (OP and DP), 192 and 256 (OP), into the same
# folder (`scripts/scaling.py --more`; its 17 units beyond `SCALING`'s took 173 min).
SCALING_MORE = ScalingSpec(op=((128, 32), (192, 32, 4), (256, 32, 4)), dp=((128, 32, 4),))

# The OP at accelerator sizes (`scripts/scaling.py --accelerator`, one GPU). A group's working
# set holds `p0 k d` float32 candidates per instance: 10.6 GB for 4 at d = 512, 18.3 GB for one
# at d = 1024. Its expected time: docs/results/scaling.md, "Accelerator sizes".
SCALING_ACCELERATOR = ScalingSpec(op=((512, 16, 4), (1024, 8, 1)), dp=())

# The same path in about a minute (tests, and `scripts/scaling.py --quick`).
SCALING_QUICK = ScalingSpec(op=((8, 16), (12, 16)), dp=((8, 16), (12, 16)))


class RankSpec(eqx.Module):
    """The rank study: certified lower bounds on the capacity of `W = Q R^T` of rank
    `m = kappa d`, with Adam on the same model and the full-rank thresholds that bound each seed's
    uncertified gap (`scripts/rank.py`).

    **Arguments:**

    - `points`: `(d, kappas, seeds)`: at each `d`, the certified full-rank thresholds of the OP
      and the DP and the certified rank-`m` lower bounds of both at each `kappa`, on the same
      nested tasks.
    - `adam`: `(d, seeds)`: Adam (the capacity study's protocol, `steps`, `lr`) on the factored
      model of the OP at each `kappa` of that `d`'s point, seeds `0..seeds-1`.
    - `steps`, `lr`: Adam's budget and step size.
    - `group`: seeds per unit of work.
    """

    points: tuple
    adam: tuple
    steps: int = 5000
    lr: float = 3e-2
    group: int = 16

    def __check_init__(self):
        try:
            pts = [(int(d), tuple(float(k) for k in ks), int(n)) for d, ks, n in self.points]
        except (TypeError, ValueError):
            raise InvalidArgument(f"points must be triples (d, kappas, seeds), got {self.points!r}") from None
        for d, ks, n in pts:
            check_int("points d", d, 2)
            check_int("points seeds", n, 1)
            for k in ks:
                check_real("points kappa", k, low=0.0, low_open=True, high=1.0)
        for d, _ in _pairs("adam", self.adam):
            if d not in [p[0] for p in pts]:
                raise InvalidArgument(f"adam d = {d} has no point in points")
        check_int("steps", self.steps, 1)
        check_real("lr", self.lr, low=0.0, low_open=True)
        check_int("group", self.group, 1)


# The CPU rank study (`scripts/rank.py`; docs/results/rank.md). Seeds: 48
# per point: with 32 the DP's CI at kappa = 0.5 was 0.036 wide, the others at most 0.030. d = 48
# is `RANK_LARGE`: its two rank-m units took 11 and 15 minutes, past this preset's 30.
RANK = RankSpec(points=((32, (0.25, 0.5, 0.75), 48),), adam=((32, 16),))

# d = 48 at kappa = 0.5, OP and DP, 16 seeds, into the same folder (`scripts/rank.py --large`).
RANK_LARGE = RankSpec(points=((48, (0.5,), 16),), adam=())

# The same path in under a minute (tests, and `scripts/rank.py --quick`).
RANK_QUICK = RankSpec(points=((8, (0.5,), 8),), adam=((8, 4),), steps=500)


def rank_points(spec: RankSpec) -> list[dict]:
    """The units of work of a rank study: per `d`, the full-rank points, then the rank-`m`
    lower bounds by `kappa`, then Adam on the factored model."""
    adam = dict(_pairs("adam", spec.adam))
    cfg = TrainConfig(steps=spec.steps, lr=spec.lr)
    units = []
    for d, kappas, n in spec.points:
        for problem in ("op", "dp"):
            units += point_configs(d=d, problem=problem, seeds=n, group=spec.group)
        for k in kappas:
            for problem in ("op", "dp"):
                kw = dict(d=d, problem=problem, model="factored", kappa=k, group=spec.group)
                units += point_configs(seeds=n, **kw)
                if d in adam and problem == "op":
                    units += point_configs(seeds=adam[d], solver="adam", adam_config=cfg, **kw)
    return units


def scaling_points(spec: ScalingSpec) -> list[dict]:
    """The units of work of a scaling study, by `d` and then problem (a partial run has the
    small `d` of both problems first)."""
    pts = [(t, "op") for t in _points("op", spec.op, spec.group)]
    pts += [(t, "dp") for t in _points("dp", spec.dp, spec.group)]
    units = []
    for (d, n, g), problem in sorted(pts, key=lambda t: (t[0][0], t[1] == "dp")):
        units += point_configs(d=d, problem=problem, seeds=n, group=g)
    return units


def study_points(spec: StudySpec) -> list[dict]:
    """The threshold units of work of a study (`point_configs` of every point)."""
    adam = TrainConfig(steps=spec.steps, lr=spec.lr)
    peer = TrainConfig(steps=spec.steps, lr=spec.peer_lr, accuracy=0.99)
    pc = lambda **kw: point_configs(group=spec.group, **kw)
    units = []
    for d, n in spec.certified:
        for problem in ("op", "dp"):
            units += pc(d=d, problem=problem, seeds=n)
    for d, n in spec.adam:
        units += pc(d=d, problem="op", seeds=n, solver="adam", adam_config=adam)
    for d, n in spec.hebbian:
        units += point_configs(d=d, problem="op", seeds=n, solver="hebbian", group=n)
    if spec.factored_d:
        d = spec.factored_d
        if d not in [c for c, _ in spec.certified]:
            units += pc(d=d, problem="op", seeds=spec.factored_seeds)
        for k in spec.kappas:
            kw = dict(d=d, problem="op", model="factored", kappa=k)
            dcfg = DecideConfig(rank_max_iter=spec.factored_max_iter)
            units += pc(seeds=spec.factored_seeds, decide_config=dcfg, **kw)
            if spec.factored_adam_seeds:
                units += pc(seeds=spec.factored_adam_seeds, solver="adam", adam_config=adam, **kw)
    for d in spec.peer:
        units += pc(d=d, problem="op", seeds=spec.peer_seeds, embedding="unit")
        units += pc(
            d=d, problem="op", seeds=spec.peer_seeds, embedding="unit", solver="adam", adam_config=peer
        )
    seen, out = set(), []
    for u in units:  # a point listed twice is run once
        if config_id(u) not in seen:
            seen.add(config_id(u))
            out.append(u)
    return out


# the max-margin units' certified gap and rank alternations (MaxMarginConfig)
MARGIN_GAP = 1e-2
MARGIN_ROUNDS = 10


def margin_configs(spec: StudySpec, records: list[dict]) -> list[dict]:
    """The max-margin units of a study: at `factored_d`, OP and DP full rank and the factored
    OP at `spectra_kappa`, for the first `spectra_seeds` seeds, each at its certified threshold
    `p*` (read from `records`, so the unit says exactly which `p` it solved)."""
    if not spec.factored_d or not spec.spectra_seeds:
        return []
    d = spec.factored_d
    kappa = rank_of(d, kappa=spec.spectra_kappa) / d
    out = []
    for problem, model, k in (("op", "full", 1.0), ("dp", "full", 1.0), ("op", "factored", kappa)):
        thr = {
            r["seed"]: r
            for r in select(
                records, d=d, problem=problem, model=model, kappa=k, solver="certified", embedding="gaussian"
            )
        }
        n = 0  # seeds 0..n-1, each with its threshold
        while n < spec.spectra_seeds and n in thr and thr[n]["p_star"] >= 2:
            n += 1
        if not n:
            continue
        out.append(
            dict(
                kind=MARGIN_KIND,
                d=d,
                problem=problem,
                model=model,
                kappa=k,
                seed0=thr[0]["config"]["seed0"],
                embedding="gaussian",
                seeds=[0, n],
                p=[thr[s]["p_star"] for s in range(n)],
                gap=MARGIN_GAP,
                rank_rounds=MARGIN_ROUNDS,
            )
        )
    return out


def run_study(spec: StudySpec, out: str, *, log=None, jobs: int = 1) -> dict:
    """Measure everything `spec` asks for into the folder `out` (resumable: finished units are
    read, not rerun), by `jobs` worker processes (`_workers`; the records do not depend on it).

    **Returns:** `dict(seconds=..., units=...)`."""
    t0 = time.perf_counter()
    check_jobs(jobs)
    store = Store(out)
    points = study_points(spec)
    recs = measure(points, store=store, log=log, jobs=jobs)
    margins = margin_configs(spec, recs)
    if log is not None and any(not store.done(c) for c in margins):
        print(f"[max-margin memories: {len(margins)} units]", file=log, flush=True)
    run_units(margins, out, jobs=jobs, log=log)
    return dict(seconds=time.perf_counter() - t0, units=len(points) + len(margins))


class CapacityEstimate(eqx.Module):
    """One measured capacity point (host side): per-seed thresholds and their median.

    `p_c` is the median threshold, `alpha_c = p_c ln p_c / d^2`, `[ci_low, ci_high]` its
    distribution-free 95% interval in `alpha`; `p_star` and `p_hi` bracket each seed's threshold
    (`p_star` exactly when `p_hi == p_star + 1`); `undecided` counts seeds whose search stopped at
    an undecided instance; `theory_alpha_c` is `alpha_c(p_c, kappa)` of docs/science.md 2.1.
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
    )
    store = None if out is None else Store(out)
    if store is not None:
        call = dict(d=d, problem=problem, seeds=seeds, model=model, kappa=kappa, solver=solver, seed0=seed0)
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
    )


@dataclass
class SweepSpec:
    ds: list[int]
    problems: list[str] = field(default_factory=lambda: ["op"])
    models: list[str] = field(default_factory=lambda: ["full"])
    kappas: list[float] | None = None  # factored only; default 1
    alphas: list[float] | None = None
    ps: list[int] | None = None
    knobs: Knobs = Knobs()

    def configs(self) -> list[dict]:
        if (self.alphas is None) == (self.ps is None):
            raise InvalidArgument("give exactly one of alphas and ps")
        if self.kappas is not None and "factored" not in self.models:
            raise InvalidArgument(f"kappa applies to the factored model only, got kappa={self.kappas}")
        out, seen = [], set()
        for d in self.ds:
            ps = self.ps if self.ps is not None else [p_from_alpha(d, a) for a in self.alphas]
            for problem in self.problems:
                for model in self.models:
                    for kappa in (self.kappas or [1.0]) if model == "factored" else [None]:
                        for p in ps:
                            cfg = make_config(
                                d=d, p=p, problem=problem, model=model, kappa=kappa, knobs=self.knobs
                            )
                            if config_id(cfg) not in seen:
                                seen.add(config_id(cfg))
                                out.append(cfg)
        return out


def run_sweep(spec: SweepSpec, out: str, *, shard: tuple[int, int] = (0, 1), log=sys.stderr) -> Store:
    """Run every config of `spec` (this process's `shard` of them) into `out`, skipping done
    ones. **Returns:** the `Store`."""
    store = Store(out)
    measure(spec.configs(), store=store, shard=shard, log=log)
    return store
