"""Capacity as a measurement: per-seed thresholds, stored, and estimated with exact CIs.

A measurement point is `(d, problem, model, kappa, solver)` over `seeds` seeds. Seed `s` is the
nested task `make_task(fold_in(key(seed0), s), p=p_max)` (so seed `s` means the same task at
every `p`, for either solver). Seeds run in groups of `group`; each group is one unit of work
whose records (one JSON line per seed: its threshold bracket and every decision tried) are
written atomically to `records/<id>.jsonl`, so an interrupted measurement resumes where it
stopped and several processes can share a folder (`shard`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections import defaultdict

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ._estimate import CapacityRow
from ._models import rank_of, resolve_kappa
from ._solvers._decide import DecideConfig, STATUS
from ._solvers._dispatch import choose_decider
from ._sweep import config_id, Store
from ._tasks import alpha_of, EMBEDDINGS, make_task, p_from_alpha
from ._threshold import (
    default_plan,
    logistic_cross_check,
    median_capacity,
    search_thresholds,
    SearchPlan,
    SOLVERS,
    Thresholds,
)
from ._train import TrainConfig
from ._validate import available_bytes, check_choice, check_int, check_memory, InvalidArgument


RECORD_VERSION = 1
KIND = "threshold"
MODELS = ("full", "factored")


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
) -> list[dict]:
    """The units of work (seed groups) of one measurement point, each a canonical config dict
    (the identity of its record file). Validates every field."""
    d = check_int("d", d, 2)
    check_choice("problem", problem, ("op", "dp"))
    check_choice("model", model, MODELS)
    check_choice("solver", solver, SOLVERS)
    check_choice("embedding", embedding, EMBEDDINGS)
    seeds = check_int("seeds", seeds, 1, 1_000_000)
    seed0 = check_int("seed0", seed0, 0, 2**31 - 1)
    group = check_int("group", group, 1)
    _, kappa = resolve_kappa(model, d, kappa)
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
    if plan is None:
        plan = default_plan(d, kappa)
        if adam_config.accuracy != 1.0:
            # a partial criterion passes well above the all-stored capacity: search up to the
            # d^2 / 2 of Nichani, Lee and Bietti's bisection, bracketing by 10% steps
            plan = SearchPlan(p0=plan.p0, p_max=max(plan.p_max, d * d // 2), step=1.1)
    base = dict(
        kind=KIND,
        d=d,
        problem=problem,
        model=model,
        kappa=kappa,
        solver=solver,
        seed0=seed0,
        embedding=embedding,
        plan=dict(p0=plan.p0, p_max=plan.p_max, step=plan.step, pad=plan.pad),
    )
    if solver != "hebbian":  # Adam's outcomes are verified with the decider's tol, stream, block
        decide = decide_fields(decide_config)
        if solver == "certified":
            decide["decider"] = choose_decider(
                decide_config, d=d, problem=problem, factored=model == "factored"
            )
        base["decide"] = decide
    if solver == "adam":
        base["adam"] = train_fields(adam_config)
    batch = min(group, seeds)
    check_memory(
        "d, seeds and group", unit_bytes(d=d, p=plan.p_max, batch=batch, memory=decide_config.memory)
    )
    return [dict(base, seeds=[s, min(seeds, s + group)]) for s in range(0, seeds, group)]


def _plain(x):
    return x.item() if isinstance(x, np.generic) else x


def decide_fields(cfg: DecideConfig) -> dict:
    """Every field of a `DecideConfig`, as a record stores it."""
    return {f.name: _plain(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}


def train_fields(cfg: TrainConfig) -> dict:
    """Every field of a `TrainConfig`, as a record stores it: the optimizer by its `optax` name
    (one that `optax` does not name cannot be recorded, so it is refused)."""
    name = getattr(cfg.optimizer, "__name__", None)
    if name is None or getattr(optax, name, None) is not cfg.optimizer:
        raise InvalidArgument(
            f"adam_config.optimizer must be an optax function (a record names it); got {cfg.optimizer!r}"
        )
    out = {f.name: _plain(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    return dict(out, optimizer=name)


def unit_settings(cfg: dict) -> tuple[DecideConfig, TrainConfig]:
    """The settings a threshold unit runs with, rebuilt from its (normal) config: exactly the
    recorded fields (a solver that uses none gets the defaults)."""
    cfg = normal_config(cfg)
    decide = DecideConfig(**cfg.get("decide", {}))
    adam = dict(cfg.get("adam", {}))
    if "optimizer" in adam:
        adam["optimizer"] = getattr(optax, adam["optimizer"])
    return decide, TrainConfig(**adam)


# the flat settings of threshold configs written before records held their settings whole
_OLD_DECIDE = ("tol", "max_iter", "memory", "decider", "working_set", "outer_every")
_OLD_ADAM = ("steps", "lr", "init_scale", "accuracy", "precision")


def normal_config(cfg: dict) -> dict:
    """A threshold config in the current form: settings whole under `decide` and `adam`. An
    older config (flat `tol`, `max_iter`, `memory`, Adam's `steps`, `lr`, `init_scale`,
    `accuracy`; no `decider` meant dense) becomes the settings it ran with, every other field
    at its default then, which is today's."""
    if cfg.get("kind") != KIND or "decide" in cfg or "adam" in cfg:
        return cfg
    out = {k: v for k, v in cfg.items() if k not in (*_OLD_DECIDE, *_OLD_ADAM)}
    if cfg["solver"] != "hebbian":
        old = {k: cfg[k] for k in _OLD_DECIDE if k in cfg}
        out["decide"] = decide_fields(DecideConfig(**{"decider": "dense", **old}))
    if cfg["solver"] == "adam":
        out["adam"] = train_fields(TrainConfig(**{k: cfg[k] for k in _OLD_ADAM if k in cfg}))
    return out


