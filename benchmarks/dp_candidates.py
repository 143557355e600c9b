"""What generating the DP's candidates costs the working-set decider: one batch of DP decisions
near the capacity, decided twice by the working-set decider, once with the `p^2 d` candidates
of tasks above `MATERIALISE_LIMIT` generated from the key tile by tile at every pass (the batch
compacted as it finishes) and once with the batch's candidates held in memory
(`hold_candidates`, what a search does within `HOLD_BYTES`; the batch run whole). Also one outer
pass each way, and the time to hold them. Each decision batch is timed on a second run (the
first compiles).

    python benchmarks/dp_candidates.py --d 96 --p 1110 --n 4
    python benchmarks/dp_candidates.py --d 192 --p 3680 --n 1 --hold-only   # holding alone: time, peak RSS
"""

import argparse
import resource
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from _common import best_time, twice, write
from jaxmem import DecideConfig, make_tasks
from jaxmem.solvers import (
    batch_constraints,
    conclude_working_set,
    decider_parts,
    hold_candidates,
    outer_pass,
    run_ensemble,
    working_set_instances,
)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=96)
    ap.add_argument("--p", type=int, default=1110)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--hold-only", action="store_true", help="hold the candidates once, report, stop")
    a = ap.parse_args()
    tasks = make_tasks(jax.random.key(0), n=a.n, d=a.d, p=a.p, problem="dp")
    assert tasks.streams_only
    ps = np.full(a.n, a.p)
    generated = batch_constraints(tasks, ps, a.p, stream=True)
    t = time.perf_counter()
    held = hold_candidates(generated, budget=2**62)
    jax.block_until_ready(held)
    hold_s = time.perf_counter() - t
    if a.hold_only:
        gib = a.n * a.p * a.p * a.d * 4 / 2**30
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
        print(
            f"dp d={a.d} p={a.p}, {a.n} instances: held {gib:.2f} GiB in {hold_s:.1f} s, "
            f"peak RSS {peak:.2f} GiB"
        )
        _write(a, "dp_hold", hold_s=hold_s, held_gib=gib, peak_rss_gib=peak)
        return
    W = jax.vmap(lambda E, U: U.T @ E)(tasks.inputs, tasks.targets)  # the Hebbian memories
    one_pass = jax.jit(jax.vmap(lambda c, w: outer_pass(c, w, 32)[0]))
    pass_ms = {}
    for name, cons in (("generated", generated), ("held", held)):
        pass_ms[name] = 1e3 * best_time(lambda: one_pass(cons, W).block_until_ready(), repeats=2)
    cfg = DecideConfig(decider="working-set")
    chunk = decider_parts(cfg, d=a.d, problem="dp").chunk  # the search's own

    def decide(cons):
        solver, inst = working_set_instances(cons, config=cfg)
        st, _ = run_ensemble(solver, inst, chunk=chunk, compact=cons is generated, early=True)
        return conclude_working_set(solver, inst, st)

    runs = {}
    for name, cons in (("generated", generated), ("held", held)):
        first, again, dec = twice(lambda cons=cons: decide(cons))
        runs[name] = dict(
            first_s=first, again_s=again, status=dec.status.tolist(), iterations=dec.iterations.tolist()
        )
    g, h = runs["generated"], runs["held"]
    same = g["status"] == h["status"]
    print(
        f"dp d={a.d} p={a.p}, {a.n} instances (working set): one outer pass {pass_ms['generated']:.0f} ms "
        f"generating the candidates, {pass_ms['held']:.0f} ms reading them held; holding them took "
        f"{hold_s:.1f} s ({a.n * a.p * a.p * a.d * 4 / 2**30:.2f} GiB)"
    )
    print(
        f"decisions: generated {g['again_s']:.1f} s (first run {g['first_s']:.1f} s), held "
        f"{h['again_s']:.1f} s (first run {h['first_s']:.1f} s): {g['again_s'] / h['again_s']:.1f}x; "
        f"status {g['status']} / {h['status']} ({'the same' if same else 'DIFFERENT'}); iterations "
        f"{g['iterations']} / {h['iterations']}; share of the generated run spent beyond the held "
        f"one {1 - h['again_s'] / g['again_s']:.0%}"
    )
    _write(a, "dp_candidates", pass_ms=pass_ms, hold_s=hold_s, decisions=runs)
    if not same:
        raise SystemExit(1)


def _write(a, name, **result):
    path = write(
        f"{name}_{a.d}", dict(command=" ".join(["python", *sys.argv]), d=a.d, p=a.p, n=a.n, **result)
    )
    print("written", path)


if __name__ == "__main__":
    jnp.zeros(())
    main()
