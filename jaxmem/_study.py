"""Capacity studies: `jaxmem sweep`, `jaxmem capacity`, `jaxmem report` and `jaxmem demo`."""

from __future__ import annotations

import json
import math
import os
import sys
import time

import numpy as np

from ._estimate import compare_op_dp, estimate, public, trend
from ._sweep import Knobs, parse_grid, run_sweep, search_capacity, Store, SweepSpec


DEMO_DS = (16, 24, 32)
DEMO_FACTORED = (24, 0.5)


def _fmt(x, nd=3):
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{nd}f}"


def capacity_rows(out: str):
    """The sweep records of a folder and their logistic estimates (threshold records aside)."""
    store = Store(out)
    recs = [r for r in store.records() if r.get("kind") != "threshold"]
    if not recs:
        raise ValueError(f"no sweep records under {out!r}")
    return store, recs, estimate(recs)


def verdict(r) -> str:
    t = r.get("theory_alpha_c")
    if t is None or r["ci_low"] is None:
        return "no theory value"
    if r["ci_low"] <= t <= r["ci_high"]:
        return "agrees (theory inside the 95% CI)"
    side = "above" if r["alpha_c"] > t else "below"
    return f"DISAGREES: measured {side} theory by {abs(r['alpha_c'] - t):.3f}"


