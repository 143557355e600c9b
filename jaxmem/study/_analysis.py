"""Records to tables, all pure functions: capacity rows with exact CIs, verdicts against the
theory, OP against DP, Adam against certified, the peer protocol's rows, and the logistic
estimate of fixed-`p` sweeps."""

from __future__ import annotations

import dataclasses
import json
import math
from collections import defaultdict
from typing import Any

import numpy as np

from .. import theory as th
from .._criteria import parse_criterion
from .._medians import median_capacity
from .._plan import guess_p
from .._tasks import alpha_of, p_from_alpha
from .._validate import InvalidArgument
from ._records import (
    ABSENT,
    config_id,
    criterion,
    EnsembleRecord,
    FieldMapping,
    finite_or_none,
    flat_settings,
    HEAD_FIELDS,
    normal_records,
    point_key,
    where,
)
from ._stats import (
    above,
    bootstrap_median_p,
    judge,
    logistic_crossing,
    minus,
    percentile_ci,
    point_rng,
    seeds_to_decide,
    signed,
    Verdict,
)


# the records of the paper's main measurement: certified, full rank, Gaussian embeddings
CERTIFIED_FULL = dict(model="full", kappa=1.0, solver="certified", embedding="gaussian")

# the settings of a threshold config that choose how a threshold is found, not which threshold:
# two points differing only in these measure the same thing (compare and pair them)
_HOW = (
    "plan",
    "decide.decider",
    "decide.working_set",
    "decide.outer_every",
    "decide.warm_start",
    "decide.memory",
    "decide.chunk",
    "decide.stream",
    "decide.block",
)


def _same_measurement(cfg: dict, drop=()) -> str:
    """`point_key` less the `_HOW` settings and the fields or setting groups in `drop`
    (`"adam"` drops every `adam.*`)."""
    gone = lambda k: k in _HOW or k in drop or k.split(".")[0] in drop
    return json.dumps({k: v for k, v in flat_settings(cfg).items() if not gone(k)}, sort_keys=True)


def check_records(records: list[dict]) -> None:
    """Raise `InvalidArgument` where two records of one seed that a table would pair disagree
    (records of one measurement but for how the threshold was found, `_HOW`; `_by_point`),
    before any table is computed."""
    _by_point(normal_records(records), lambda c: _same_measurement(c, set()))


def _by_point(records: list[dict], key=point_key) -> dict:
    """Records grouped by `key(config)`, each group a `{seed: record}` sorted by seed (a seed is
    counted once, whatever the files). Where `key` merges records that differ in how their
    threshold was found (`_HOW`), a seed's records must agree on its threshold bracket: two
    that do not are refused (`InvalidArgument` naming both), never resolved by reading order.
    Of agreeing records the one of the least file id is kept, so no choice depends on order."""
    groups = defaultdict(dict)
    for r in records:
        group, s = groups[key(r["config"])], r["seed"]
        if s in group:
            q = group[s]
            if _bracket(q) != _bracket(r):
                raise InvalidArgument(_disagreement(s, q, r))
            if config_id(r["config"]) >= config_id(q["config"]):
                continue
        group[s] = r
    return {k: dict(sorted(v.items())) for k, v in groups.items()}


def _bracket(rec: dict) -> tuple:
    return rec["p_star"], rec["p_hi"], bool(_censored(rec))


def _disagreement(seed: int, a: dict, b: dict) -> str:
    """One line naming two records of one seed whose thresholds disagree, by file id and by the
    settings in which they differ."""
    differ = sorted(_differing([a["config"], b["config"]]))
    flat = [flat_settings(a["config"]), flat_settings(b["config"])]
    c = a["config"]
    what = lambda i, r: (
        f"record {config_id(r['config'])} ("
        + ", ".join(f"{k} {json.dumps(flat[i].get(k))}" for k in differ)
        + f") has p* = {r['p_star']}, p_hi = {r['p_hi']}"
    )
    return (
        f"seed {seed} of d={c['d']} {c['problem']} {c['model']} kappa={c['kappa']:g} {c['solver']}: "
        f"{what(0, a)}, but {what(1, b)}; keep one of them to compare"
    )


def _differing(configs: list[dict]) -> set:
    """The flat fields (`_flat`) whose value is not the same in all of `configs` (missing
    counts as a value)."""
    flat = [flat_settings(c) for c in configs]
    keys = set().union(*flat)
    return {k for k in keys if len({json.dumps(c.get(k), sort_keys=True) for c in flat}) > 1}


def _sortable(cfg: dict) -> tuple:
    return (cfg["d"], cfg["problem"], cfg["model"], cfg["kappa"], cfg["solver"], point_key(cfg))