def normal_records(records: list[dict]) -> list[dict]:
    """`records` with every threshold config in its current form (`normal_config`)."""
    return [r if "decide" in r["config"] else dict(r, config=normal_config(r["config"])) for r in records]


def criterion(cfg: dict) -> float:
    """What counts as stored in a threshold config: the fraction of associations (1.0: all)."""
    return normal_config(cfg).get("adam", {}).get("accuracy", 1.0)


def unit_bytes(*, d: int, p: int, batch: int, memory: int) -> float:
    """A lower estimate of a threshold unit's memory: per instance of the batch, the task's
    inputs and targets (`2 p d`), one tile of scores (`p x min(p, 256)`: larger ones are
    streamed), and the decider's `W` with its L-BFGS history (`(2 memory + 4) d^2`), in
    float32."""
    return 4.0 * batch * (2 * p * d + p * min(p, 256) + (2 * memory + 4) * d * d)


# A seed none of whose `p` failed is searched again up to this multiple of the plan's `p_max`
# (doubling); one still unbracketed there is recorded as censored (its CI end is open).
EXTEND = 2


def _tasks(cfg: dict, seeds, p: int):
    key = jax.random.key(cfg["seed0"])
    tasks = [
        make_task(
            jax.random.fold_in(key, int(s)),
            d=cfg["d"],
            p=p,
            problem=cfg["problem"],
            embedding=cfg["embedding"],
        )
        for s in seeds
    ]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *tasks)


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
        plan = SearchPlan(p0=plan.p0, p_max=p_max, step=plan.step, pad=plan.pad)
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
        th = Thresholds(
            lo=lo,
            hi=hi,
            undecided=und,
            decisions=decisions,
            seconds=th.seconds + more.seconds,
            p_max=plan.p_max,
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
    )
    th, p_max = _search_bracketing(cfg, plan, search, memory=dcfg.memory, log=log)
    cid = config_id(cfg)
    recs = []
    for j, s in enumerate(range(s0, s1)):
        recs.append(
            dict(
                v=RECORD_VERSION,
                kind=KIND,
                id=cid,
                config=cfg,
                seed=s,
                p_star=int(th.lo[j]),
                p_hi=int(th.hi[j]),
                exact=bool(th.exact[j]),
                censored=bool(th.censored[j]),
                p_max=p_max,
                undecided=bool(th.undecided[j]),
                decisions=[
                    dict(p=p, status=STATUS[st], margin=_num(m), margin_bound=_num(b), iterations=it)
                    for p, st, m, b, it in th.decisions[j]
                ],
                seconds=th.seconds / (s1 - s0),
            )
        )
    return recs


def _num(x):
    return float(x) if math.isfinite(x) else None


# ---------------------------------------------------------------- estimates


# the settings of a threshold config that choose how a threshold is found, not which threshold:
# two points differing only in these measure the same thing (compare and pair them)
_HOW = (
    "plan",
    "decide.decider",
    "decide.working_set",
    "decide.outer_every",
    "decide.memory",
    "decide.chunk",
    "decide.stream",
    "decide.block",
)
# the fields that name the memory and solver of a row (the rest are its settings)
_HEAD = ("kind", "d", "problem", "model", "kappa", "solver")