def write_report(out: str) -> tuple[str, list[dict]]:
    """Figures and `report.md` from the records in `out`; returns its path and the capacity rows."""
    import jax

    from . import _plot

    store = Store(out)
    key = jax.random.key(0)
    figs = {}
    # First, as it may add the Hebbian config it compares with: the table then matches
    # `jaxmem capacity` on the same folder.
    figs["iv"] = _plot.fig_scores(store.records(), out, store)
    store, recs, rows = capacity_rows(out)
    figs["i"] = _plot.fig_transition(recs, rows, out)
    figs["ii"] = _plot.fig_capacity_vs_d(rows, out)
    figs["iii"], spectra_notes = _plot.fig_spectra(recs, out, key)
    figs["v"] = _plot.fig_kappa(rows, out)
    full = [r for r in rows if r["model"] == "full" and np.isfinite(r["p_c"])]
    p_saddle = int(round(max(r["p_c"] for r in full))) if full else 200
    figs["vi"] = _plot.fig_saddle(p_saddle, out)

    L = [
        "# jaxmem capacity report",
        "",
        f"Records: {len(recs)} runs in `{out}/records/` (one JSON line per config and seed). "
        "Capacity: logistic fit of P(all stored) against ln p, `alpha_hat_c = p_c ln p_c / d^2`, "
        "95% percentile bootstrap over seeds. Theory: Gardner `alpha_c(p_c, kappa)` of docs/science.md "
        "2.1/2.2 "
        "at the measured `p_c`; for the Hebbian rule, the load where the finite-size theory's "
        "P(all stored) crosses 1/2.",
        "",
        "## Capacity against theory",
        "",
        "| d | problem | model | kappa | p_c | alpha_hat_c | 95% CI | theory | verdict | runs |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        L.append(
            f"| {r['d']} | {r['problem'].upper()} | {r['model']} | {r['kappa']:.2f} | {_fmt(r['p_c'], 1)} | "
            f"{_fmt(r['alpha_c'])} | [{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}] | "
            f"{_fmt(r.get('theory_alpha_c'))} | "
            f"{verdict(r)}{'' if r['bracketed'] else ' (transition not bracketed)'} | {r['n_runs']} |"
        )
    L += [
        "",
        "## OP against DP",
        "",
        "| d | alpha_hat(OP) - alpha_hat(DP) | 95% CI | differ? |",
        "|---|---|---|---|",
    ]
    cmp = compare_op_dp(rows)
    for c in cmp:
        L.append(
            f"| {c['d']} | {c['diff']:+.3f} | [{_fmt(c['ci_low'])}, {_fmt(c['ci_high'])}] | "
            f"{'yes' if c['differs'] else 'no'} |"
        )
    if len(cmp) >= 2:
        first, last = abs(cmp[0]["diff"]), abs(cmp[-1]["diff"])
        n_diff = sum(c["differs"] for c in cmp)
        L += [
            "",
            f"OP and DP differ significantly (95% CI excludes 0) at {n_diff} of {len(cmp)} dimensions. "
            f"|difference| is {first:.3f} at d={cmp[0]['d']} and {last:.3f} at d={cmp[-1]['d']}: it "
            f"{'shrinks' if last < first else 'does not shrink'} over this range of d.",
        ]
    L += ["", "## Finite-size trend", ""]
    for problem in ("op", "dp"):
        t = trend(rows, problem)
        if t:
            L.append(
                f"- {problem.upper()} full rank: fit `alpha_hat_c = a + b / ln p_c` over {t['n']} sizes: "
                f"a = {t['a']:.3f} ± {t['a_se']:.3f}, b = {t['b']:.3f}. The asymptote 1/2 is "
                f"{abs(t['a'] - 0.5) / max(t['a_se'], 1e-9):.1f} standard errors from a (a two-parameter "
                "fit over small d; the theory's corrections are of order log log p / log p)."
            )
    heb = [r for r in rows if r["model"] == "hebbian" and np.isfinite(r["alpha_c"])]
    if heb:
        from ._estimate import theory_alpha_c

        far = {d: theory_alpha_c(d, d * d / 8 / math.log(d), "hebbian", 1.0, "op") for d in (64, 256, 1024)}
        L.append(
            "- Hebbian all-stored loads: "
            + ", ".join(f"d={r['d']} {r['problem'].upper()}: {r['alpha_c']:.3f}" for r in heb)
            + ", far below the trained memories and below the asymptote 1/8. The finite-size Hebbian theory "
            "(same definition, OP) gives "
            + ", ".join(f"{_fmt(v)} at d={d}" for d, v in far.items())
            + ": it reaches the neighbourhood of 1/8 only at d ~ 10^3."
        )
    caps = {
        "i": "P(all stored) and accuracy against the load, OP (solid) and DP (dashed); dotted lines: "
        "theory alpha_c(p) at each d.",
        "ii": "Measured alpha_hat_c(d) with 95% CIs, theory at the measured p_c (crosses), the asymptote "
        "1/2 and the Hebbian 1/8.",
        "iii": "Singular values of memories trained at capacity (largest p with every seed stored), "
        "normalised to |W|_F^2 = d^2 F(kappa), against the quarter circle, the finite-p/d law of "
        "U E^T, the truncated law for the factored memory, and the initialisation's law.",
        "iv": "Normalised target and best-competitor scores, trained (at capacity) against Hebbian at the "
        "same (d, p), with theory laws (water level of the cone projection; Hebbian finite-size law) "
        "and sqrt(2 ln p).",
        "v": "alpha_c against the rank fraction kappa: simulation against theory at the measured p_c and "
        "the asymptote F(kappa)/2.",
        "vi": f"Replica-symmetric overlap q*(alpha) at p = {p_saddle}, approaching 1 at the Gardner "
        "capacity.",
    }
    L += ["", "## Spectra", ""] + [f"- {n}" for n in spectra_notes]
    L += ["", "## Figures", ""]
    for k, name in sorted(figs.items(), key=lambda kv: ["i", "ii", "iii", "iv", "v", "vi"].index(kv[0])):
        L += [f"![figure {k}]({name})", "", f"*({k})* {caps[k]}", ""]
    path = os.path.join(out, "report.md")
    from ._sweep import atomic_write

    atomic_write(path, "\n".join(L) + "\n")
    return path, rows


