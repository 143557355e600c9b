"""The storage mechanism at d = 64: certified max-margin memories of the OP and the DP on the same
seeds, at fractions of each seed's certified threshold, beside the Hebbian memory of the same
tasks and a rank-`kappa d` max-margin memory; their spectra and scores against the laws of
docs/science.md (2.3, 2.4), OP against DP, with Student-t 95% intervals over seeds.

    python scripts/mechanism.py --d 64 --seeds 4 --out runs/mechanism

Seed `s` is the task `make_task(fold_in(key(seed0), s), ...)` of `jaxmem capacity`; OP and DP
tasks of one seed share their inputs and targets (the DP's competitors are fresh vectors), so
OP - DP is paired by seed. The thresholds are `jm.capacity` records under `OUT/thresholds-*`
(resumable); `OUT/mechanism.json` holds every instance's numbers, the config and the versions;
`OUT/mechanism.md` the tables and `OUT/mechanism.png` the figure.
"""

import argparse
import json
import math
import os
import sys
import time

import jax
import jax.numpy as jnp
import matplotlib


matplotlib.use("Agg")
import jaxmem as jm
import jaxmem.theory as th
import matplotlib.pyplot as plt
import numpy as np
from jaxmem.study import (
    atomic_write,
    ci_verdict,
    mean_ci,
    memory_summary,
    normalised_spectrum,
    paired_rows,
    SCORE_STATS,
    score_table,
    SPECTRUM_STATS,
    versions,
)


def margin_at_load(p: int, alpha: float) -> float:
    """The theory's margin `kappa >= 0` at which `alpha_c(p, margin=kappa)` is the load `alpha`
    (bisection; 0 where the load is at or above the capacity)."""
    if alpha >= float(th.alpha_c(p)):
        return 0.0
    lo, hi = 0.0, 1.0
    while float(th.alpha_c(p, margin=hi)) > alpha:
        hi *= 2
    for _ in range(20):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if float(th.alpha_c(p, margin=mid)) > alpha else (lo, mid)
    return (lo + hi) / 2


def tasks_of(problem, d, seeds, seed0, p):
    key = jax.random.key(seed0)
    one = lambda s: jm.make_task(jax.random.fold_in(key, s), d=d, p=p, problem=problem)
    return jax.tree.map(lambda *x: jnp.stack(x), *[one(s) for s in range(seeds)])


def constraints64(tasks, ps):
    """The tasks' constraints at prefixes `ps` in float64 (numpy) and their rms norms `a`."""
    cons = jm.solvers.batch_constraints(tasks, ps, int(ps.max()), stream=False)
    with jax.enable_x64(True):
        c64 = jax.tree.map(jm.solvers.to64, cons)
        a = np.asarray(jax.vmap(lambda c: c.rms_norm())(c64))
        return jax.tree.map(np.asarray, c64), a


def summarise(W, cons, j, p, d, m, F, key):
    """`memory_summary` of one memory, the laws sampled from `key`."""
    k1, k2 = jax.random.split(key)
    law = np.asarray(th.qc_sample(k1, 20_000, m / d))
    finite = np.asarray(th.product_spectrum(k2, d, p, samples=8, kappa=m / d))
    return memory_summary(W, cons.inputs[j], cons.candidates[j], p, m=m, F=F, law=law, finite=finite)


