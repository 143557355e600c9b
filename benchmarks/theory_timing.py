"""Theory timings: alpha_c at 50 values of p in [10, 1e12], and a 20-point saddle-point
continuation. Prints a table and writes benchmarks/results/theory_timing.json.

    python benchmarks/theory_timing.py
"""

import json
import os
import time

import numpy as np
from _common import machine
from jaxmem import theory as th


def main():
    ps = np.logspace(1, 12, 50)
    th.capacity(10.0)  # compile once; the timing below includes every other p
    t = time.perf_counter()
    caps = [th.capacity(float(p)) for p in ps]
    t_cap = time.perf_counter() - t
    se_max = max(float(c.alpha_c_se) for c in caps)

    p = 1000
    alphas = np.linspace(0.05, 0.95, 20) * float(th.alpha_c(p))
    t = time.perf_counter()
    th.saddle_path(alphas[:3], p)
    t_compile = time.perf_counter() - t
    t = time.perf_counter()
    path = th.saddle_path(alphas, p)
    q = np.asarray(path.q)
    t_saddle = time.perf_counter() - t
    ok = [th.STATUS[int(s)] == "success" for s in np.asarray(path.status._value)]
    # the cost of one saddle point against p (compiled once for every p > 17)
    cost = {}
    th.saddle(0.3, 1e3)  # compile (one program for every p > 17)
    for pp in (1e2, 1e4, 1e6, 1e9, 1e12):
        t = time.perf_counter()
        s = th.saddle(0.5 * float(th.alpha_c(pp)), pp)
        cost[f"{pp:g}"] = dict(
            seconds=time.perf_counter() - t, q=float(s.q), q_se=float(s.q_se), samples=int(s.samples)
        )
    res = dict(
        machine=machine(),
        alpha_c_50=dict(
            seconds=t_cap,
            p_min=10,
            p_max=1e12,
            max_se=se_max,
            alpha_c_first=float(caps[0].alpha_c),
            alpha_c_last=float(caps[-1].alpha_c),
        ),
        saddle_20=dict(
            seconds=t_saddle,
            first_call_seconds=t_compile,
            p=p,
            alphas=alphas.tolist(),
            q=q.tolist(),
            q_se=np.asarray(path.q_se).tolist(),
            samples=np.asarray(path.samples).tolist(),
            success=ok,
        ),
        saddle_cost=cost,
    )
    print(
        f"alpha_c at 50 p in [10, 1e12]: {t_cap:.2f} s (max se {se_max:.5f}; "
        f"alpha_c(10) = {res['alpha_c_50']['alpha_c_first']:.4f}, alpha_c(1e12) = "
        f"{res['alpha_c_50']['alpha_c_last']:.4f})"
    )
    print(
        f"20-point saddle continuation, p = {p}, alpha up to 0.95 alpha_c: {t_saddle:.2f} s after "
        f"compilation ({t_compile:.1f} s for the first call); q* from {q[0]:.3f} to {q[-1]:.4f}, "
        f"max q_se {np.nanmax(np.asarray(path.q_se)):.4f}, all success: {all(ok)}"
    )
    for pp, c in cost.items():
        print(
            f"saddle at p = {pp:>6} (alpha = alpha_c / 2): {c['seconds']:.2f} s, "
            f"q* = {c['q']:.4f} +- {c['q_se']:.4f}"
        )
    os.makedirs("benchmarks/results", exist_ok=True)
    with open("benchmarks/results/theory_timing.json", "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
