"""What one iteration of the certified decider costs, and where it goes.

One round of a d = 48 OP threshold search (16 seeds, `p = 357`, near the threshold): the time
of one vmapped decider step after 30 warm-up steps, the line search alone from the same states (along
the step's own L-BFGS direction: its share of a step), and the
whole round (`decide_constraints`, compiled, mixed storable
and unstorable instances).

    python benchmarks/decider_step.py [--d 48] [--p 357] [--problem op] [--seeds 16]
"""

import argparse
import time

import jax
import jax.numpy as jnp
import jaxmem as jm
import numpy as np
from _common import write
from jaxmem.solvers import (
    batch_constraints,
    decide_constraints,
    decision_instances,
    lbfgs_direction,
    line_search,
)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=48)
    ap.add_argument("--p", type=int, default=357)
    ap.add_argument("--problem", default="op")
    ap.add_argument("--seeds", type=int, default=16)
    a = ap.parse_args()
    n, d, p = a.seeds, a.d, a.p
    tasks = jm.make_tasks(jax.random.key(0), n=n, d=d, p=p, problem=a.problem)
    cons = batch_constraints(tasks, np.full(n, p), p)
    solver, inst = decision_instances(cons)

    def chunk(inst, st, length):
        return jax.lax.fori_loop(0, length, lambda _, s: solver.step(inst, s), st)

    warm = jax.jit(jax.vmap(chunk, (0, 0, None)))(inst, jax.vmap(solver.init)(inst), 30)

    def per_step():
        f = jax.jit(jax.vmap(chunk, (0, 0, None)))
        jax.block_until_ready(f(inst, warm, 2))
        t = time.perf_counter()
        jax.block_until_ready(f(inst, warm, 20))
        return (time.perf_counter() - t) / 20

    def searches(inst, st, length):
        # the step's own direction and its margins, then `length` line searches along it, each
        # depending on the last (a tiny shift of the margins) so that none is hoisted
        D = lbfgs_direction(st.opt)
        dM, slope0 = inst.cons.margins(D), jnp.vdot(st.opt.g, D)

        def one(_, acc):
            return acc + line_search(st.opt.M + 1e-30 * acc, dM, slope0)[0]

        return jax.lax.fori_loop(0, length, one, jnp.zeros((), st.opt.M.dtype))

    step = per_step()
    f = jax.jit(jax.vmap(searches, (0, 0, None)))
    jax.block_until_ready(f(inst, warm, 2))
    t = time.perf_counter()
    jax.block_until_ready(f(inst, warm, 2))
    base = time.perf_counter() - t  # the direction, its margins and two searches
    t = time.perf_counter()
    jax.block_until_ready(f(inst, warm, 22))
    alone = (time.perf_counter() - t - base) / 20
    decide_constraints(cons)
    t = time.perf_counter()
    dec = decide_constraints(cons)
    rnd = time.perf_counter() - t
    res = dict(
        d=d,
        p=p,
        problem=a.problem,
        seeds=n,
        step_ms=1e3 * step,
        line_search_ms=1e3 * alone,
        round_s=rnd,
        iterations_mean=float(dec.iterations.mean()),
        iterations_max=int(dec.iterations.max()),
        status=dec.status.tolist(),
    )
    print(
        f"{a.problem.upper()} d={d} p={p}, {n} instances: decider step {res['step_ms']:.1f} ms, of which "
        f"line search {res['line_search_ms']:.1f} ms; round {rnd:.2f} s "
        f"(iterations mean {res['iterations_mean']:.0f}, max {res['iterations_max']}; "
        f"{(dec.status == 0).sum()} storable, {(dec.status == 1).sum()} unstorable)"
    )
    print(f"written {write(f'decider_step_{a.problem}', res)}")


if __name__ == "__main__":
    main()