def _flat(cfg: dict) -> dict:
    """A config with its settings flattened (`decide.tol`, `adam.lr`), less the seed range."""
    out = {}
    for k, v in normal_config(cfg).items():
        if k in ("decide", "adam"):
            out.update({f"{k}.{f}": x for f, x in v.items()})
        elif k not in ("seeds", "id"):
            out[k] = v
    return out


def point_key(cfg: dict) -> str:
    """What makes a measurement point: every field of its config but the seed range (records
    that differ in any setting, `seed0` included, are different measurements, never merged)."""
    return json.dumps(_flat(cfg), sort_keys=True)


def _same_measurement(cfg: dict, drop=()) -> str:
    """`point_key` less the `_HOW` settings and the fields or setting groups in `drop`
    (`"adam"` drops every `adam.*`)."""
    gone = lambda k: k in _HOW or k in drop or k.split(".")[0] in drop
    return json.dumps({k: v for k, v in _flat(cfg).items() if not gone(k)}, sort_keys=True)


def _by_point(records: list[dict], key=point_key) -> dict:
    """Records grouped by `key(config)`, each group a `{seed: record}` sorted by seed (a seed is
    counted once, whatever the files)."""
    groups = defaultdict(dict)
    for r in records:
        groups[key(r["config"])][r["seed"]] = r
    return {k: dict(sorted(v.items())) for k, v in groups.items()}


def _differing(configs: list[dict]) -> set:
    """The flat fields (`_flat`) whose value is not the same in all of `configs` (missing
    counts as a value)."""
    flat = [_flat(c) for c in configs]
    keys = set().union(*flat)
    return {k for k in keys if len({json.dumps(c.get(k), sort_keys=True) for c in flat}) > 1}


def _sortable(cfg: dict) -> tuple:
    return (cfg["d"], cfg["problem"], cfg["model"], cfg["kappa"], cfg["solver"], point_key(cfg))


def _bootstrap_median_alpha(p_star, d, rng, n_boot=2000):
    p_star = np.asarray(p_star, float)
    med = np.median(rng.choice(p_star, (n_boot, p_star.size)), axis=1)
    return alpha_of(d, med)


def threshold_rows(records: list[dict], *, theory: bool = True, seed: int = 0) -> list[dict]:
    """One row per measurement point (`point_key`): `p_c`, `alpha_c` with the order-statistic
    95% CI, the logistic cross-check, undecided and censored seeds, and the theory
    `alpha_c(p_c, kappa)`. A row's `settings` are its config but the seed range; `setup` names
    the settings in which it differs from the other rows of the same memory and solver."""
    groups = _by_point(normal_records(records))
    cfgs = {k: next(iter(g.values()))["config"] for k, g in groups.items()}
    heads = defaultdict(list)
    for k, c in cfgs.items():
        heads[tuple(c[f] for f in _HEAD)].append(c)
    rows = []
    for key in sorted(groups, key=lambda k: _sortable(cfgs[k])):
        cfg, recs = cfgs[key], list(groups[key].values())
        d = cfg["d"]
        lo = np.array([r["p_star"] for r in recs])
        hi = np.array([r["p_hi"] for r in recs])
        est = median_capacity(lo, hi, d, censored=[_censored(r) for r in recs])
        differ = _differing(heads[tuple(cfg[f] for f in _HEAD)])
        row = dict(
            d=d,
            problem=cfg["problem"],
            model=cfg["model"],
            kappa=round(cfg["kappa"], 6),
            solver=cfg["solver"],
            embedding=cfg.get("embedding", "gaussian"),
            lr=cfg.get("adam", {}).get("lr"),
            steps=cfg.get("adam", {}).get("steps"),
            criterion=criterion(cfg),
            settings={k: v for k, v in _flat(cfg).items() if k not in _HEAD},
            differs={k: _flat(cfg).get(k) for k in sorted(differ)},
            seeds=len(recs),
            **est,
            undecided=int(sum(r["undecided"] for r in recs)),
            exact=int(sum(r["exact"] for r in recs)),
            censored=int(sum(_censored(r) for r in recs)),
            alpha_logistic=_num(logistic_cross_check(lo, d)),
            decisions=int(sum(len(r["decisions"]) for r in recs)),
            seconds=float(sum(r["seconds"] for r in recs)),
        )
        if theory:
            from ._estimate import theory_alpha_c

            ok = math.isfinite(est["p_c"]) and est["p_c"] >= 2
            model_th = "hebbian" if row["solver"] == "hebbian" else row["model"]
            row["theory_alpha_c"] = (
                theory_alpha_c(d, est["p_c"], model_th, row["kappa"], row["problem"]) if ok else None
            )
            row["theory_verdict"] = theory_verdict(row)
        rows.append(CapacityRow(**row))
    return rows


