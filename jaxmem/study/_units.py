"""Units of work, one registry: a kind's unit is a config (the identity of its record file)
and a function that runs it into one record per seed.

- `threshold`: a seed group's certified, Adam or Hebbian thresholds (`point_configs`).
- `maxmargin`: the max-margin memories of a seed group at given `p` (`margin_configs`).
- `mechanism`: the same, summarised beside the Hebbian memory and the theory (the mechanism
  study's `mechanism_configs`).
- a `jaxmem sweep` ensemble at one fixed `p` (configs without `kind`, `make_config`).

Seed `s` is the nested task `make_task(fold_in(key(seed0), s), p=p_max)`: the same task at
every `p`, for every solver.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import jax
import numpy as np

from .. import theory as th
from .._criteria import Accuracy, parse_criterion
from .._experiment import run_experiment
from .._models import hebbian_weight, MODELS as MEMORY_MODELS, rank_of, resolve_kappa
from .._names import DEFAULT_INIT_SCALE, DEFAULT_LR, DEFAULT_STEPS
from .._plan import default_plan, SearchPlan, tail_plan
from .._tasks import alpha_of, EMBEDDINGS, make_tasks, p_from_alpha, PROBLEMS
from .._threshold import search_thresholds, SOLVERS, Thresholds
from .._train import NO_TRAINING
from .._validate import available_bytes, check_choice, check_int, check_memory, InvalidArgument
from ..solvers._adam import TrainConfig
from ..solvers._constraints import batch_constraints
from ..solvers._decide import DecideConfig
from ..solvers._decider import choose_decider
from ..solvers._margin import max_margin_constraints, MaxMarginConfig
from ..solvers._status import MARGIN_STATUS, STATUS
from ..solvers._working_set import working_set_size
from ._mechanism import normalised_spectrum, run_mechanism_unit, score_table
from ._records import (
    decide_fields,
    ENSEMBLE_KIND,
    envelope,
    finite_or_none,
    KIND,
    kind_of,
    MARGIN_KIND,
    MECHANISM_KIND,
    sweep_settings,
    train_fields,
    unit_settings,
)


THRESHOLD_MODELS = ("full", "factored")


def point_configs(
    *,
    d: int,
    problem: str,
    model: str = "full",
    kappa: float | None = None,
    solver: str = "certified",
    seeds: int = 64,
    seed0: int = 0,
    group: int = 16,
    embedding: str = "gaussian",
    decide_config: DecideConfig = DecideConfig(),
    adam_config: TrainConfig = TrainConfig(),
    plan: SearchPlan | None = None,
    resolution: int | None = None,
    criterion: str = "all",
) -> list[dict]:
    """The units of work (seed groups) of one measurement point, each a canonical config dict
    (the identity of its record file). Validates every field. `resolution`, where given,
    replaces the plan's (`SearchPlan.resolution`; 1 finds every threshold exactly). `criterion`:
    `"all"` (top-1; the config then names none, as before the setting existed) or `"tail:r"`
    (certified, full rank; the config names it)."""
    d = check_int("d", d, 2)
    check_choice("problem", problem, ("op", "dp"))
    check_choice("model", model, THRESHOLD_MODELS)
    check_choice("solver", solver, SOLVERS)
    check_choice("embedding", embedding, EMBEDDINGS)
    seeds = check_int("seeds", seeds, 1, 1_000_000)
    seed0 = check_int("seed0", seed0, 0, 2**31 - 1)
    group = check_int("group", group, 1)
    if model == "factored" and kappa is None:
        raise InvalidArgument(
            "kappa is required with model 'factored' (the rank m = kappa d; 1 is full rank)"
        )
    _, kappa = resolve_kappa(model, d, kappa)
    crit = parse_criterion(criterion)
    if isinstance(crit, Accuracy):
        raise InvalidArgument("criterion: an accuracy criterion is Adam's; set adam_config.accuracy")
    if not crit.top1 and (solver, model) != ("certified", "full"):
        raise InvalidArgument(
            f"criterion {crit.name!r} is measured by the certified solver on the full-rank memory; "
            f"got solver {solver!r}, model {model!r}"
        )
    if solver != "adam" and adam_config.accuracy != 1.0:
        raise InvalidArgument("an accuracy criterion is Adam's (solver 'adam'); a certificate is for all")
    if solver == "hebbian" and (problem, model) != ("op", "full"):
        raise InvalidArgument(
            f"solver 'hebbian' is the OP's full-rank rule; got problem {problem!r}, model {model!r}"
        )
    if plan is None and solver == "hebbian":
        # the rule fails far below the optimal capacity (alpha ~ 0.05 at CPU sizes): scan to 0.15
        if alpha_of(d, 2) / 2 > 0.15:
            raise InvalidArgument(f"d must be >= 3 for the Hebbian scan (to the load 0.15), got {d}")
        plan = SearchPlan(p0=2, p_max=p_from_alpha(d, 0.15))
    if plan is None and not crit.top1:
        plan = tail_plan(d, crit.r)
    if plan is None:
        plan = default_plan(d, kappa)
        if adam_config.accuracy != 1.0:
            # a partial criterion passes well above the all-stored capacity: search up to the
            # d^2 / 2 of Nichani, Lee and Bietti's bisection, bracketing by 10% steps
            plan = SearchPlan(
                p0=plan.p0, p_max=max(plan.p_max, d * d // 2), step=1.1, resolution=plan.resolution
            )
    if resolution is not None:
        plan = dataclasses.replace(plan, resolution=check_int("resolution", resolution, 1))
    base = dict(
        kind=KIND,
        d=d,
        problem=problem,
        model=model,
        kappa=kappa,
        solver=solver,
        seed0=seed0,
        embedding=embedding,
        plan=plan.fields(),
    )
    if not crit.top1:
        base["criterion"] = crit.name
    if solver != "hebbian":  # Adam's outcomes are verified with the decider's tol, stream, block
        decide = decide_fields(decide_config)
        if solver == "certified" and crit.top1:
            decide["decider"] = choose_decider(
                decide_config, d=d, problem=problem, factored=model == "factored"
            )
            if decide["decider"] == "working-set":
                decide["working_set"] = working_set_size(decide_config, d)
        base["decide"] = decide
    if solver == "adam":
        base["adam"] = train_fields(adam_config)
    batch = min(group, seeds)
    need = unit_bytes(d=d, p=plan.p_max, batch=batch, memory=decide_config.memory)
    if not crit.top1:
        need = tail_unit_bytes(
            d=d, p=plan.p_max, batch=batch, memory=decide_config.memory, dp=problem == "dp"
        )
    check_memory("d, seeds and group", need)
    return [dict(base, seeds=[s, min(seeds, s + group)]) for s in range(0, seeds, group)]


def unit_bytes(*, d: int, p: int, batch: int, memory: int) -> float:
    """A lower estimate of a threshold unit's memory: per instance of the batch, the task's
    inputs and targets (`2 p d`), one tile of scores (`p x min(p, 256)`: larger ones are
    streamed), and the decider's `W` with its L-BFGS history (`(2 memory + 4) d^2`), in
    float32."""
    return 4.0 * batch * (2 * p * d + p * min(p, 256) + (2 * memory + 4) * d * d)


def tail_unit_bytes(*, d: int, p: int, batch: int, memory: int, dp: bool) -> float:
    """A lower estimate of a tail-average unit's memory: per instance the dense decider's
    `p x p` margins and about seven temporaries of their size, the DP's `p x p x d` candidates,
    and `(W, s)` with its L-BFGS history, in float32."""
    return 4.0 * batch * (8 * p * p + (p * p * d if dp else 2 * p * d) + (2 * memory + 4) * (d * d + p))


# A seed none of whose `p` failed is searched again up to this multiple of the plan's `p_max`
# (doubling); one still unbracketed there is recorded as censored (its CI end is open).
EXTEND = 2


def _tasks(cfg: dict, seeds, p: int):
    return make_tasks(
        jax.random.key(cfg["seed0"]),
        seeds=seeds,
        d=cfg["d"],
        p=p,
        problem=cfg["problem"],
        embedding=cfg["embedding"],
    )


def _search_bracketing(cfg, plan, search, *, memory, log) -> tuple[Thresholds, int]:
    """`search(tasks, plan, start)` over the unit's seeds; seeds censored at `plan.p_max` are
    searched again with `p_max` doubled (tasks are nested: the longer task extends the shorter)
    up to `EXTEND` times the plan's. **Returns:** the merged `Thresholds` and the last `p_max`."""
    s0, s1 = cfg["seeds"]
    th = search(_tasks(cfg, range(s0, s1), plan.p_max), plan, None)
    limit = EXTEND * plan.p_max
    while True:
        again = np.flatnonzero(th.censored & ~th.undecided)
        p_max = min(limit, 2 * plan.p_max)
        need = unit_bytes(d=cfg["d"], p=p_max, batch=again.size, memory=memory)
        if not again.size or plan.p_max >= limit or need > available_bytes():
            return th, plan.p_max
        plan = dataclasses.replace(plan, p_max=p_max)
        if log is not None:
            print(f"  {again.size} seeds unbracketed: p_max raised to {plan.p_max}", file=log, flush=True)
        more = search(_tasks(cfg, s0 + again, plan.p_max), plan, th.lo[again])
        lo, hi, und = th.lo.copy(), th.hi.copy(), th.undecided.copy()
        lo[again], und[again] = more.lo, more.undecided
        hi[th.censored] = plan.p_max + 1  # none failed: the old `p_max + 1` moves with `p_max`
        hi[again] = more.hi
        decisions = list(th.decisions)
        for j, i in enumerate(again):
            decisions[i] = decisions[i] + more.decisions[j]
        rebound = None
        if th.rebound is not None:
            rebound = th.rebound.copy()
            rebound[again] |= more.rebound
        th = Thresholds(
            lo=lo,
            hi=hi,
            undecided=und,
            decisions=decisions,
            seconds=th.seconds + more.seconds,
            p_max=plan.p_max,
            rebound=rebound,
        )


