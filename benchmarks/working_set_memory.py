"""Peak memory of working-set decisions at d = 256 near the capacity: the `p^2 d` candidates or
margins are never held (at `p` = 6500 they would be 43 GB in float32). Run it under
`/usr/bin/time -v` for the process's peak RSS; `--max-iter` bounds the decision (it may end
undecided: the memory of its steps, outer passes and float64 recheck is what is measured).

    /usr/bin/time -v python benchmarks/working_set_memory.py --d 256 --p 6500 --n 2 --max-iter 60
"""

import argparse
import time

import jax
import jaxmem as jm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--p", type=int, default=6500)
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--problem", default="op")
    ap.add_argument("--max-iter", type=int, default=60)
    a = ap.parse_args()
    tasks = jm.make_tasks(jax.random.key(0), n=a.n, d=a.d, p=a.p, problem=a.problem)
    cfg = jm.DecideConfig(decider="working-set", max_iter=a.max_iter)
    t = time.perf_counter()
    dec = jm.decide(tasks, p=a.p, config=cfg)
    held = 4 * a.p * a.p * a.d * a.n / 2**30
    k = jm.solvers.working_set_size(cfg, a.d)
    print(
        f"{a.problem} d={a.d} p={a.p}, {a.n} instances, working set k={k}: "
        f"{time.perf_counter() - t:.0f} s, status {dec.status.tolist()}, "
        f"iterations {dec.iterations.tolist()}; "
        f"the p^2 d candidates of the batch would be {held:.0f} GiB in float32",
        flush=True,
    )


if __name__ == "__main__":
    main()
