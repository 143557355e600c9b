"""The working set's size `k` against the dense decider on the same instances: one batch of
decisions at `(d, p)`, each decider compiled by a first run and timed by a second, with each
instance's verdict, iterations, and at the memory found the competitors below margin 1 per input:
the most on one input (what `k` must hold for the restricted loss to be the whole loss there),
their mean, and how many inputs have more than 16.

    python benchmarks/working_set_size.py --d 128 --p 1850 --problem op --n 4 --k 32 64
    python benchmarks/working_set_size.py --d 64 --p 565 --problem dp --n 8 --k 32 64
"""

import argparse
import sys

import jax
import jax.numpy as jnp
import jaxmem as jm
import numpy as np
from _common import twice, write
from jaxmem.solvers import batch_constraints, outer_pass


def active_counts(tasks, p, W):
    """Per instance and input, the number of competitors below margin 1 at `W`."""
    cons = batch_constraints(tasks, np.full(tasks.inputs.shape[0], p), p, stream=True)
    W = jnp.asarray(W, tasks.inputs.dtype)
    return np.asarray(jax.jit(jax.vmap(lambda c, w: outer_pass(c, w, 1)[3]))(cons, W))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--p", type=int, default=1850)
    ap.add_argument("--problem", default="op")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--k", type=int, nargs="+", default=[32, 64])
    a = ap.parse_args()
    tasks = jm.make_tasks(jax.random.key(0), n=a.n, d=a.d, p=a.p, problem=a.problem)
    rows = []
    for k in [*a.k, None]:
        cfg = (
            jm.DecideConfig(decider="dense")
            if k is None
            else jm.DecideConfig(decider="working-set", working_set=k)
        )
        first, again, dec = twice(lambda cfg=cfg: jm.decide(tasks, p=a.p, config=cfg))
        counts = active_counts(tasks, a.p, dec.weight)
        act, mean, above = counts.max(axis=1), counts.mean(axis=1).round(1), (counts > 16).sum(axis=1)
        rows.append(
            dict(
                k=k,
                first_s=first,
                again_s=again,
                status=dec.status.tolist(),
                iterations=dec.iterations.tolist(),
                most_active=act.tolist(),
                mean_active=mean.tolist(),
                above_16=above.tolist(),
            )
        )
        name = "dense" if k is None else f"working set k={k}"
        print(
            f"{a.problem} d={a.d} p={a.p}, {a.n} instances, {name}: {again:.1f} s "
            f"(first run {first:.1f} s); status {dec.status.tolist()}; iterations "
            f"{dec.iterations.tolist()}; most below margin 1 on one input {act.tolist()}, mean "
            f"{mean.tolist()}, inputs with more than 16 {above.tolist()}",
            flush=True,
        )
    print("written", write(f"working_set_size_{a.problem}_{a.d}", dict(rows=rows, argv=sys.argv)))


if __name__ == "__main__":
    main()