def run_unit(cfg: dict, *, log=None) -> list[dict]:
    """Search the thresholds of one seed group; one record per seed."""
    plan = SearchPlan(**cfg["plan"])
    s0, s1 = cfg["seeds"]
    dcfg, acfg = unit_settings(cfg)
    rank = rank_of(cfg["d"], kappa=cfg["kappa"]) if cfg["model"] == "factored" else None
    search = lambda tasks, plan, start: search_thresholds(
        tasks,
        plan=plan,
        solver=cfg["solver"],
        rank=rank,
        decide_config=dcfg,
        adam_config=acfg,
        log=log,
        start=start,
        criterion=cfg.get("criterion", "all"),
    )
    th, p_max = _search_bracketing(cfg, plan, search, memory=dcfg.memory, log=log)
    recs = []
    for j, s in enumerate(range(s0, s1)):
        recs.append(
            envelope(
                cfg,
                s,
                p_star=int(th.lo[j]),
                p_hi=int(th.hi[j]),
                exact=bool(th.exact[j]),
                censored=bool(th.censored[j]),
                p_max=p_max,
                undecided=bool(th.undecided[j]),
                decisions=[
                    dict(
                        p=p,
                        status=STATUS[st],
                        margin=finite_or_none(m),
                        margin_bound=finite_or_none(b),
                        iterations=it,
                    )
                    for p, st, m, b, it in th.decisions[j]
                ],
                seconds=th.seconds / (s1 - s0),
                **({} if th.rebound is None else dict(rebound=bool(th.rebound[j]))),
            )
        )
    return recs


