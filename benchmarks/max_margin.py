"""The certified max-margin solver at d = 64 near the capacity: time, interior-point iterations,
certified gaps, and the time those iterations would take at this machine's float64 matmul peak.

An iteration forms the Newton matrix (`2 p^2 d^2` FLOPs for the `G_mu`, `2 p d^4` for the sum of
Kronecker products), factors it (`d^6 / 3`), solves twice (`4 d^4`) and applies the margins and
their adjoint about six times (`6 x 4 p^2 d`).

    python benchmarks/max_margin.py --d 64 --p 537 --n 4
"""

import argparse
import sys
import time

import jax
import jax.numpy as jnp
import jaxmem as jm
import numpy as np
from _common import matmul_peak, write


def iteration_flops(d: int, p: int) -> float:
    return 2 * p * p * d**2 + 2 * p * d**4 + d**6 / 3 + 4 * d**4 + 24 * p * p * d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--p", type=int, default=537, help="0.95 of the capacity at d = 64 (about 565)")
    ap.add_argument("--n", type=int, default=4)
    a = ap.parse_args()
    with jax.enable_x64(True):
        peak = matmul_peak(2048, jnp.float64)
    out = dict(argv=sys.argv, peak64=peak, runs={})
    for problem in ("op", "dp"):
        tasks = jm.make_tasks(jax.random.key(0), n=a.n, d=a.d, p=a.p, problem=problem)
        t = time.perf_counter()
        mm = jm.max_margin(tasks)
        first = time.perf_counter() - t
        t = time.perf_counter()
        mm = jm.max_margin(tasks)
        sec = time.perf_counter() - t
        floor = float(np.sum(mm.iterations)) * iteration_flops(a.d, a.p) / peak
        print(
            f"{problem} d={a.d} p={a.p}, {a.n} instances: {sec:.1f} s ({first:.1f} s with compilation); "
            f"status {mm.status.tolist()}; certified gaps {np.round(mm.gap, 4).tolist()}; iterations "
            f"{mm.iterations.tolist()}; active per input {np.round(mm.active.mean(axis=1), 2).tolist()}; "
            f"FLOP floor {floor:.1f} s at {peak / 1e9:.0f} GFLOP/s float64 ({sec / floor:.1f}x the floor)"
        )
        out["runs"][problem] = dict(
            seconds=sec,
            first=first,
            status=mm.status.tolist(),
            gap=mm.gap.tolist(),
            iterations=mm.iterations.tolist(),
            floor=floor,
        )
    print("written", write(f"max_margin_{a.d}", out))


if __name__ == "__main__":
    main()
