"""The pieces of one working-set decider step against one dense decider iteration, each jitted
and vmapped over the same instances and timed alone (best of 3 after a warm-up), and the float64
certificate of a finished batch (`verify_working_set`: the least margin over all constraints and
the working set's multiplier bound). With `--pieces`, an inner iteration of one instance alone
against its share of the batch's, the parts of an inner iteration timed alone (the L-BFGS
direction, the margins of a direction, the adjoint, the L-BFGS update) for the batch and for
one instance alone, the adjoint's last product also as a transpose and a matmul (`tmatmul`'s
alternative), for the OP the margins formed by a gather from the targets instead of from the
gathered candidates, and one plain read of the gathered candidates (the memory-bandwidth floor of
the margins and of the adjoint, which read them once each).

    python benchmarks/working_set_step.py --d 128 --p 1850 --problem op --n 8
"""

import argparse
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from _common import best_time, write
from jax.lax import Precision
from jaxmem import DecideConfig, make_tasks
from jaxmem.solvers import (
    batch_constraints,
    decision_instances,
    init_states,
    lbfgs_direction,
    lbfgs_step,
    lbfgs_update,
    outer_pass,
    verify_working_set,
    working_set_instances,
    working_set_operator,
)


HIGHEST = Precision.HIGHEST


def pieces_ms(inst, st, problem):
    """Milliseconds of each part of an inner iteration, jitted and vmapped alone."""
    op = lambda i, s: working_set_operator(i.cons, s.C, s.valid)

    def gathered(i, s):
        # the OP's candidates are targets: the margins without the gathered (p, k, d) array
        V = jnp.matmul(i.cons.task.inputs, s.opt.X.T, precision=HIGHEST)
        U = i.cons.task.targets
        return jnp.sum(V * U, axis=1)[:, None] - jnp.sum(V[:, None, :] * U[s.J], axis=-1)

    def transposed(i, s):
        # the adjoint's last product as a transpose and a matmul, not one contraction (`tmatmul`)
        R, U, E = s.opt.M, i.cons.task.targets, i.cons.task.inputs
        X = R.sum(axis=1)[:, None] * U
        for j in range(0, R.shape[1], 16):  # the library's blocks of 16 columns
            X = X - jnp.sum(R[:, j : j + 16, None] * s.C[:, j : j + 16], axis=1)
        return jnp.matmul(X.T, E, precision=HIGHEST)

    parts = dict(
        read=lambda i, s: jnp.sum(s.C, axis=-1),  # the gathered candidates read once, nothing else
        direction=lambda i, s: lbfgs_direction(s.opt),
        margins=lambda i, s: op(i, s).apply(s.opt.X),
        adjoint=lambda i, s: op(i, s).adjoint(s.opt.M),
        transposed=transposed,
        update=lambda i, s: lbfgs_update(
            s.opt, 1.01 * s.opt.X, s.opt.M, 0.99 * s.opt.g, s.opt.rsum, s.opt.stored, 1.0
        ),
    )
    if problem == "op":
        parts["gathered"] = gathered
    out = {}
    for name, f in parts.items():
        g = eqx.filter_jit(jax.vmap(f))
        out[name] = 1e3 * best_time(lambda g=g: jax.block_until_ready(g(inst, st)), repeats=3)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--p", type=int, default=1850)
    ap.add_argument("--problem", default="op")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--pieces", action="store_true")
    a = ap.parse_args()
    tasks = make_tasks(jax.random.key(1), n=a.n, d=a.d, p=a.p, problem=a.problem)
    ps = np.full(a.n, a.p)
    cfg = DecideConfig(decider="working-set", working_set=a.k)
    solver, inst = working_set_instances(batch_constraints(tasks, ps, a.p, stream=True), config=cfg)
    st = init_states(solver, inst)
    X = st.opt.X + 0.01
    pieces = dict(
        inner=eqx.filter_jit(
            jax.vmap(lambda i, s: lbfgs_step(working_set_operator(i.cons, s.C, s.valid), s.opt))
        ),
        outer=eqx.filter_jit(jax.vmap(lambda i, s, X: outer_pass(i.cons, X, a.k))),
        swap=eqx.filter_jit(jax.vmap(lambda i, s: solver.swap(i.cons, s.opt, s.J))),
    )
    args = dict(inner=(inst, st), outer=(inst, st, X), swap=(inst, st))
    ms = {
        k: 1e3 * best_time(lambda f=f, x=args[k]: jax.block_until_ready(f(*x)), repeats=3)
        for k, f in pieces.items()
    }
    ms["certificate"] = 1e3 * best_time(lambda: verify_working_set(inst, st, cfg.tol), repeats=3)
    dsolver, dinst = decision_instances(batch_constraints(tasks, ps, a.p, stream=None))
    dst = init_states(dsolver, dinst)
    dstep = eqx.filter_jit(jax.vmap(dsolver.step))
    ms["dense"] = 1e3 * best_time(lambda: jax.block_until_ready(dstep(dinst, dst)), repeats=3)
    every = cfg.outer_every
    per_it = (every * ms["inner"] + ms["outer"] + ms["swap"]) / every
    print(
        f"{a.problem} d={a.d} p={a.p}, {a.n} instances, k={a.k}: working-set inner iteration "
        f"{ms['inner']:.0f} ms, outer pass {ms['outer']:.0f} ms, swap {ms['swap']:.0f} ms, float64 "
        f"certificate {ms['certificate']:.0f} ms; "
        f"dense iteration {ms['dense']:.0f} ms; with an outer pass every {every}: "
        f"{per_it:.0f} ms per iteration, {ms['dense'] / per_it:.1f}x cheaper than dense"
    )
    if a.pieces:
        # one instance alone: the end of a search, when a seed's last decisions run by themselves
        one = jax.tree.map(lambda x: x[:1], (inst, st))
        f = pieces["inner"]
        ms["inner_alone"] = 1e3 * best_time(lambda: jax.block_until_ready(f(*one)), repeats=3)
        print(
            f"inner iteration per instance: {ms['inner'] / a.n:.1f} ms in a batch of {a.n}, "
            f"{ms['inner_alone']:.1f} ms alone"
        )
        for label, x in ((f"{a.n} instances", (inst, st)), ("one instance alone", one)):
            got = pieces_ms(*x, a.problem)
            ms.update({f"{k} ({label})": v for k, v in got.items()})
            alt = f" (gathered from the targets: {got['gathered']:.1f} ms)" if "gathered" in got else ""
            gb = x[1].C.size * x[1].C.dtype.itemsize / 1e9
            rate = lambda name: f"{gb / got[name] * 1e3:.1f} GB/s"
            print(
                f"the (p, k, d) candidates, {label}: {gb:.2f} GB; one plain read {got['read']:.1f} ms "
                f"({rate('read')}), margins of a direction {rate('margins')}, adjoint {rate('adjoint')}"
            )
            print(
                f"pieces of an inner iteration, {label}: direction {got['direction']:.1f} ms, margins "
                f"of a direction {got['margins']:.1f} ms{alt}, adjoint {got['adjoint']:.1f} ms (as a "
                f"transpose and a matmul: {got['transposed']:.1f} ms), L-BFGS update {got['update']:.1f} ms"
            )
    print("written", write(f"working_set_step_{a.problem}_{a.d}", dict(ms=ms, argv=sys.argv, k=a.k)))


if __name__ == "__main__":
    main()