def release_compiled(limit: int = 40_000) -> None:
    """Drop JAX's compiled programs once this process holds more than `limit` memory maps.

    Every compiled executable keeps memory maps, and a long measurement compiles many shapes:
    past the kernel's `vm.max_map_count` (65530 by default) LLVM fails with "Cannot allocate
    memory". Cleared caches cost recompiling the next unit's shapes (at 20000 the demo's own
    d = 32 searches were seen to recompile, 30 s of it); one unit adds at most about 4000 maps.
    """
    try:
        with open("/proc/self/maps") as f:
            n = sum(1 for _ in f)
    except OSError:
        return
    if n > limit:
        jax.clear_caches()


def run_margin_unit(cfg: dict) -> list[dict]:
    """Max-margin memories of one unit; one record per seed with the normalised singular values
    (`|W|_F^2 = d^2 F(kappa)`, divided by `sqrt d`), the normalised target and best-competitor
    scores of the `p` inputs, the certified margin bounds, and (full-rank OP) the Hebbian
    memory's scores at the same `(d, p)`."""
    d, ps = cfg["d"], np.asarray(cfg["p"])
    P = int(ps.max())
    seeds = range(*cfg["seeds"])
    key = jax.random.key(cfg["seed0"])
    tasks = make_tasks(key, seeds=seeds, d=d, p=P, problem=cfg["problem"], embedding=cfg["embedding"])
    cons = batch_constraints(tasks, ps, P, stream=False)
    rank = rank_of(d, kappa=cfg["kappa"]) if cfg["model"] == "factored" else None
    t = time.perf_counter()
    mm = max_margin_constraints(
        cons, rank=rank, config=MaxMarginConfig(gap=cfg["gap"], rank_rounds=cfg["rank_rounds"])
    )
    seconds = (time.perf_counter() - t) / ps.size
    F = float(th.F(cfg["kappa"]))
    hebbian = cfg["problem"] == "op" and rank is None
    recs = []
    for j, s in enumerate(seeds):
        c = jax.tree.map(lambda x: np.asarray(x[j], np.float64), cons)
        p = int(ps[j])
        scores = _scores(c, mm.weight[j], p, "max_margin")
        if hebbian:
            # an OP's first p candidates are its targets
            scores.update(_scores(c, hebbian_weight(c.inputs[:p], c.candidates[:p]), p, "hebbian"))
        rec = envelope(
            cfg,
            s,
            p=p,
            margin=finite_or_none(mm.margin[j]),
            margin_bound=finite_or_none(mm.margin_bound[j]),
            gap=finite_or_none(mm.gap[j]),
            status=MARGIN_STATUS[int(mm.status[j])],
            iterations=int(mm.iterations[j]),
            active=mm.active[j, :p].tolist(),
            singular_values=normalised_spectrum(mm.weight[j], rank or d, F).tolist(),
            seconds=seconds,
            **scores,
        )
        recs.append(rec)
    return recs


