"""A threshold search's decisions for some seeds, each run alone (one instance, a working-set
decision from W = 0, stepped one jitted step at a time), with the inner iterations of every
step: the reference for a search whose batched run stalls on a decision. Bisection as the
study's search: up from `p0` to `p1`, then halves until the bracket holds `resolution` values.

    python benchmarks/decisions_alone.py --d 192 --p0 3639 --p1 3785 --seeds 8 9 10 11 --resolution 4

With `--compare DIR` it runs nothing and writes nothing: it compares the decisions of the records
in `DIR` (`jaxmem capacity --out DIR`) with those of its last result at `--d`, by seed and `p`.
"""

import argparse
import json
import os
import sys
import time

import equinox as eqx
import jax
import numpy as np
from _common import write
from jaxmem import DecideConfig, make_task
from jaxmem.solvers import batch_constraints, init_states, STATUS, working_set_instances
from jaxmem.study import Store


def decide_alone(task, p, P, step_cache, cap):
    """One decision at `p` (rows padded to `P`): status, iterations, inner iterations per step."""
    cfg = DecideConfig(decider="working-set")
    solver, inst = working_set_instances(batch_constraints(task, np.full(1, p), P, stream=True), config=cfg)
    step = step_cache.setdefault("step", eqx.filter_jit(jax.vmap(solver.step)))
    st = init_states(solver, inst)
    inner = []
    while int(st.status[0]) == -1 and int(st.total[0]) < cap:
        before = int(st.total[0])
        st = step(inst, st)
        inner.append(int(st.total[0]) - before)
    return int(st.status[0]), int(st.total[0]), inner


def compare(folder, d):
    """Each decision of the records in `folder` against the same seed's decision at the same `p`
    in `results/decisions_alone_op_{d}.json`: statuses, and the iteration counts' differences."""
    path = os.path.join(os.path.dirname(__file__), "results", f"decisions_alone_op_{d}.json")
    with open(path) as f:
        alone = json.load(f)["results"]
    ref = {
        (int(s), r["p"]): (STATUS[r["status"]], r["iterations"]) for s, rows in alone.items() for r in rows
    }
    both = differ = 0
    gaps = []
    for rec in Store(folder).records():
        for x in rec.get("decisions", []):
            key = (rec["seed"], x["p"])
            if key in ref:
                both += 1
                differ += ref[key][0] != x["status"]
                gaps.append(abs(ref[key][1] - x["iterations"]))
    print(
        f"{both} decisions in both ({len(ref)} alone): {differ} differ in status; "
        f"iterations differ by at most {max(gaps, default=0)}"
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=192)
    ap.add_argument("--p0", type=int)
    ap.add_argument("--p1", type=int, help="the first p above p0 (the search's second)")
    ap.add_argument("--p-max", type=int, default=5823, help="the nested task's length (the plan's p_max)")
    ap.add_argument("--seeds", type=int, nargs="+")
    ap.add_argument("--seed0", type=int, default=0)
    ap.add_argument("--resolution", type=int, default=1)
    ap.add_argument("--cap", type=int, default=3000, help="stop a decision after this many iterations")
    ap.add_argument("--compare", metavar="DIR", help="compare the records in DIR with the last result")
    a = ap.parse_args()
    if a.compare:
        return compare(a.compare, a.d)
    if a.p0 is None or a.p1 is None or not a.seeds:
        ap.error("--p0, --p1 and --seeds are required to run decisions")
    P = -(-a.p1 // 32) * 32
    cache, out = {}, {}
    for seed in a.seeds:
        key = jax.random.fold_in(jax.random.key(a.seed0), seed)
        task = jax.tree.map(lambda x: x[None], make_task(key, d=a.d, p=a.p_max, problem="op"))
        lo, hi, p, rows = None, None, a.p0, []
        while True:
            t = time.perf_counter()
            status, total, inner = decide_alone(task, p, P, cache, a.cap)
            secs = time.perf_counter() - t
            rows.append(dict(p=p, status=status, iterations=total, steps=inner, seconds=secs))
            print(
                f"seed {seed} p {p}: status {status}, {total} iterations in {len(inner)} steps "
                f"({sum(i < 5 for i in inner)} of fewer than 5), {secs:.1f} s",
                flush=True,
            )
            if status not in (0, 1):
                break
            lo, hi = (p, hi) if status == 0 else (lo, p)
            if lo is None or (hi is not None and hi - lo <= a.resolution):
                break
            p = a.p1 if hi is None else (lo + hi) // 2
        out[seed] = rows
    print("written", write(f"decisions_alone_op_{a.d}", dict(results=out, argv=sys.argv)))


if __name__ == "__main__":
    main()
