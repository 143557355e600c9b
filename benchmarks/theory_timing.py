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
    alphas = np.linspace(0.05, 0.8, 20)
    t = time.perf_counter()
    path = th.saddle_path(alphas, p)
    q = np.asarray(path.q)
    t_saddle = time.perf_counter() - t
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
            p=p,
            samples=256,
            alphas=alphas.tolist(),
            q=q.tolist(),
            status=np.asarray(path.status).tolist(),
        ),
    )
    print(
        f"alpha_c at 50 p in [10, 1e12]: {t_cap:.2f} s (max se {se_max:.5f}; "
        f"alpha_c(10) = {res['alpha_c_50']['alpha_c_first']:.4f}, alpha_c(1e12) = "
        f"{res['alpha_c_50']['alpha_c_last']:.4f})"
    )
    print(
        f"20-point saddle continuation, p = {p}: {t_saddle:.2f} s (including compilation); "
        f"q* from {q[0]:.3f} to {q[-1]:.4f}, all status 0: {bool(np.all(np.asarray(path.status) == 0))}"
    )
    os.makedirs("benchmarks/results", exist_ok=True)
    with open("benchmarks/results/theory_timing.json", "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