def measure(args, log):
    d, n = args.d, args.seeds
    key = jax.random.key(args.seed0 + 1)
    out = dict(thresholds={}, instances=[])
    tasks_all = {}
    for problem in args.problem:
        est = jm.capacity(
            d=d,
            problem=problem,
            seeds=n,
            seed0=args.seed0,
            out=os.path.join(args.out, f"thresholds-{problem}"),
            log=log,
        )
        out["thresholds"][problem] = dict(
            p_star=est.p_star.tolist(), alpha_c=est.alpha_c, ci=[est.ci_low, est.ci_high]
        )
        tasks_all[problem] = tasks_of(problem, d, n, args.seed0, int(est.p_star.max()))
    for problem in args.problem:
        tasks = tasks_all[problem]
        p_star = np.asarray(out["thresholds"][problem]["p_star"])
        for load in args.loads:
            ps = np.floor(load * p_star).astype(int)
            t = time.perf_counter()
            mm = jm.max_margin(tasks, p=ps)
            sec = time.perf_counter() - t
            cons, a = constraints64(tasks, ps)
            print(
                f"{problem} load {load}: max-margin of {n} instances in {sec:.0f} s, "
                f"gaps {np.round(mm.gap, 4).tolist()}",
                file=log,
                flush=True,
            )
            for j in range(n):
                p = int(ps[j])
                alpha = p * math.log(p) / d**2
                kappa_th = margin_at_load(p, alpha)
                law = th.optimal_scores(p, margin=kappa_th, samples=20_000, key=jax.random.fold_in(key, p))
                law0 = th.optimal_scores(p, samples=20_000, key=jax.random.fold_in(key, p))
                sc = score_table(mm.weight[j], cons.inputs[j], cons.candidates[j], p)
                E, U = cons.inputs[j, :p], np.asarray(tasks.targets[j, :p], np.float64)
                rec = dict(
                    problem=problem,
                    load=load,
                    seed=j,
                    p=p,
                    alpha=alpha,
                    seconds=sec / n,
                    status=jm.solvers.MARGIN_STATUS[int(mm.status[j])],
                    gap_certified=float(mm.gap[j]),
                    margin=float(mm.margin[j]),
                    margin_field=float(mm.margin[j] * a[j]),
                    margin_theory=kappa_th,
                    active=float(np.mean(mm.active[j, :p])),
                    pooled_theory=float(np.mean(np.asarray(law.pooled))),
                    law_target=float(np.mean(np.asarray(law.target))),
                    law_target_sd=float(np.std(np.asarray(law.target))),
                    law0_target=float(np.mean(np.asarray(law0.target))),
                    threshold=math.sqrt(2 * math.log(p)),
                    max_margin=summarise(mm.weight[j], cons, j, p, d, d, 1.0, jax.random.fold_in(key, 7 * p)),
                    hebbian=summarise(U.T @ E, cons, j, p, d, d, 1.0, jax.random.fold_in(key, 7 * p)),
                    singular_values=normalised_spectrum(mm.weight[j], d).tolist(),
                    hebbian_singular_values=normalised_spectrum(U.T @ E, d).tolist(),
                    targets=sc["target"].tolist(),
                    active_per_input=mm.active[j, :p].tolist(),
                    law_targets=np.asarray(law.target)[:2000].tolist(),
                )
                out["instances"].append(rec)
        if args.kappa and problem in args.rank_problem:
            m = jm.rank_of(d, kappa=args.kappa)
            F = float(th.F(m / d))
            ps = np.floor(args.rank_load * p_star).astype(int)
            t = time.perf_counter()
            mm = jm.max_margin(tasks, p=ps, model="factored", kappa=args.kappa)
            sec = time.perf_counter() - t
            cons, _ = constraints64(tasks, ps)
            print(
                f"{problem} rank {m}: max-margin of {n} instances in {sec:.0f} s, "
                f"margins {mm.margin.tolist()}",
                file=log,
                flush=True,
            )
            for j in range(n):
                p = int(ps[j])
                out["instances"].append(
                    dict(
                        problem=problem,
                        load=args.rank_load,
                        seed=j,
                        p=p,
                        rank=m,
                        seconds=sec / n,
                        margin=float(mm.margin[j]),
                        gap_to_full=float(mm.gap[j]),
                        max_margin=summarise(
                            mm.weight[j], cons, j, p, d, m, F, jax.random.fold_in(key, 11 * p)
                        ),
                        singular_values=normalised_spectrum(mm.weight[j], m, F).tolist(),
                    )
                )
    return out