def print_rows(rows, file=sys.stdout):
    print(
        f"{'d':>4} {'problem':>7} {'model':>9} {'kappa':>5} {'p_c':>8} {'alpha_c':>8} {'95% CI':>17} "
        f"{'theory':>7}  verdict",
        file=file,
    )
    for r in rows:
        print(
            f"{r['d']:>4} {r['problem']:>7} {r['model']:>9} {r['kappa']:>5.2f} {_fmt(r['p_c'], 1):>8} "
            f"{_fmt(r['alpha_c']):>8} [{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}] "
            f"{_fmt(r.get('theory_alpha_c')):>7}  {verdict(r)}",
            file=file,
        )


# ---------------------------------------------------------------- commands


def _knobs(a, train_knobs):
    return Knobs(seeds=a.seeds, seed0=a.seed0, embedding=a.embedding, **train_knobs(a))


def _cmd_sweep(a, train_knobs):
    from ._cli import _print_json

    i, n = _parse_shard(a.shard)
    spec = SweepSpec(
        ds=a.d,
        problems=a.problem,
        models=a.model,
        kappas=a.kappa or [1.0],
        alphas=parse_grid(a.alpha) if a.alpha else None,
        ps=[int(x) for x in parse_grid(a.p)] if a.p else None,
        knobs=_knobs(a, train_knobs),
    )
    cfgs = spec.configs()
    store = Store(a.out)
    store.note_command(sys.argv)
    run_sweep(spec, a.out, shard=(i, n), progress=not (a.quiet or a.json), log=None if a.json else sys.stderr)
    if a.json:
        _print_json(dict(out=a.out, configs=len(cfgs[i::n]), records=len(store.records())))


def _measurement_points(a) -> list[dict]:
    from ._measure import point_configs
    from ._solvers._adam import AdamConfig
    from ._solvers._decide import DecideConfig

    if a.model == "factored" and not a.kappa:
        raise ValueError("--kappa is required with --model factored")
    if a.model == "full" and a.kappa:
        raise ValueError("--kappa applies to --model factored only")
    dcfg = DecideConfig(tol=a.tol)
    acfg = AdamConfig(steps=a.steps, lr=a.lr, init_scale=a.init_scale)
    units = []
    for d in a.d:
        for problem in a.problem:
            for kappa in a.kappa or [None]:
                for solver in a.solver:
                    units += point_configs(
                        d=d,
                        problem=problem,
                        model=a.model,
                        kappa=kappa,
                        solver=solver,
                        seeds=a.seeds,
                        seed0=a.seed0,
                        group=a.group,
                        embedding=a.embedding,
                        decide_config=dcfg,
                        adam_config=acfg,
                    )
    return units


def _print_threshold_rows(rows, file=sys.stdout):
    print(
        f"{'d':>4} {'problem':>7} {'model':>8} {'kappa':>5} {'solver':>9} {'seeds':>5} {'p_c':>6} "
        f"{'alpha_c':>8} {'95% CI':>17} {'theory':>7} {'undecided':>9}  verdict",
        file=file,
    )
    for r in rows:
        print(
            f"{r['d']:>4} {r['problem']:>7} {r['model']:>8} {r['kappa']:>5.2f} {r['solver']:>9} "
            f"{r['seeds']:>5} "
            f"{_fmt(r['p_c'], 1):>6} {_fmt(r['alpha_c']):>8} [{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}] "
            f"{_fmt(r.get('theory_alpha_c')):>7} {r['undecided']:>9}  {r.get('theory_verdict', '')}",
            file=file,
        )