def brackets(recs) -> np.ndarray:
    """`(2, n)`: each seed's threshold bracket, `p_star` and `p_hi - 1` (equal where the search
    found it exactly; a censored seed, known only to be at least `p_star`, enters at `p_star`)."""
    lo = np.array([r["p_star"] for r in recs], float)
    top = np.array([r["p_star"] if _censored(r) else r["p_hi"] - 1 for r in recs], float)
    return np.stack([lo, top])


def threshold_rows(records: list[dict], *, theory: bool = True, seed: int = 0) -> list[dict]:
    """One row per measurement point (`point_key`): `p_c`, `alpha_c` with the order-statistic
    95% CI, the logistic cross-check, undecided and censored seeds, and the theory
    `alpha_c(p_c, kappa)`. A row's `settings` are its config but the seed range; `setup` names
    the settings in which it differs from the other rows of the same memory and solver."""
    records = normal_records(records)
    groups = _by_point(records)
    cfgs = {k: next(iter(g.values()))["config"] for k, g in groups.items()}
    full = full_rank_thresholds(records)
    heads = defaultdict(list)
    for k, c in cfgs.items():
        heads[tuple(c[f] for f in HEAD_FIELDS)].append(c)
    rows = []
    for key in sorted(groups, key=lambda k: _sortable(cfgs[k])):
        cfg, recs = cfgs[key], list(groups[key].values())
        d = cfg["d"]
        lo = np.array([r["p_star"] for r in recs])
        hi = np.array([r["p_hi"] for r in recs])
        crit = parse_criterion(cfg.get("criterion", "all"))
        est = median_capacity(lo, hi, d, censored=[_censored(r) for r in recs], load=crit.alpha_of)
        differ = _differing(heads[tuple(cfg[f] for f in HEAD_FIELDS)])
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
            settings={k: v for k, v in flat_settings(cfg).items() if k not in HEAD_FIELDS},
            differs={k: flat_settings(cfg).get(k) for k in sorted(differ)},
            seeds=len(recs),
            **est,
            undecided=int(sum(r["undecided"] for r in recs)),
            exact=int(sum(r["exact"] for r in recs)),
            censored=int(sum(_censored(r) for r in recs)),
            alpha_logistic=finite_or_none(logistic_cross_check(lo, d)),
            decisions=int(sum(len(r["decisions"]) for r in recs)),
            seconds=float(sum(r["seconds"] for r in recs)),
            lower_bound=cfg["model"] == "factored" and cfg["solver"] == "certified",
        )
        row.update(uncertified_gap(recs, full) if row["lower_bound"] else {})
        if not crit.monotone:
            row.update(load=crit.load, rebound=int(sum(bool(r.get("rebound")) for r in recs)))
        if theory and not crit.top1:
            row["theory_alpha_c"] = crit.limit()
            row["theory_verdict"] = theory_verdict(row)
        elif theory:
            ok = math.isfinite(est["p_c"]) and est["p_c"] >= 2
            model_th = "hebbian" if row["solver"] == "hebbian" else row["model"]
            row["theory_alpha_c"] = (
                theory_alpha_c(d, est["p_c"], model_th, row["kappa"], row["problem"]) if ok else None
            )
            row["theory_verdict"] = theory_verdict(row)
        rows.append(ThresholdRow(**row))
    return rows


def _tasks_key(cfg: dict, seed: int) -> tuple:
    """What fixes a seed's task: two records with the same key decided the same nested task."""
    return (cfg["d"], cfg["problem"], cfg.get("embedding", "gaussian"), cfg["seed0"], seed)


def full_rank_thresholds(records: list[dict]) -> dict:
    """The certified full-rank top-1 `p*` of every seed measured, keyed by its task
    (`_tasks_key`)."""
    return {
        _tasks_key(r["config"], r["seed"]): r["p_star"]
        for r in where(records, model="full", solver="certified", criterion="all")
        if not _censored(r)
    }


def uncertified_gap(recs: list[dict], full: dict) -> dict:
    """Of a certified rank-`m` point's seeds (its `p*` a lower bound), those whose full-rank
    threshold on the same task is known (`gap_paired`), how many of them lie below it
    (`gap_seeds`: the rank-`m` threshold is somewhere in `[p*_m, p*_full]`, uncertified), and the
    median width `alpha(p*_full) - alpha(p*_m)` over the paired seeds (`gap_alpha`)."""
    pairs = [(r["p_star"], full[k]) for r in recs if (k := _tasks_key(r["config"], r["seed"])) in full]
    if not pairs:
        return dict(gap_paired=0, gap_seeds=None, gap_alpha=None)
    d = recs[0]["config"]["d"]
    widths = [alpha_of(d, pf) - alpha_of(d, pm) if pf > pm else 0.0 for pm, pf in pairs]
    return dict(
        gap_paired=len(pairs),
        gap_seeds=int(sum(pf > pm for pm, pf in pairs)),
        gap_alpha=float(np.median(widths)),
    )


