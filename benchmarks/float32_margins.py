"""One certified search unit (`jaxmem capacity --d D --problem op --seeds N --group G --shard
i/n`), with a report on every working-set decision that stopped because float32 no longer
resolved its margins (the outer pass found a margin `<= 0` that the working set's evaluation
found positive): `|W|`, the largest score, float32's spacing there, the least margin by both
float32 evaluations and in float64 over all constraints, and the decision's final status.

    python benchmarks/float32_margins.py --d 192 --seeds 12 --group 4 --shard 2/3

A diagnostic: it reads the decider's states through one private hook (the certify step the
search calls, `jaxmem.solvers._dispatch.conclude_working_set`).
"""

import argparse
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from _common import write
from jaxmem.solvers import _dispatch, outer_pass, STATUS, working_set_operator
from jaxmem.study import point_configs, run_unit


UNRESOLVED = 4  # the working-set decider's status for margins float32 cannot resolve


def facts(solver, inst, st, i):
    """What float32 and float64 say of instance `i`'s margins at its `W`."""
    one = jax.tree.map(lambda x: x[i], inst)
    s = jax.tree.map(lambda x: x[i], st)
    p = int(one.cons.p)
    W = np.asarray(s.opt.X, np.float64)
    E = np.asarray(one.cons.task.inputs[:p], np.float64)
    U = np.asarray(one.cons.task.targets[:p], np.float64)
    S = (E @ W.T) @ U.T
    M = np.diag(S)[:, None] - S
    np.fill_diagonal(M, np.inf)
    least32, *_ = outer_pass(one.cons, s.opt.X, solver.k)
    op = working_set_operator(one.cons, s.C, s.valid)
    on_J = float(jnp.min(jnp.where(s.valid, op.apply(s.opt.X), jnp.inf)))
    top = float(np.abs(S).max())
    return dict(
        p=p,
        W_norm=float(np.linalg.norm(W)),
        max_score=top,
        float32_spacing=float(np.spacing(np.float32(top))),
        least_margin_outer_pass=float(least32),
        least_margin_working_set=on_J,
        least_margin_float64=float(M.min()),
        iterations=int(s.total),
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=192)
    ap.add_argument("--seeds", type=int, default=12)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--shard", default="2/3", help="i/n: the i-th of the n units (0-based)")
    a = ap.parse_args()
    i, n = (int(x) for x in a.shard.split("/"))
    units = point_configs(d=a.d, problem="op", seeds=a.seeds, group=a.group)
    assert len(units) == n, f"{len(units)} units, not {n}"
    unit = units[i]

    events, real = [], _dispatch.conclude_working_set

    def conclude(solver, inst, st):
        stopped = np.flatnonzero(np.asarray(st.status) == UNRESOLVED)
        rows = [facts(solver, inst, st, j) for j in stopped]
        t = time.perf_counter()
        dec = real(solver, inst, st)
        for j, row in zip(stopped, rows):
            row.update(final=STATUS[int(dec.status[j])], float64_seconds=time.perf_counter() - t)
            events.append(row)
            print("  unresolved in float32:", row, flush=True)
        return dec

    _dispatch.conclude_working_set = conclude
    t0 = time.perf_counter()
    recs = run_unit(unit, log=sys.stdout)
    secs = time.perf_counter() - t0
    lo = [r["p_star"] for r in recs]
    print(
        f"seeds {unit['seeds']}: {sum(len(r['decisions']) for r in recs)} decisions in {secs:.0f} s; p* {lo}"
    )
    out = write(
        f"float32_margins_op_{a.d}",
        dict(command=vars(a), unit=unit, seconds=secs, p_star=lo, events=events),
    )
    print("wrote", out)


if __name__ == "__main__":
    main()