def _cmd_capacity(a):
    from ._cli import _print_json
    from ._measure import adam_vs_certified, compare, measure, threshold_rows

    if (a.dir is None) == (a.d is None):
        raise ValueError("give a folder to read, or --d to measure (with --out DIR to keep the records)")
    if a.d is not None:
        units = _measurement_points(a)
        if a.plan:
            print(json.dumps(dict(units=len(units))) if a.json else f"{len(units)} units of work")
            return
        store = Store(a.out) if a.out else None
        if store is not None:
            store.note_command(sys.argv)
        shard = _parse_shard(a.shard)
        recs = measure(units, store=store, shard=shard, log=None if (a.json or a.quiet) else sys.stderr)
        sweep_rows = []
    else:
        if not os.path.isdir(a.dir):
            raise ValueError(f"no such folder: {a.dir!r}")
        store = Store(a.dir)
        everything = store.records()
        recs = [r for r in everything if r.get("kind") == "threshold"]
        sweep = [r for r in everything if r.get("kind") != "threshold"]
        if not recs and not sweep:
            raise ValueError(f"no records under {a.dir!r}")
        sweep_rows = estimate(sweep) if sweep else []
    rows = [dict(r, kind="threshold") for r in threshold_rows(recs)]
    op_dp = [
        dict(c, kind="threshold", model="full", solver=solver)
        for solver in ("certified", "adam")
        for c in compare(
            recs,
            dict(problem="op", model="full", solver=solver),
            dict(problem="dp", model="full", solver=solver),
        )
    ]
    avc = adam_vs_certified(recs)
    if a.json:
        rows += [dict(r, kind="sweep") for r in public(sweep_rows)]
        op_dp += [dict(c, kind="sweep") for c in compare_op_dp(sweep_rows)] if sweep_rows else []
        _print_json(dict(rows=rows, op_vs_dp=op_dp, adam_vs_certified=avc))
        return
    if rows:
        _print_threshold_rows(rows)
    for c in op_dp:
        tail = (
            ""
            if c["verdict"] == "differ"
            else f" (about {c['seeds_to_decide']} seeds per side would decide it)"
        )
        print(
            f"OP - DP ({c['solver']}) at d={c['d']}: {c['diff']:+.4f} "
            f"[{c['ci_low']:+.4f}, {c['ci_high']:+.4f}]: {c['verdict']}{tail}"
        )
    for c in avc:
        print(
            f"adam vs certified at d={c['d']} {c['problem']} {c['model']}: {c['fraction_below']:.2f} of "
            f"seeds below, "
            f"capacity lost {c['lost']:+.4f}"
        )
    if sweep_rows:
        print_rows(sweep_rows)


def _parse_shard(spec):
    if not spec:
        return 0, 1
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ValueError(f"shard must be i/n, got {spec!r}") from None
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"shard must be i/n with 0 <= i < n, got {spec!r}")
    return i, n


def _cmd_report(a):
    path, _ = write_report(a.dir)
    print(f"report: {path}")


def _cmd_demo(a, train_knobs):
    """CPU-sized study: adaptive capacity search for OP, DP and Hebbian at a few d, one factored
    case, then the report."""
    from ._cli import _print_json

    t0 = time.perf_counter()
    knobs = _knobs(a, train_knobs)
    store = Store(a.out)
    store.note_command(sys.argv)
    log = None if a.json else sys.stderr
    from . import theory as th

    for d in a.ds:
        guess = float(th.alpha_c(float(max(2, round(d * d / math.log(d * d))))))
        for problem in ("op", "dp"):
            search_capacity(
                store,
                d=d,
                problem=problem,
                model="full",
                knobs=knobs,
                alpha0=guess,
                progress=not (a.quiet or a.json),
                log=log,
            )
        search_capacity(store, d=d, problem="op", model="hebbian", knobs=knobs, alpha0=0.06, log=log)
    d_f, kappa = a.factored_d, a.factored_kappa
    if d_f:
        guess = float(th.alpha_c(float(d_f * d_f / math.log(d_f * d_f)), kappa=kappa))
        search_capacity(
            store,
            d=d_f,
            problem="op",
            model="factored",
            kappa=kappa,
            knobs=knobs,
            alpha0=guess,
            progress=not (a.quiet or a.json),
            log=log,
        )
        if d_f not in a.ds:
            search_capacity(
                store,
                d=d_f,
                problem="op",
                model="full",
                knobs=knobs,
                alpha0=guess / float(th.F(kappa)),
                progress=not (a.quiet or a.json),
                log=log,
            )
    path, rows = write_report(a.out)
    if a.json:
        _print_json(dict(out=a.out, report=path, rows=public(rows), seconds=time.perf_counter() - t0))
    else:
        print_rows(rows)
        print(f"\nreport: {path}   ({time.perf_counter() - t0:.0f} s)")


