"""The certified threshold of each seed three ways, in one run: jaxmem's certified search,
the same seed decided by an off-the-shelf exact LP (scipy's HiGHS, as the tests use it), and
Adam with a bisection per seed (the papers' training protocol: 5000 steps, lr 0.03, all stored).

Every method searches the same nested tasks (`jm.make_tasks(key(seed0), ...)`, the task at `p`
the prefix of the task at `p_max`) from the same first guess (the theory's `alpha_c`; jaxmem's
search plan, read from its records) by bracketing in the plan's steps and bisecting. The LP
decides storability exactly:
`max t` subject to `<W, A_i> >= t`, `|W_jk| <= 1`, `t <= 1`, storable iff `t* > 0` (1e-9).
jaxmem decides with certificates and a tolerance of 1e-5 in the normalised margin, so the two
can differ only where the best margin lies in `(0, 1e-5)`; Adam can only find a lower threshold.

Printed per `d`: the thresholds seed by seed, how many agree, and the time per seed of each
method with its ratio to jaxmem's (compilation included, as a user meets it); an LP that runs
past `--lp-limit` seconds stops that seed's LP search (reported, not counted); `--lp-seeds`
limits the LP to the first seeds.

    python benchmarks/run.py side_by_side --d 16 24 32 --seeds 4
"""

import argparse
import math
import sys
import tempfile
import time

import jax
import jaxmem as jm
import numpy as np
from _common import write
from scipy.optimize import linprog


def _arrays(task, p):
    """float64 inputs `(p, d)` and candidates `(p, p, d)` of the first `p` associations."""
    E = np.asarray(task.inputs[:p], np.float64)
    if task.problem == "op":
        return E, np.broadcast_to(np.asarray(task.targets[:p], np.float64), (p, p, E.shape[1]))
    return E, np.asarray(jm.dp_candidates(task, np.arange(p)[:, None], np.arange(p)[None, :]), np.float64)


def lp_storable(task, p, limit):
    """Exact LP (HiGHS) on the first `p` associations: True/False, or None past `limit` s."""
    E, C = _arrays(task, p)
    d = E.shape[1]
    diff = C[np.arange(p), np.arange(p)][:, None, :] - C  # (p, p, d): target minus candidate
    mask = ~np.eye(p, dtype=bool)
    A = np.einsum("mrc,md->mrcd", diff, E)[mask].reshape(-1, d * d)  # <W, A> = (u_m - c)^T W e_m
    n = A.shape[1]
    c = np.zeros(n + 1)
    c[-1] = -1.0
    res = linprog(
        c,
        A_ub=np.hstack([-A, np.ones((A.shape[0], 1))]),
        b_ub=np.zeros(A.shape[0]),
        bounds=[(-1, 1)] * n + [(None, 1)],
        method="highs-ipm",  # interior point with crossover: 2x faster than dual simplex here at d = 24
        options=dict(time_limit=float(limit)),
    )
    if res.status != 0:
        return None
    return -res.fun > 1e-9