def _scores(c, W, p, name):
    """Target and best-competitor scores of the first `p` inputs in units of `|W e_mu|`."""
    t = score_table(W, c.inputs, c.candidates, p)
    return {f"{name}_target": t["target"].tolist(), f"{name}_best": t["best"].tolist()}


@dataclass(frozen=True)
class Knobs:
    """Training knobs shared by every config of a sweep."""

    steps: int = DEFAULT_STEPS
    lr: float = DEFAULT_LR
    init_scale: float = DEFAULT_INIT_SCALE
    seeds: int = 8
    seed0: int = 0
    embedding: str = "gaussian"
    precision: str = "highest"

    def train_config(self) -> TrainConfig:
        """The validated `TrainConfig` these knobs describe."""
        return TrainConfig(steps=self.steps, lr=self.lr, init_scale=self.init_scale, precision=self.precision)


def make_config(*, d, p, problem, model, kappa, knobs: Knobs) -> dict:
    """Canonical config dict (the record's identity). Validates every field."""
    d = check_int("d", d, 2)
    p = check_int("p", p, 2)
    check_choice("problem", problem, PROBLEMS)
    check_choice("model", model, MEMORY_MODELS)
    _, kappa = resolve_kappa(model, d, kappa)
    hebb = model == "hebbian"
    check_int("seeds", knobs.seeds, 1, 1_000_000)
    check_int("seed0", knobs.seed0, 0, 2**31 - 1)  # keys alias beyond 32 bits
    check_choice("embedding", knobs.embedding, EMBEDDINGS)
    # validated for the Hebbian rule too (a bad value is refused, not ignored); the rule has no
    # training knobs, and its records store zeros for them
    train = train_fields(knobs.train_config())
    return dict(
        d=d,
        p=p,
        problem=problem,
        model=model,
        kappa=kappa,
        **(NO_TRAINING if hebb else train),
        seeds=knobs.seeds,
        seed0=knobs.seed0,
        embedding=knobs.embedding,
    )


def run_records(cfg: dict) -> list[dict]:
    """Run one config's vmapped ensemble; one record per seed, config embedded."""
    res = run_experiment(
        d=cfg["d"],
        p=cfg["p"],
        problem=cfg["problem"],
        model=cfg["model"],
        kappa=cfg["kappa"] if cfg["model"] == "factored" else None,
        seeds=cfg["seeds"],
        seed0=cfg["seed0"],
        # exactly the config's settings (the Hebbian rule has none)
        config=None if cfg["model"] == "hebbian" else sweep_settings(cfg),
        embedding=cfg["embedding"],
    )
    recs = []
    for s, outcome in enumerate(res.outcomes):
        recs.append(
            envelope(
                cfg,
                s,
                alpha=alpha_of(cfg["d"], cfg["p"]),
                **outcome.to_json(),
                seconds=res.seconds / cfg["seeds"],
            )
        )
    return recs


# the unit kinds: a config's kind (`kind_of`: an ensemble where it names none) names its runner
UNITS = {
    KIND: lambda cfg, log: run_unit(cfg, log=log),
    MARGIN_KIND: lambda cfg, log: run_margin_unit(cfg),
    MECHANISM_KIND: lambda cfg, log: run_mechanism_unit(cfg),
    ENSEMBLE_KIND: lambda cfg, log: run_records(cfg),
}


def run_one(cfg: dict, *, log=None) -> list[dict]:
    """The records of one unit of work, by its kind's runner (`UNITS`); `log` takes a threshold
    search's progress lines."""
    kind = kind_of(cfg)
    if kind not in UNITS:
        raise InvalidArgument(f"unit kind must be one of {sorted(map(str, UNITS))}; got {kind!r}")
    release_compiled()
    return UNITS[kind](cfg, log)
