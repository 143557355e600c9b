"""Working-set decisions run in short chunks against long ones that end where an instance
finishes (`run_ensemble(early=True)`): the same decisions, their time, and what the process
spent in the kernel (system time and minor page faults: every chunk is one call, which
allocates the batch's state afresh, `p k d` candidates per instance).

    python benchmarks/chunks.py --d 128 --p 1850 --n 1 4 --problem op [--tol 1e-9 --max-iter 1000]
"""

import argparse
import resource
import sys
import time

import jax
import numpy as np
from _common import write
from jaxmem import DecideConfig, make_tasks
from jaxmem.solvers import batch_constraints, conclude_working_set, run_ensemble, working_set_instances


def _usage():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), r.ru_stime, r.ru_minflt


def run(tasks, p, chunk, early, tol, max_iter):
    """Decide every task at `p`; the decision and the wall, system time and page faults."""
    n = tasks.inputs.shape[0]
    cfg = DecideConfig(decider="working-set", tol=tol, max_iter=max_iter)
    solver, inst = working_set_instances(batch_constraints(tasks, np.full(n, p), p, stream=True), config=cfg)
    t0, s0, f0 = _usage()
    st, work = run_ensemble(solver, inst, chunk=chunk, early=early)
    jax.block_until_ready(st)
    t1, s1, f1 = _usage()
    dec = conclude_working_set(solver, inst, st)
    return dec, dict(seconds=t1 - t0, system=s1 - s0, faults=f1 - f0, steps=work)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--p", type=int, default=1850)
    ap.add_argument("--n", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--problem", default="op")
    ap.add_argument("--tol", type=float, default=DecideConfig().tol, help="smaller: longer decisions")
    ap.add_argument("--max-iter", type=int, default=DecideConfig().max_iter)
    a = ap.parse_args()
    out = {}
    for n in a.n:
        tasks = make_tasks(jax.random.key(2), n=n, d=a.d, p=a.p, problem=a.problem)
        ways = dict(short=(2, False), long=(DecideConfig().chunk, True))
        for name, (chunk, early) in ways.items():
            run(tasks, a.p, chunk, early, a.tol, a.max_iter)  # compiles
            dec, m = run(tasks, a.p, chunk, early, a.tol, a.max_iter)
            m.update(status=dec.status.tolist(), iterations=dec.iterations.tolist())
            out[f"{n}/{name}"] = m
            print(
                f"{a.problem} d={a.d} p={a.p} tol={a.tol:g}, {n} instance(s), chunks of {chunk} steps"
                f"{' ending where one finishes' if early else ''}: {m['seconds']:.1f} s, system "
                f"{m['system']:.1f} s, {m['faults'] / 1e6:.2f} M page faults; status {m['status']}, "
                f"iterations {m['iterations']}",
                flush=True,
            )
        same = all(out[f"{n}/short"][k] == out[f"{n}/long"][k] for k in ("status", "iterations"))
        print(
            f"  same decisions and iterations: {same}; long chunks "
            f"{out[f'{n}/short']['seconds'] / out[f'{n}/long']['seconds']:.2f}x faster"
        )
    print("written", write(f"chunks_{a.problem}_{a.d}_{a.tol:g}", dict(results=out, argv=sys.argv)))


if __name__ == "__main__":
    main()