def _censored(rec: dict) -> bool:
    """Whether a seed's threshold is only known to be at least its search's `p_max` (no `p`
    tried failed): right-censored."""
    p_max = rec["config"].get("plan", {}).get("p_max")
    return rec.get("censored", p_max is not None and rec["p_hi"] > p_max)


def compare(records: list[dict], a: dict, b: dict, *, seed: int = 0, n_boot: int = 2000) -> list[dict]:
    """`alpha_c(a) - alpha_c(b)` for two selections of points (e.g. OP and DP, all-stored
    criterion), with a 95% percentile-bootstrap CI over seeds, and the verdict the CI allows.

    Points are paired when their configs agree on everything but the fields `a` and `b` select
    on and how the thresholds were found (`_HOW`: plan, decider); seeds are taken in seed order,
    so the result does not depend on the order of the records.

    **Returns:** one dict per pair of points: `d`, `embedding`, `diff`, `ci_low`, `ci_high`,
    `verdict`, `seeds`, `seeds_to_decide`, and `setup` (the settings in which the pair differs
    from the others at the same `d`, `""` if none)."""
    rng = np.random.default_rng(seed)
    records = normal_records(records)
    drop = set(a) | set(b)
    sel = lambda r, f: all(r["config"][k] == v for k, v in f.items()) and criterion(r["config"]) == 1.0
    key = lambda c: _same_measurement(c, drop)
    ga = _by_point([r for r in records if sel(r, a)], key)
    gb = _by_point([r for r in records if sel(r, b)], key)
    common = [k for k in ga if k in gb]
    cfg = {k: next(iter(ga[k].values()))["config"] for k in common}
    common.sort(key=lambda k: (cfg[k]["d"], cfg[k]["embedding"], k))
    at_d = defaultdict(list)
    for k in common:
        at_d[cfg[k]["d"], cfg[k]["embedding"]].append(cfg[k])
    out = []
    for k in common:
        pa, pb = ga[k], gb[k]
        if len(pa) < 2 or len(pb) < 2:
            continue
        d, emb = cfg[k]["d"], cfg[k]["embedding"]
        xa = np.array([r["p_star"] for r in pa.values()])
        xb = np.array([r["p_star"] for r in pb.values()])
        diff = alpha_of(d, np.median(xa)) - alpha_of(d, np.median(xb))
        boot = _bootstrap_median_alpha(xa, d, rng, n_boot) - _bootstrap_median_alpha(xb, d, rng, n_boot)
        lo, hi = (float(x) for x in np.percentile(boot, [2.5, 97.5]))
        verdict = "differ" if lo > 0 or hi < 0 else "undecided"
        n = min(len(xa), len(xb))
        differ = {k for k in _differing(at_d[d, emb]) if k not in drop and k not in _HOW}
        out.append(
            dict(
                d=d,
                embedding=emb,
                diff=float(diff),
                ci_low=lo,
                ci_high=hi,
                verdict=verdict,
                seeds=[len(xa), len(xb)],
                seeds_to_decide=_seeds_to_decide(diff, lo, hi, n),
                setup=", ".join(f"{f} {_flat(cfg[k]).get(f)}" for f in sorted(differ)),
            )
        )
    return out


def _seeds_to_decide(diff, lo, hi, n):
    """Seeds per side at which a CI of the same shape, shrinking as `1/sqrt(n)`, would exclude 0
    (None if the estimate is exactly 0)."""
    if lo > 0 or hi < 0:
        return n
    half = (hi - lo) / 2
    return None if diff == 0 else int(math.ceil(n * (half / abs(diff)) ** 2))