def add_study_commands(sub, add_train_knobs, train_knobs):
    sw = sub.add_parser("sweep", help="run a resumable sweep into an output folder")
    sw.add_argument("--d", type=int, nargs="+", required=True)
    g = sw.add_mutually_exclusive_group(required=True)
    g.add_argument("--alpha", nargs="+", help="START:STOP:N or a list of loads")
    g.add_argument("--p", nargs="+", help="START:STOP:N or a list of p")
    sw.add_argument("--problem", nargs="+", default=["op"], choices=["op", "dp"])
    sw.add_argument("--model", nargs="+", default=["full"], choices=["full", "factored", "hebbian"])
    sw.add_argument("--kappa", type=float, nargs="+", default=None)
    add_train_knobs(sw)
    sw.add_argument("--shard", default=None, help="i/n: run every n-th config from the i-th (multi-host)")
    sw.add_argument("--out", required=True)
    sw.add_argument("--quiet", action="store_true")
    sw.add_argument("--json", action="store_true")
    sw.set_defaults(func=lambda a: _cmd_sweep(a, train_knobs))

    c = sub.add_parser("capacity", help="measure certified (or Adam) capacities, or read a folder's records")
    c.add_argument(
        "dir", nargs="?", default=None, help="a folder of records to read (sweeps or measurements)"
    )
    c.add_argument("--d", type=int, nargs="+", default=None, help="measure at these dimensions")
    c.add_argument("--problem", nargs="+", default=["op"], choices=["op", "dp"])
    c.add_argument("--model", default="full", choices=["full", "factored"])
    c.add_argument("--kappa", type=float, nargs="+", default=None)
    c.add_argument("--solver", nargs="+", default=["certified"], choices=["certified", "adam"])
    c.add_argument("--seeds", type=int, default=64)
    c.add_argument("--seed0", type=int, default=0)
    c.add_argument("--group", type=int, default=16, help="seeds per unit of work (one record file)")
    c.add_argument("--embedding", default="gaussian", choices=["gaussian", "sphere"])
    c.add_argument("--tol", type=float, default=1e-5, help="tolerance of the unstorable certificate")
    c.add_argument("--steps", type=int, default=5000, help="Adam step budget")
    c.add_argument("--lr", type=float, default=3e-2, help="Adam learning rate")
    c.add_argument("--init-scale", type=float, default=1e-3)
    c.add_argument("--out", default=None, help="keep the records here (resumable); default: keep nothing")
    c.add_argument("--shard", default=None, help="i/n: run every n-th unit of work from the i-th")
    c.add_argument("--plan", action="store_true", help="print the number of units of work and stop")
    c.add_argument("--quiet", action="store_true")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_cmd_capacity)

    r = sub.add_parser("report", help="figures and report.md from a sweep folder")
    r.add_argument("dir")
    r.set_defaults(func=_cmd_report)

    d = sub.add_parser("demo", help="the main job: CPU-sized capacity study with report")
    d.add_argument("--out", default="jaxmem-demo")
    d.add_argument("--ds", type=int, nargs="+", default=list(DEMO_DS))
    d.add_argument("--factored-d", type=int, default=DEMO_FACTORED[0], help="0: no factored case")
    d.add_argument("--factored-kappa", type=float, default=DEMO_FACTORED[1])
    add_train_knobs(d)
    d.add_argument("--quiet", action="store_true")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=lambda a: _cmd_demo(a, train_knobs))
