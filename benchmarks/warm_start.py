"""A decision started from the memory of the same seed's last storable `p` against one started
from `W = 0`: iterations and time (second runs), on the same instances and decider.

    python benchmarks/warm_start.py --d 128 --p 1800 1850 --problem op --n 4
"""

import argparse
import sys
import time

import jax
import jaxmem as jm
import numpy as np
from _common import write


def timed(tasks, p, cfg, W0=None):
    jm.decide(tasks, p=p, config=cfg, W0=W0)
    t = time.perf_counter()
    dec = jm.decide(tasks, p=p, config=cfg, W0=W0)
    return dec, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--p", type=int, nargs=2, default=[1800, 1850], help="the storable p, then the next")
    ap.add_argument("--problem", default="op")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--decider", default="working-set")
    a = ap.parse_args()
    tasks = jm.make_tasks(jax.random.key(0), n=a.n, d=a.d, p=max(a.p), problem=a.problem)
    cfg = jm.DecideConfig(decider=a.decider)
    first, _ = timed(tasks, a.p[0], cfg)
    ok = first.status == 0
    W0 = np.where(ok[:, None, None], first.weight, 0.0).astype(np.float32)
    cold, t_cold = timed(tasks, a.p[1], cfg)
    warm, t_warm = timed(tasks, a.p[1], cfg, W0=W0)
    print(
        f"{a.problem} d={a.d} {a.decider}, {a.n} instances, p {a.p[0]} -> {a.p[1]} "
        f"(storable at {a.p[0]}: {ok.tolist()}): from W = 0 {t_cold:.1f} s, iterations "
        f"{cold.iterations.tolist()}, status {cold.status.tolist()}; warm {t_warm:.1f} s, iterations "
        f"{warm.iterations.tolist()}, status {warm.status.tolist()}",
        flush=True,
    )
    row = dict(
        cold=dict(seconds=t_cold, iterations=cold.iterations.tolist(), status=cold.status.tolist()),
        warm=dict(seconds=t_warm, iterations=warm.iterations.tolist(), status=warm.status.tolist()),
        storable_first=ok.tolist(),
        argv=sys.argv,
    )
    print("written", write(f"warm_start_{a.problem}_{a.d}", row))


if __name__ == "__main__":
    main()