def theory_verdict(row: dict) -> str:
    """What the 95% CI says of the theory value: inside it, or the measurement above or below.
    An interval left open by censored seeds decides only the side it bounds."""
    t, lo, hi = row.get("theory_alpha_c"), row.get("ci_low"), row.get("ci_high")
    finite = lambda x: x is not None and math.isfinite(x)
    if t is None or not finite(lo):
        return "undecided (no CI)"
    if not finite(hi):
        if row.get("censored") and lo > t:
            return "measured above theory (CI open above: censored seeds)"
        return "undecided (CI open above: censored seeds; raise p_max)"
    if lo <= t <= hi:
        return "agrees (theory inside the 95% CI)"
    return f"measured {'above' if lo > t else 'below'} theory"


def adam_vs_certified(records: list[dict]) -> list[dict]:
    """Seed by seed on the same nested tasks: the fraction of seeds whose Adam threshold is below
    the certified one, and the capacity lost to the step budget (certified minus Adam `alpha_c`).

    An Adam point is paired with every certified point on the same tasks (same `d`, problem,
    memory, embedding and `seed0`), and seeds by their seed number, never by position."""
    records = normal_records(records)
    tasks = lambda c: _same_measurement(c, ("solver", "decide", "adam"))
    is_adam = lambda c: c["solver"] == "adam" and criterion(c) == 1.0
    adam = _by_point([r for r in records if is_adam(r["config"])])
    cert = _by_point([r for r in records if r["config"]["solver"] == "certified"])
    out = []
    for ka in sorted(adam, key=lambda k: _sortable(next(iter(adam[k].values()))["config"])):
        ca = next(iter(adam[ka].values()))["config"]
        for kc, cs in cert.items():
            if tasks(next(iter(cs.values()))["config"]) != tasks(ca):
                continue
            common = sorted(set(adam[ka]) & set(cs))
            if not common:
                continue
            pa = np.array([adam[ka][s]["p_star"] for s in common])
            pc = np.array([cs[s]["p_star"] for s in common])
            d = ca["d"]
            ma, mc = np.median(pa), np.median(pc)
            out.append(
                dict(
                    d=d,
                    problem=ca["problem"],
                    model=ca["model"],
                    kappa=round(ca["kappa"], 6),
                    embedding=ca["embedding"],
                    seed0=ca["seed0"],
                    seeds=len(common),
                    fraction_below=float(np.mean(pa < pc)),
                    fraction_above=float(np.mean(pa > pc)),
                    alpha_certified=alpha_of(d, mc),
                    alpha_adam=alpha_of(d, ma),
                    lost=alpha_of(d, mc) - alpha_of(d, ma),
                    per_seed=dict(seeds=common, adam=pa.tolist(), certified=pc.tolist()),
                )
            )
    return out


# ---------------------------------------------------------------- running points into a store


def _release_compiled(limit: int = 40_000) -> None:
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


def distinct_units(points: list[dict]) -> list[dict]:
    """Each unit of work once, in order (`--d 8 8`, or two kappas of one rank, name the same
    units)."""
    return list({config_id(c): c for c in points}.values())


def measure(
    points: list[dict], *, store=None, shard: tuple[int, int] = (0, 1), log=None, jobs: int = 1
) -> list[dict]:
    """Run every unit of work of `points` (a list of `point_configs` outputs, flattened) for this
    `shard`, reading finished units from `store` (a `Store`, or None to keep nothing); returns
    the records of all units (this shard's run or read, the others' read if present). With
    `jobs > 1` (and a store) the units run in that many worker processes (`_workers`), with the
    same records."""
    i, n = shard
    check_int("jobs", jobs, 1)
    points = distinct_units(points)
    if jobs > 1 and store is not None:
        from ._workers import run_units

        run_units([c for k, c in enumerate(points) if k % n == i], store.out, jobs=jobs, log=log)
    recs = []
    for k, cfg in enumerate(points):
        if store is not None and store.done(cfg):
            recs += store.load(cfg)
            continue
        if k % n != i:
            continue
        if log is not None:
            print(
                f"[{k + 1}/{len(points)}] d={cfg['d']} {cfg['problem']} {cfg['model']} "
                f"kappa={cfg['kappa']:.2f} "
                f"{cfg['solver']} seeds {cfg['seeds'][0]}..{cfg['seeds'][1] - 1}",
                file=log,
                flush=True,
            )
        t = time.perf_counter()
        _release_compiled()
        unit = run_unit(cfg, log=log)
        if store is not None:
            store.write(cfg, unit)
        recs += unit
        if log is not None:
            print(f"    done in {time.perf_counter() - t:.0f} s", file=log, flush=True)
    return recs


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