def search(decide, p0, p_max, step=1.04):
    """The largest storable `p` by bracketing from `p0` and bisecting (storability is monotone
    in `p` on nested tasks): `(p*, decisions)`, or `(None, decisions)` if a decision failed."""
    known = {}

    def ok(p):
        if p not in known:
            known[p] = decide(p)
        return known[p]

    p = p0
    first = ok(p)
    if first is None:
        return None, len(known)
    lo, hi = (p, None) if first else (None, p)
    while lo is None or hi is None:
        p = int(math.ceil(p * step)) if hi is None else int(p / step)
        if p < 2 or p > p_max:
            return (lo if lo is not None else 1), len(known)
        r = ok(p)
        if r is None:
            return None, len(known)
        lo, hi = (max(lo or p, p), hi) if r else (lo, min(hi or p, p))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        r = ok(mid)
        if r is None:
            return None, len(known)
        lo, hi = (mid, hi) if r else (lo, mid)
    return lo, len(known)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, nargs="+", default=[16, 24, 32])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--problem", default="op", choices=["op", "dp"])
    ap.add_argument(
        "--lp-limit", type=float, default=600.0, help="seconds per LP before a seed's LP search stops"
    )
    ap.add_argument(
        "--lp-seeds", type=int, default=None, help="the LP decides only the first seeds (default: all)"
    )
    ap.add_argument("--no-adam", action="store_true")
    ap.add_argument("--name", default="side_by_side", help="results/NAME.json")
    a = ap.parse_args(argv)
    rows = []
    for d in a.d:
        out = tempfile.mkdtemp()
        t = time.perf_counter()
        cert = jm.capacity(d=d, problem=a.problem, seeds=a.seeds, out=out)
        t_cert = (time.perf_counter() - t) / a.seeds
        plan = jm.read_tables(out, theory=False).rows[0]["settings"]["plan"]  # the same first guess
        if a.no_adam:
            adam, t_adam = None, None
        else:
            t = time.perf_counter()
            adam = jm.capacity(d=d, problem=a.problem, seeds=a.seeds, solver="adam")
            t_adam = (time.perf_counter() - t) / a.seeds
        p0, p_max = plan["p0"], 2 * plan["p_max"]
        tasks = jm.make_tasks(jax.random.key(0), n=a.seeds, d=d, p=p_max, problem=a.problem)
        lp, lp_decisions, lp_times = [], [], []
        for s in range(a.seeds if a.lp_seeds is None else min(a.lp_seeds, a.seeds)):
            task = jax.tree.map(lambda x, s=s: x[s], tasks)
            t = time.perf_counter()
            p_star, n = search(lambda p, task=task: lp_storable(task, p, a.lp_limit), p0, p_max, plan["step"])
            lp_times.append(time.perf_counter() - t)
            lp.append(p_star)
            lp_decisions.append(n)
            print(
                f"  d={d} seed {s}: LP p* {p_star} ({n} LPs, {lp_times[-1]:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
        cert_p = [int(x) for x in cert.p_star]
        finished = [s for s in range(len(lp)) if lp[s] is not None]
        row = dict(
            d=d,
            problem=a.problem,
            seeds=a.seeds,
            p_star_jaxmem=cert_p,
            p_star_lp=lp,
            p_star_adam=None if adam is None else [int(x) for x in adam.p_star],
            agree_lp=sum(lp[s] == cert_p[s] for s in finished),
            lp_finished=len(finished),
            adam_below=None if adam is None else int(sum(x < y for x, y in zip(adam.p_star, cert_p))),
            s_per_seed_jaxmem=t_cert,
            s_per_seed_lp=float(np.mean([lp_times[s] for s in finished])) if finished else None,
            s_per_seed_adam=t_adam,
            lp_decisions=lp_decisions,
        )
        row["lp_over_jaxmem"] = None if row["s_per_seed_lp"] is None else row["s_per_seed_lp"] / t_cert
        row["adam_over_jaxmem"] = None if t_adam is None else t_adam / t_cert
        rows.append(row)
        print(
            f"d={d} {a.problem}: p* jaxmem {cert_p}, LP {lp}"
            + ("" if adam is None else f", Adam {row['p_star_adam']}")
            + f"; LP agrees on {row['agree_lp']} of {len(finished)} finished"
            + f"; s/seed jaxmem {t_cert:.1f}, LP "
            + (
                "—"
                if row["s_per_seed_lp"] is None
                else f"{row['s_per_seed_lp']:.1f} ({row['lp_over_jaxmem']:.1f}x)"
            )
            + ("" if t_adam is None else f", Adam {t_adam:.1f} ({row['adam_over_jaxmem']:.1f}x)"),
            flush=True,
        )
    print(f"written {write(a.name, dict(rows=rows, argv=sys.argv))}")


if __name__ == "__main__":
    main()