def gap_note(row, head: bool = True) -> str:
    """What a lower-bound row is and how wide its uncertified gap is (`head`: led by the row's
    `d`, problem and `kappa`, for a line of its own)."""
    if not row.get("gap_paired"):
        text = "A lower bound; no full-rank threshold of the same tasks to bound the gap (measure model full)"
    else:
        text = (
            f"A lower bound; {row['gap_seeds']} of {row['gap_paired']} seeds lie below their full-rank "
            "threshold (the rank-m threshold is uncertified in between), median width "
            f"{row['gap_alpha']:.3f} in alpha"
        )
    return f"d={row['d']} {row['problem']} kappa={row['kappa']:.2f}: {text}" if head else text


def _censored(rec: dict) -> bool:
    """Whether a seed's threshold is only known to be at least its search's `p_max` (no `p`
    tried failed): right-censored."""
    p_max = rec["config"].get("plan", {}).get("p_max")
    return rec.get("censored", p_max is not None and rec["p_hi"] > p_max)


def compare(records: list[dict], a: dict, b: dict, *, seed: int = 0, n_boot: int = 2000) -> list[dict]:
    """`alpha_c(a) - alpha_c(b)` for two selections of points (e.g. OP and DP, all-stored
    criterion), with a 95% percentile-bootstrap CI over seeds, and the verdict the CI allows.

    Points are paired when their configs agree on everything but the fields `a` and `b` select
    on and how the thresholds were found (`_HOW`: plan, decider); seeds are taken in seed order
    and each pair draws from its own generator (`point_rng`), so a row depends on its own records
    alone, not on their order or on the other points.

    **Returns:** one dict per pair of points: `d`, `embedding`, `diff`, `ci_low`, `ci_high`,
    `verdict`, `seeds`, `seeds_to_decide`, and `setup` (the settings in which the pair differs
    from the others at the same `d`, `""` if none)."""
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
        xa, xb = brackets(pa.values()), brackets(pb.values())
        diff = alpha_of(d, np.median(xa[0])) - alpha_of(d, np.median(xb[0]))
        rng = point_rng(seed, "compare", a, b, k)
        boot = minus(
            alpha_of(d, bootstrap_median_p(xa, rng, n_boot)), alpha_of(d, bootstrap_median_p(xb, rng, n_boot))
        )
        lo, hi = percentile_ci(boot)
        verdict = "differ" if judge(lo, hi).decided else "undecided"
        n = min(xa.shape[1], xb.shape[1])
        differ = {k for k in _differing(at_d[d, emb]) if k not in drop and k not in _HOW}
        out.append(
            dict(
                d=d,
                embedding=emb,
                diff=float(diff),
                ci_low=lo,
                ci_high=hi,
                verdict=verdict,
                seeds=[xa.shape[1], xb.shape[1]],
                seeds_to_decide=seeds_to_decide(diff, lo, hi, n),
                setup=", ".join(f"{f} {flat_settings(cfg[k]).get(f)}" for f in sorted(differ)),
            )
        )
    return out


def theory_verdict(row: dict) -> str:
    """What the 95% CI says of the theory value (`judge`), worded: inside it, or the measurement
    above or below. An interval left open by censored seeds decides only "above"; a lower bound
    (a certified rank-`m` row) likewise."""
    t, lo, hi = row.get("theory_alpha_c"), row.get("ci_low"), row.get("ci_high")
    v = judge(lo, hi, t, lower_bound=bool(row.get("lower_bound")))
    if v is Verdict.NO_CI:
        return "undecided (no CI)"
    if not math.isfinite(hi):
        if row.get("censored") and v is Verdict.ABOVE:
            return "measured above theory (CI open above: censored seeds)"
        return "undecided (CI open above: censored seeds; raise p_max)"
    if row.get("lower_bound"):
        if v is Verdict.ABOVE:
            return "measured above theory (a lower bound above it)"
        return "undecided (a lower bound that does not exceed the theory)"
    if v is Verdict.INSIDE:
        return "agrees (theory inside the 95% CI)"
    return f"measured {v.value} theory"


def adam_vs_certified(records: list[dict]) -> list[dict]:
    """Seed by seed on the same nested tasks: the fraction of seeds whose Adam threshold is below
    the certified one, and the capacity lost to the step budget (certified minus Adam `alpha_c`).

    An Adam point is paired with every certified point on the same tasks (same `d`, problem,
    memory, embedding and `seed0`), and seeds by their seed number, never by position."""
    records = normal_records(records)
    tasks = lambda c: _same_measurement(c, ("solver", "decide", "adam"))
    is_adam = lambda c: c["solver"] == "adam" and criterion(c) == 1.0
    adam = _by_point([r for r in records if is_adam(r["config"])])
    cert = _by_point(where(records, solver="certified"))
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


