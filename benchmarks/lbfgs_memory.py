"""The L-BFGS history length against iterations and time: one batch of decisions at `(d, p)` for
each `memory`, each timed on a second run (the first compiles), with each instance's verdict and
iterations. A shorter history makes the update and the direction cheaper; near the capacity it
costs iterations.

    python benchmarks/lbfgs_memory.py --d 64 --p 582 --problem op --n 16 --memory 100 50 20 10
"""

import argparse
import sys

import jax
import jaxmem as jm
from _common import twice, write


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--p", type=int, default=582)
    ap.add_argument("--problem", default="op")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--decider", default="working-set", choices=["dense", "working-set"])
    ap.add_argument("--memory", type=int, nargs="+", default=[100, 50, 20, 10])
    a = ap.parse_args()
    tasks = jm.make_tasks(jax.random.key(0), n=a.n, d=a.d, p=a.p, problem=a.problem)
    rows = []
    for m in a.memory:
        cfg = jm.DecideConfig(decider=a.decider, memory=m)
        first, again, dec = twice(lambda cfg=cfg: jm.decide(tasks, p=a.p, config=cfg))
        rows.append(
            dict(
                memory=m,
                first_s=first,
                again_s=again,
                status=dec.status.tolist(),
                iterations=dec.iterations.tolist(),
            )
        )
        print(
            f"{a.problem} d={a.d} p={a.p}, {a.n} instances, {a.decider}, memory {m}: {again:.1f} s (first "
            f"run {first:.1f} s); unstorable {int((dec.status == 1).sum())}, undecided "
            f"{int((dec.status == 2).sum())}; iterations mean {dec.iterations.mean():.0f}, max "
            f"{dec.iterations.max()}",
            flush=True,
        )
    print("written", write(f"lbfgs_memory_{a.problem}_{a.d}", dict(rows=rows, argv=sys.argv)))


if __name__ == "__main__":
    main()