def line(*cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def header(*cells) -> list[str]:
    return [line(*cells), "|" + "---|" * len(cells)]


def ci(values, nd=3) -> str:
    m, lo, hi = mean_ci(values)
    return f"{m:.{nd}f} [{lo:.{nd}f}, {hi:.{nd}f}]"


def diff(values) -> str:
    """A paired difference with its interval and what the interval decides about 0."""
    m, lo, hi = mean_ci(values)
    return f"{m:+.3f} [{lo:+.3f}, {hi:+.3f}] ({ci_verdict(lo, hi)})"


def mean(rs, key) -> float:
    return float(np.mean([r[key] for r in rs]))


def paired(rows) -> list[str]:
    return [
        line(row["stat"], f"{row['a']:.3f}", f"{row['b']:.3f}", diff_row(row), row["verdict"]) for row in rows
    ]


def diff_row(row) -> str:
    return f"{row['diff']:+.3f} [{row['low']:+.3f}, {row['high']:+.3f}]"


def tables(res, args) -> str:
    full = [r for r in res["instances"] if "rank" not in r]
    at = lambda problem, load: sorted(
        (r for r in full if r["problem"] == problem and r["load"] == load), key=lambda r: r["seed"]
    )
    thr = "; ".join(
        f"{k.upper()} p* {v['p_star']} (alpha_c {v['alpha_c']:.4f} [{v['ci'][0]:.4f}, {v['ci'][1]:.4f}])"
        for k, v in res["thresholds"].items()
    )
    L = [
        f"# The storage mechanism at d = {args.d} ({args.seeds} seeds)",
        "",
        f"Certified thresholds: {thr}",
        "",
    ]
    L += [
        "## Max-margin memories against the theory",
        "",
        "Means over seeds with 95% Student-t intervals. `margin x a`: the best normalised margin in "
        "field units; `kappa`: the theory's margin at which `alpha_c(p, kappa)` is the load. Scores in "
        "units of `|W e_mu|`; the water level is the target coordinate of `proj_{C_p(kappa)}(z)`, at "
        "capacity `kappa = 0`; `pooled`: the competitors at the water level; `sd`: the targets' spread.",
        "",
    ]
    L += header(
        "problem", "load", "gap (max)", "margin x a", "kappa", "active / input", "pooled", "target",
        "water level", "at capacity", "best", "target sd", "law sd", "sqrt(2 ln p)",
    )  # fmt: skip
    for problem in args.problem:
        for load in args.loads:
            rs = at(problem, load)
            mm = lambda k: [r["max_margin"][k] for r in rs]
            L.append(
                line(
                    problem.upper(),
                    load,
                    f"{max(r['gap_certified'] for r in rs):.4f}",
                    ci([r["margin_field"] for r in rs]),
                    f"{mean(rs, 'margin_theory'):.3f}",
                    ci([r["active"] for r in rs]),
                    f"{mean(rs, 'pooled_theory'):.2f}",
                    ci(mm("target")),
                    f"{mean(rs, 'law_target'):.3f}",
                    f"{mean(rs, 'law0_target'):.3f}",
                    ci(mm("best")),
                    ci(mm("target_sd")),
                    f"{mean(rs, 'law_target_sd'):.3f}",
                    f"{mean(rs, 'threshold'):.3f}",
                )  # fmt: skip
            )
    L += ["", "## Measured minus theory (per seed)", ""]
    L += header(
        "problem",
        "load",
        "target - water level",
        "active - pooled",
        "margin x a - kappa",
        "target - sqrt(2 ln p)",
    )
    for problem in args.problem:
        for load in args.loads:
            rs = at(problem, load)
            L.append(
                line(
                    problem.upper(),
                    load,
                    diff([r["max_margin"]["target"] - r["law_target"] for r in rs]),
                    diff([r["active"] - r["pooled_theory"] for r in rs]),
                    diff([r["margin_field"] - r["margin_theory"] for r in rs]),
                    diff([r["max_margin"]["target"] - r["threshold"] for r in rs]),
                )  # fmt: skip
            )
    L += [
        "",
        "## Spectra (normalised to |W|_F^2 = d^2 F(kappa), over sqrt d)",
        "",
        "`ks_law`: KS distance to the quarter circle (truncated to its top `kappa` for a rank-`m` "
        "memory); `ks_finite`: to the finite-`p/d` law of `U^T E`.",
        "",
    ]
    L += header("memory", "problem", "load", *SPECTRUM_STATS)
    for problem in args.problem:
        for load in args.loads:
            rs = at(problem, load)
            for mem in ("max_margin", "hebbian"):
                L.append(
                    line(mem, problem.upper(), load, *(ci([r[mem][k] for r in rs]) for k in SPECTRUM_STATS))
                )
        rs = [r for r in res["instances"] if "rank" in r and r["problem"] == problem]
        if rs:
            stats = (ci([r["max_margin"][k] for r in rs]) for k in SPECTRUM_STATS)
            L.append(line(f"max_margin rank {rs[0]['rank']}", problem.upper(), rs[0]["load"], *stats))
    if len(args.problem) == 2:
        for mem in ("max_margin", "hebbian"):
            for load in args.loads:
                L += ["", f"## OP - DP, {mem} at {load} of p* (paired per seed)", ""]
                L += header("stat", "OP", "DP", "OP - DP", "verdict (OP)")
                a, b = at("op", load), at("dp", load)
                stats = SPECTRUM_STATS + SCORE_STATS
                L += paired(paired_rows([r[mem] for r in a], [r[mem] for r in b], stats))
    for problem in args.problem:
        for load in args.loads:
            L += ["", f"## Max-margin against Hebbian, {problem.upper()} at {load} of p* (same tasks)", ""]
            L += header("stat", "max-margin", "Hebbian", "difference", "verdict (max-margin)")
            rs = at(problem, load)
            stats = ("target", "target_sd", "gap", "target_z", "ks_law", "sv_max")
            L += paired(paired_rows([r["max_margin"] for r in rs], [r["hebbian"] for r in rs], stats))
    return "\n".join(L) + "\n"


def step(ax, values, **kw):
    """A density step histogram of the concatenated `values`."""
    ax.hist(np.concatenate(values), density=True, histtype="step", **kw)


def figure(res, args, path):
    full = [r for r in res["instances"] if "rank" not in r]
    load = max(args.loads)
    fig, ax = plt.subplots(1, 4, figsize=(18, 4))
    grid = np.linspace(0, 2, 200)
    for problem, c in zip(args.problem, ("C0", "C1")):
        rs = [r for r in full if r["problem"] == problem and r["load"] == load]
        step(
            ax[0],
            [r["singular_values"] for r in rs],
            bins=40,
            color=c,
            label=f"max margin {problem.upper()}",
        )
        step(
            ax[2],
            [r["targets"] for r in rs],
            bins=50,
            color=c,
            label=f"targets {problem.upper()}",
        )
        step(
            ax[3],
            [r["active_per_input"] for r in rs],
            bins=np.arange(0, 30) - 0.5,
            color=c,
            label=f"active {problem.upper()}",
        )
    rs = [r for r in full if r["load"] == load and r["problem"] == args.problem[0]]
    step(
        ax[0],
        [r["hebbian_singular_values"] for r in rs],
        bins=40,
        color="C2",
        label="Hebbian",
    )
    ax[0].plot(grid, np.asarray(th.qc_density(grid)), "k--", label="quarter circle")
    ax[0].set(title=f"spectra at {load} of p*", xlabel="s / sqrt(d)")
    fac = [r for r in res["instances"] if "rank" in r]
    for problem, c in zip(args.problem, ("C0", "C1")):
        fs = [r for r in fac if r["problem"] == problem]
        if fs:
            step(
                ax[1],
                [r["singular_values"] for r in fs],
                bins=30,
                color=c,
                label=f"rank {fs[0]['rank']} {problem.upper()}",
            )
    if fac:
        k = fac[0]["rank"] / args.d
        ax[1].plot(grid, np.asarray(th.truncated_density(grid, k)), "k--", label="truncated quarter circle")
    ax[1].set(title=f"rank-kappa d max margin (kappa {args.kappa})", xlabel="s / sqrt(d)")
    step(
        ax[2],
        [r["law_targets"] for r in rs],
        bins=50,
        color="k",
        linestyle="--",
        label="water level (theory)",
    )
    ax[2].axvline(np.mean([r["threshold"] for r in rs]), color="gray", linestyle=":", label="sqrt(2 ln p)")
    ax[2].set(title="target scores / |W e|", xlabel="score")
    ax[3].axvline(
        np.mean([r["pooled_theory"] for r in rs]), color="k", linestyle="--", label="theory pooled (mean)"
    )
    ax[3].set(title="constraints within 1% of the least margin, per input", xlabel="count")
    for a in ax:
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path + ".tmp.png", dpi=110)
    plt.close(fig)
    os.replace(path + ".tmp.png", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--seed0", type=int, default=0)
    ap.add_argument("--problem", nargs="+", default=["op", "dp"], choices=["op", "dp"])
    ap.add_argument("--loads", type=float, nargs="+", default=[0.8, 0.95])
    ap.add_argument("--kappa", type=float, default=0.5, help="rank fraction of the factored memory (0: none)")
    ap.add_argument(
        "--rank-load",
        type=float,
        default=0.75,
        help="the factored memory's p as a fraction of the full-rank threshold",
    )
    ap.add_argument(
        "--rank-problem",
        nargs="*",
        default=["op"],
        choices=["op", "dp"],
        help="problems whose rank-kappa d memory is solved (each costs about 75 s per seed at d = 64)",
    )
    ap.add_argument("--out", default="runs/mechanism")
    args = ap.parse_args()
    if args.seeds < 2 or not all(0 < x <= 1 for x in args.loads + [args.rank_load]):
        sys.exit("mechanism.py: --seeds must be >= 2 and every load in (0, 1]")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    path = os.path.join(args.out, "mechanism.json")
    old = None
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
    if old is not None and old["config"] == vars(args):
        res = old  # measured already with these settings: tables and figure only
    else:
        res = measure(args, sys.stdout)
        res.update(config=vars(args), versions=versions(), argv=sys.argv, seconds=time.perf_counter() - t0)
        atomic_write(path, json.dumps(res))
    md = tables(res, args) + f"\nCommand: `{' '.join(sys.argv)}`; {res['seconds']:.0f} s.\n"
    atomic_write(os.path.join(args.out, "mechanism.md"), md)
    figure(res, args, os.path.join(args.out, "mechanism.png"))
    print(md)


if __name__ == "__main__":
    main()