def logistic_cross_check(p_star, d: int) -> float:
    """`alpha` where a logistic fit of P(p* >= p) against `ln p` crosses 1/2 (a cross-check of
    the median)."""
    p_star = np.asarray(p_star)
    grid = np.arange(max(2, int(p_star.min()) - 2), int(p_star.max()) + 3)
    x = np.repeat(np.log(grid), p_star.size)
    y = (p_star[None, :] >= grid[:, None]).astype(float).ravel()
    p = logistic_crossing(x, y)
    return alpha_of(d, p) if math.isfinite(p) and p >= 2 else math.nan


N_BOOT = 400


def _alpha(p, d):
    return alpha_of(d, float(p))


def _accuracy_crossing(alphas, accs):
    """Load at which the mean accuracy first falls below 1/2 (linear interpolation)."""
    order = np.argsort(alphas)
    a, m = np.asarray(alphas)[order], np.asarray(accs)[order]
    for i in range(len(a) - 1):
        if m[i] >= 0.5 > m[i + 1]:
            return float(a[i] + (m[i] - 0.5) / (m[i] - m[i + 1]) * (a[i + 1] - a[i]))
    return None


def _no_boot():
    return np.zeros(0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CapacityRow(FieldMapping):
    """A row of a folder's capacity table: a frozen, typed record of one measurement point that
    also reads as a mapping of its fields, with the bootstrap samples of `alpha_c` beside them
    as `boot` (not a field of the mapping: they are never printed). `kind` is set where the row
    is one of a folder's tables (`tables_of`), absent otherwise."""

    boot: np.ndarray = dataclasses.field(default_factory=_no_boot, repr=False, compare=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ThresholdRow(CapacityRow):
    """One measurement point of per-seed thresholds (`threshold_rows`): its memory and solver,
    settings (and those in which it `differs` from the other rows of the same memory and
    solver), the `criterion` (Adam's accuracy, 1.0 for top-1, or a certified criterion's name such
    as `tail:0.1`, whose rows also give their `load` formula `p / d^2` and the seeds whose
    storability came back above an unstorable `p`, `rebound`), seeds, the median threshold
    `p_c` and `alpha_c` with the order-statistic 95% CI (`p_ci_*`, `ci_*`, the ranks
    `ci_ranks`), the seeds undecided, exact and censored, the logistic cross-check, decisions and
    seconds; for a certified rank-`m` row (a lower bound) the uncertified gap to the full-rank
    thresholds of the same tasks; the theory's `alpha_c(p_c)` (for the tail average its limit
    `alpha_G,c(r)`) and its verdict where asked."""

    d: int
    problem: str
    model: str
    kappa: float
    solver: str
    embedding: str
    lr: float | None
    steps: int | None
    criterion: float | str
    settings: dict
    differs: dict
    seeds: int
    p_c: float
    alpha_c: float
    p_ci_low: float
    p_ci_high: float
    ci_low: float
    ci_high: float
    ci_ranks: list
    undecided: int
    exact: int
    censored: int
    alpha_logistic: float | None
    decisions: int
    seconds: float
    lower_bound: bool
    gap_paired: Any = ABSENT
    gap_seeds: Any = ABSENT
    gap_alpha: Any = ABSENT
    theory_alpha_c: Any = ABSENT
    theory_verdict: Any = ABSENT
    load: Any = ABSENT
    rebound: Any = ABSENT
    kind: Any = ABSENT


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepRow(CapacityRow):
    """One point of fixed-`p` ensembles (`estimate`): the logistic crossing `p_c` of the fraction
    all stored against `ln p`, `alpha_c` with its bootstrap 95% CI, the load where the mean
    accuracy falls below 1/2, whether the grid brackets 1/2, the runs, the grid, and the theory's
    `alpha_c(p_c)` where asked."""

    d: int
    problem: str
    model: str
    kappa: float
    setup: str
    p_c: float
    alpha_c: float
    ci_low: float | None
    ci_high: float | None
    alpha_acc_half: float | None
    bracketed: bool
    n_runs: int
    grid: list
    theory_alpha_c: Any = ABSENT
    kind: Any = ABSENT


# the settings an ensemble config may leave out, at what it ran with
_SWEEP_DEFAULTS = EnsembleRecord.DEFAULTS


def sweep_setup(cfg: dict) -> str:
    """The settings of a sweep config that differ from the defaults (`"steps 300, lr 0.1"`;
    `"—"` for none): training fields (an older config's missing ones at their defaults, which
    it ran with; the Hebbian rule has none) and the embedding."""
    keys = ["embedding"] if cfg["model"] == "hebbian" else list(_SWEEP_DEFAULTS)
    parts = [f"{k} {cfg[k]}" for k in keys if k in cfg and cfg[k] != _SWEEP_DEFAULTS[k]]
    return ", ".join(parts) or "—"


def group_key(cfg):
    """What makes a sweep's measurement point: `(d, problem, model, kappa, setup)`. Ensembles
    that differ in any setting are never pooled; seed ranges are."""
    return (cfg["d"], cfg["problem"], cfg["model"], round(cfg["kappa"], 6), sweep_setup(cfg))


def estimate(records: list[dict], *, seed: int = 0, n_boot: int = N_BOOT, theory: bool = True) -> list[dict]:
    """One row per (d, problem, model, kappa): p_c, alpha_c with bootstrap CI, the load where
    mean accuracy crosses 1/2, theory value, number of runs, and the bootstrap samples."""
    groups = defaultdict(list)
    for r in records:
        groups[group_key(r["config"])].append(r)
    rng = np.random.default_rng(seed)
    rows = []
    for (d, problem, model, kappa, how), recs in sorted(groups.items()):
        by_p = defaultdict(list)
        for r in recs:
            by_p[r["config"]["p"]].append(r)
        ps = sorted(by_p)
        x = np.concatenate([[math.log(p)] * len(by_p[p]) for p in ps])
        y = np.concatenate([[float(r["all_stored"]) for r in by_p[p]] for p in ps])
        p_c = logistic_crossing(x, y)
        boots = []
        for _ in range(n_boot):
            yb = np.concatenate(
                [rng.choice([float(r["all_stored"]) for r in by_p[p]], len(by_p[p])) for p in ps]
            )
            boots.append(_alpha(logistic_crossing(x, yb), d))
        boots = np.array(boots)
        boots = boots[np.isfinite(boots)]
        fr = [float(np.mean([r["all_stored"] for r in by_p[p]])) for p in ps]
        bracketed = any(f >= 0.5 for f in fr) and any(f < 0.5 for f in fr)
        acc_cross = _accuracy_crossing(
            [_alpha(p, d) for p in ps], [np.mean([r["accuracy"] for r in by_p[p]]) for p in ps]
        )
        row = dict(
            d=d,
            problem=problem,
            model=model,
            kappa=kappa,
            setup=how,
            p_c=p_c,
            alpha_c=_alpha(p_c, d),
            ci_low=float(np.percentile(boots, 2.5)) if boots.size else None,
            ci_high=float(np.percentile(boots, 97.5)) if boots.size else None,
            alpha_acc_half=acc_cross,
            bracketed=bracketed,
            n_runs=len(recs),
            grid=[
                dict(
                    p=p,
                    alpha=_alpha(p, d),
                    fraction_all_stored=f,
                    accuracy=float(np.mean([r["accuracy"] for r in by_p[p]])),
                    n=len(by_p[p]),
                )
                for p, f in zip(ps, fr)
            ],
        )
        if theory:
            row["theory_alpha_c"] = theory_alpha_c(d, p_c, model, kappa, problem)
        rows.append(SweepRow(boot=boots, **row))
    return rows


def theory_alpha_c(d, p_c, model, kappa, problem):
    """Theory at the measured `p_c`: Gardner `alpha_c(p_c, kappa)`; Hebbian: the load where the
    finite-size P(all stored) of `jaxmem.theory.hebbian` crosses 1/2 at this `d`."""

    if not np.isfinite(p_c):
        return None
    if model != "hebbian":
        return float(th.alpha_c(float(p_c), kappa=float(kappa)))
    p_all = lambda p: float(th.hebbian(d, p, problem, samples=50_000).p_all_stored)
    lo, hi = 2, max(4, int(4 * p_c))
    if p_all(hi) >= 0.5:
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if p_all(mid) >= 0.5:
            lo = mid
        else:
            hi = mid
    return _alpha(lo + 0.5, d)


def public(rows):
    """The rows as JSON-ready dicts."""
    return [r.to_json() for r in rows]


def compare_op_dp(rows):
    """Per d and setup, alpha_hat(OP) - alpha_hat(DP) for full-rank memories with a bootstrap CI."""
    out = []
    full = {(r["d"], r["setup"], r["problem"]): r for r in rows if r["model"] == "full"}
    for d, how in sorted({(d, how) for d, how, _ in full}):
        if (d, how, "op") in full and (d, how, "dp") in full:
            a, b = full[(d, how, "op")], full[(d, how, "dp")]
            n = min(len(a.boot), len(b.boot))
            diff = a.boot[:n] - b.boot[:n]
            lo, hi = (
                (float(np.percentile(diff, 2.5)), float(np.percentile(diff, 97.5))) if n else (None, None)
            )
            out.append(
                dict(
                    d=d,
                    setup=how,
                    diff=a["alpha_c"] - b["alpha_c"],
                    ci_low=lo,
                    ci_high=hi,
                    differs=bool(n and (lo > 0 or hi < 0)),
                )
            )
    return out


def fmt(x, nd=3):
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{nd}f}"


def setup(row) -> str:
    """The settings of a row that differ from the default measurement (for tables)."""
    parts = []
    if row.get("embedding", "gaussian") != "gaussian":
        parts.append(f"{row['embedding']} embedding")
    crit = row.get("criterion", 1.0)
    if isinstance(crit, str):
        parts.append(f"{crit} (alpha = {row.get('load', 'p / d^2')})")
    elif crit != 1.0:
        parts.append(f"accuracy {crit:g}")
    if row.get("solver") == "adam":
        parts.append(f"lr {row['lr']:g}, {row['steps']} steps")
    shown = {"embedding", "adam.accuracy", "adam.lr", "adam.steps", "criterion"}
    for k, v in row.get("differs", {}).items():
        if k not in shown:
            parts.append(f"{k} {setting_text(v)}")
    return ", ".join(parts) or "—"


def setting_text(v) -> str:
    """A setting as table text: a nested one as `key=value` pairs (`p0=62 p_max=128`)."""
    if isinstance(v, dict):
        return " ".join(f"{k}={setting_text(x)}" for k, x in v.items())
    if isinstance(v, list | tuple):
        return ",".join(map(setting_text, v))
    return f"{v:g}" if isinstance(v, float) else str(v)


def transition_theory(rows):
    """The transition theory's loads (P(all stored) = 0.75, 0.5, 0.25; docs/science.md 2.8) per
    `d` of the certified full-rank rows, keyed `(d, 1.0)` (16384 samples each: a standard error
    of about 0.005 in `alpha_50`, printed beside it)."""
    out = {}
    for r in rows:
        key = (r["d"], 1.0)
        full = r["model"] == "full" and r["embedding"] == "gaussian" and r["solver"] == "certified"
        if full and key not in out:
            out[key] = th.transition_loads(r["d"], samples=16384)
    return out


def verdict(lo, hi, value, what, lower_bound: bool = False):
    """What a 95% CI `[lo, hi]` says of `value` (`judge`), worded with `what`; of a lower bound
    (a certified rank-`m` row) or an interval open above, only "above" can be decided."""
    v = judge(lo, hi, value, lower_bound=lower_bound)
    if v is Verdict.NO_CI:
        return "undecided (no CI)"
    if v is Verdict.UNDECIDED:
        return f"undecided ({'a lower bound' if lower_bound else 'a CI open above'} not above {what})"
    return f"agrees with {what}" if v is Verdict.INSIDE else f"{v.value} {what}"


def _certified_p_stars(records, d, problem):
    """The certified full-rank thresholds at `d` (Gaussian embeddings) as `brackets`, in seed
    order."""
    recs = where(records, d=d, problem=problem, **CERTIFIED_FULL)
    return brackets(sorted(recs, key=lambda r: (r["config"]["seed0"], r["seed"])))


# the differences the scaling study measures, (minuend, subtrahend); "theory" is Gardner's
# alpha_c(p_c) at the minuend's own median threshold p_c
GAPS = {"op-dp": ("op", "dp"), "op-theory": ("op", "theory"), "dp-theory": ("dp", "theory")}


def _theory_at(ps):
    """Gardner's `alpha_c(p)` at each of `ps`, and the largest of its Monte Carlo standard
    errors (at most 0.0015, its default target): computed at up to 5 points spread over their
    range and linear between (within 1e-4 of a direct evaluation over the few per cent of `p` a
    bootstrap median spans)."""
    ps = np.asarray(ps, float)
    grid = np.unique(np.linspace(ps.min(), ps.max(), 5))
    caps = [th.capacity(float(p)) for p in grid]
    return np.interp(ps, grid, [float(c.alpha_c) for c in caps]), max(float(c.alpha_c_se) for c in caps)


def gap_samples(records, d, gap, rng, n_boot=2000):
    """One difference of `GAPS` at `d`: its estimate (from the medians of `p_star`) and `n_boot`
    bootstrap samples at both ends of the seeds' brackets (`(2, n_boot)`; seeds resampled
    independently per problem). A theory term is Gardner's `alpha_c(p_c)` at the same bootstrap
    median `p_c` as the measured term, plus a normal draw of its own Monte Carlo error, so the
    interval carries both (`alpha(p) - alpha_c(p)` grows with `p`, so the bracket's ends stay
    its ends).

    **Returns:** `(estimate, samples)`, or `None` where a side has fewer than 2 seeds."""
    a, b = GAPS[gap]
    xa = _certified_p_stars(records, d, a)
    if xa.shape[1] < 2:
        return None
    med = bootstrap_median_p(xa, rng, n_boot)
    if b == "theory":
        est_p = np.median(xa[0])
        theory, se = _theory_at(np.append(med.ravel(), est_p))
        noise = se * rng.standard_normal(n_boot)
        samples = alpha_of(d, med) - theory[:-1].reshape(med.shape) - noise
        return float(alpha_of(d, est_p) - theory[-1]), samples
    xb = _certified_p_stars(records, d, b)
    if xb.shape[1] < 2:
        return None
    est = alpha_of(d, np.median(xa[0])) - alpha_of(d, np.median(xb[0]))
    return float(est), minus(alpha_of(d, med), alpha_of(d, bootstrap_median_p(xb, rng, n_boot)))


def _ci_verdict(est, samples, yes, no, n):
    """The 95% percentile interval of `samples` (its low end from row 0, its high end from row
    1), the verdict `yes` (interval above 0), `no` (below) or undecided, and the seeds per side
    that would decide it (`_seeds_to_decide`)."""
    lo, hi = percentile_ci(samples)
    verdict = {Verdict.ABOVE: yes, Verdict.BELOW: no}.get(judge(lo, hi), "undecided")
    return dict(
        diff=est, ci_low=lo, ci_high=hi, verdict=verdict, seeds_to_decide=seeds_to_decide(est, lo, hi, n)
    )


def gap_trend(records, gap, d1, d2, *, seed=0, n_boot=2000) -> dict | None:
    """Does a difference of `GAPS` shrink in size from `d1` to `d2`?

    The two gaps are bootstrapped independently. `|gap(d2)| < |gap(d1)|` is decided ("shrinks")
    where the gap at `d1` is decided (its 95% CI excludes 0; `s` its sign) and the intervals of
    both `s (gap(d1) - gap(d2))` and `s (gap(d1) + gap(d2))` lie above 0; `|gap(d2)| > |gap(d1)|`
    ("does not shrink") likewise with the ends swapped; otherwise "undecided".

    **Returns:** `dict(gap, d1, d2, diff, ci_low, ci_high, verdict, seeds_to_decide)`: `diff` and
    its CI are `s (gap(d1) - gap(d2))` (`s` the sign of the estimate at `d1`), the change in size
    while the gap keeps its sign; `None` where either end is missing."""
    one, two = (gap_samples(records, d, gap, point_rng(seed, "gap", d, gap), n_boot) for d in (d1, d2))
    if one is None or two is None:
        return None
    decided = lambda g: above(g[1]) or above(signed(-1, g[1]))

    def smaller(a, b):  # |b| < |a|, decided
        s = 1.0 if a[0] >= 0 else -1.0
        return decided(a) and above(signed(s, minus(a[1], b[1]))) and above(signed(s, a[1] + b[1]))

    s = 1.0 if one[0] >= 0 else -1.0
    n = min(_certified_p_stars(records, d, p).shape[1] for d in (d1, d2) for p in GAPS[gap] if p != "theory")
    out = _ci_verdict(s * (one[0] - two[0]), signed(s, minus(one[1], two[1])), "", "", n)
    out["verdict"] = (
        "shrinks" if smaller(one, two) else "does not shrink" if smaller(two, one) else "undecided"
    )
    return dict(gap=gap, d1=d1, d2=d2, **out)


_GAP_NAMES = {"op-dp": "OP − DP", "op-theory": "OP − theory", "dp-theory": "DP − theory"}


def trend_note(t: dict) -> str:
    """One sentence for a `gap_trend`: the change of the gap's size between its two `d`, its CI
    and the verdict (with the seeds per point that would decide an undecided one)."""
    name = _GAP_NAMES[t["gap"]]
    tail = (
        f" (about {t['seeds_to_decide']} seeds per point would decide it)"
        if t["verdict"] == "undecided" and t["seeds_to_decide"] is not None
        else ""
    )
    return (
        f"|{name}| at d = {t['d1']} minus at d = {t['d2']}: {t['diff']:+.3f}, "
        f"95% CI [{t['ci_low']:+.3f}, {t['ci_high']:+.3f}]: **{t['verdict']}**{tail}."
    )


def scaling_table(records, *, seed=0, n_boot=2000, band_samples=16384) -> list[dict]:
    """Per `d` of the certified full-rank points (Gaussian embeddings): the OP and DP capacity
    rows (`threshold_rows`), the transition theory's band `alpha` at P(all stored) = 0.75, 0.5
    and 0.25 (`th.transition_loads`), and every difference of `GAPS` measured there with its
    bootstrap 95% CI and verdict ("above"/"below" 0, or undecided with the seeds per side that
    would decide it), each drawn from its own generator (`point_rng`), as `gap_trend` draws its
    two ends.

    **Returns:** a list of `dict(d, op, dp, band, gaps)` sorted by `d` (`op`/`dp` `None` where
    not measured)."""
    full = where(records, **CERTIFIED_FULL)
    rows = threshold_rows(full)
    out = []
    for d in sorted({r["d"] for r in rows}):
        at = {r["problem"]: r for r in rows if r["d"] == d}
        loads = th.transition_loads(d, samples=band_samples)
        band = [float(loads.alpha_p75), float(loads.alpha_50), float(loads.alpha_p25)]
        gaps = {}
        for gap, (a, b) in GAPS.items():
            got = gap_samples(records, d, gap, point_rng(seed, "gap", d, gap), n_boot)
            if got is not None:
                n = min(at[x]["seeds"] for x in (a, b) if x != "theory")
                gaps[gap] = _ci_verdict(*got, "above", "below", n)
        out.append(dict(d=d, op=at.get("op"), dp=at.get("dp"), band=band, gaps=gaps))
    return out


def peer_rows(rows):
    """Per `d` of the peer protocol: their criterion's capacity (Adam, unit-norm embeddings,
    training accuracy 0.99), the certified all-stored capacity of the same tasks, and the
    Gaussian-embedding certified capacity where measured, beside the guide `d^2 = 1.3 N ln N`."""
    out = []
    for d in sorted({r["d"] for r in rows if r.get("criterion", 1.0) != 1.0}):
        pick = lambda **f: next(
            (r for r in rows if r["d"] == d and all(r.get(k) == v for k, v in f.items())), None
        )
        theirs = next((r for r in rows if r["d"] == d and r.get("criterion", 1.0) != 1.0), None)
        ours = pick(problem="op", model="full", solver="certified", embedding="unit")
        gauss = pick(problem="op", model="full", solver="certified", embedding="gaussian")
        out.append(
            dict(d=d, theirs=theirs, ours=ours, gaussian=gauss, guide_N=float(p_from_alpha(d, 1 / 1.3)))
        )
    return out


def gardner_curve(rows, n: int = 8) -> list[tuple[int, float]]:
    """Gardner's `alpha_c(p(d))` at `n` log-spaced `d` across the certified full-rank rows (the
    theory's own `p(d)`, `guess_p`): `(d, alpha)` pairs for the finite-size figure."""
    ds = sorted({r["d"] for r in where(rows, solver="certified", model="full", embedding="gaussian")})
    if not ds:
        return []
    dd = np.unique(np.geomspace(ds[0], ds[-1], n).round().astype(int))
    return [(int(d), float(th.alpha_c(float(guess_p(int(d)))))) for d in dd]


def rank_table(records, *, seed=0, n_boot=2000) -> dict:
    """The rank study's tables from its records: per `d`, `kappa` and problem, the certified
    rank-`m` lower bound (`threshold_rows`: the median, its 95% CI, the theory's
    `alpha_c(p_c, kappa)` at the row's own `p_c` with the verdict a lower bound allows, and the
    seeds with an uncertified gap below their full-rank threshold), the asymptote `F(kappa)/2`,
    Adam on the same tasks and the seeds at which Adam stored more than the lower bound (a bound
    that Adam beats is not tight); per `d` and `kappa`, OP - DP of the lower bounds with its
    bootstrap CI; per `d`, the full-rank rows; and the theory's own threshold at that `d`, the
    load `alpha(p)` at which `alpha(p) = alpha_c(p, kappa)` (`guess_p`), at each measured `kappa`
    and at full rank; and `F(kappa)/2` on a grid (`limit`).

    **Returns:** `dict(rows, op_dp, full, curves, limit)`."""
    all_rows = threshold_rows(records)
    pick = lambda model, solver: {
        (r["d"], r["kappa"], r["problem"]): r
        for r in where(all_rows, model=model, solver=solver, embedding="gaussian")
    }
    cert, adam = pick("factored", "certified"), pick("factored", "adam")
    vs = {
        (c["d"], c["kappa"], c["problem"]): c
        for c in where(adam_vs_certified(records), model="factored", embedding="gaussian")
    }
    rows = []
    for key in sorted(cert, key=lambda k: (k[0], k[1], k[2] == "dp")):
        d, k, problem = key
        c = vs.get(key)
        rows.append(
            dict(
                d=d,
                kappa=k,
                problem=problem,
                certified=cert[key],
                limit=float(th.F(k)) / 2,
                adam=adam.get(key),
                adam_above=None if c is None else int(round(c["fraction_above"] * c["seeds"])),
                adam_paired=None if c is None else c["seeds"],
            )
        )
    op_dp = []
    for d, k in sorted({(d, k) for d, k, _ in cert}):
        sel = where(records, d=d, model="factored", solver="certified", kappa=k)
        for c in compare(sel, {"problem": "op"}, {"problem": "dp"}, seed=seed, n_boot=n_boot):
            op_dp.append(dict(c, kappa=k))
    full = where(all_rows, **CERTIFIED_FULL)
    curves = {}
    for d in sorted({d for d, _, _ in cert}):
        ks = sorted({k for dd, k, _ in cert if dd == d} | {1.0})
        curves[d] = [(k, alpha_of(d, guess_p(d, k))) for k in ks]
    limit = [(float(k), float(th.F(float(k))) / 2) for k in np.linspace(0.05, 1.0, 20)]
    return dict(rows=rows, op_dp=op_dp, full=full, curves=curves, limit=limit)
