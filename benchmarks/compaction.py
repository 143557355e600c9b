"""(e) No wasted work: ensemble compaction, compiles per sweep, and the cost of a tiny budget.

1. A 32-seed OP ensemble near the Adam capacity (d = 32, alpha = 0.93, 5000 steps): wall time
   with compaction (finished instances leave the batch) against without (the whole ensemble
   runs until its slowest member is done), in one run; and the instance-steps each computed
   against the sum of the steps each instance needed (the floor).
2. A 12-point `p` sweep at one `d` (`jaxmem sweep --d 16 --p 40:62:12 --seeds 4 --steps 200`):
   the number of compiles of the training kernel, counted from `JAX_LOG_COMPILES`.
3. A budget of 2 steps at d = 64, p = 2048: wall time with `chunk = 100` and `chunk = 3`.

    python benchmarks/compaction.py [--quick]
"""

import os
import re
import subprocess
import sys
import tempfile
import time

import jax
import jaxmem as jm
from _common import twice, write


def compaction(d, alpha, seeds, steps):
    p = jm.p_from_alpha(d, alpha)
    tasks = jm.make_tasks(jax.random.key(0), n=seeds, d=d, p=p)
    out = {}
    for compact in (True, False):
        cfg = jm.TrainConfig(steps=steps, compact=compact)
        # the first run with its compiles (one per bucket)
        first, again, run = twice(lambda cfg=cfg: jm.train(jm.FullRank, tasks, cfg))
        out[compact] = (again, first, run)
    (t_on, first_on, on), (t_off, first_off, off) = out[True], out[False]
    assert on.steps_to_store == off.steps_to_store
    return dict(
        d=d,
        p=p,
        alpha=jm.alpha_of(d, p),
        seeds=seeds,
        steps=steps,
        fraction_all_stored=float(on.all_stored.mean()),
        needed_instance_steps=on.instance_steps,
        computed_compacted=on.computed_steps,
        computed_uncompacted=off.computed_steps,
        seconds_compacted=t_on,
        seconds_uncompacted=t_off,
        seconds_compacted_first=first_on,
        seconds_uncompacted_first=first_off,
        speedup=t_off / t_on,
    )


def sweep_compiles(d, spec, seeds, steps):
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, JAX_LOG_COMPILES="1")
        cmd = [sys.executable, "-m", "jaxmem.cli", "sweep", "--d", str(d), "--p", spec]
        cmd += ["--seeds", str(seeds), "--steps", str(steps), "--out", out]
        t = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
        seconds = time.perf_counter() - t
    log = r.stdout + r.stderr
    chunk = len(re.findall(r"Compiling jit\(_chunk\)", log))
    total = len(re.findall(r"Compiling jit\(", log))
    command = " ".join(["jaxmem", *cmd[3:-2]])
    return dict(command=command, chunk_compiles=chunk, all_compiles=total, seconds=seconds)


def tiny_budget(d, p):
    tasks = jm.make_tasks(jax.random.key(0), n=1, d=d, p=p)
    out = {}
    jm.train(jm.FullRank, tasks, steps=2)  # compile (the chunk length is a traced bound)
    for chunk in (100, 3):
        t = time.perf_counter()
        run = jm.train(jm.FullRank, tasks, steps=2, chunk=chunk)
        out[chunk] = (time.perf_counter() - t, run.evaluations)
    return dict(d=d, p=p, seconds_chunk100=out[100][0], seconds_chunk3=out[3][0], evaluations=out[100][1])


def main():
    quick = "--quick" in sys.argv
    c = compaction(16, 0.9, 8, 400) if quick else compaction(32, 0.93, 32, 5000)
    s = sweep_compiles(16, "40:62:12", 4, 20 if quick else 200)
    b = tiny_budget(16, 64) if quick else tiny_budget(64, 2048)
    floor = c["needed_instance_steps"]
    print(
        f"compaction: {c['seeds']} OP seeds, d={c['d']}, p={c['p']} (alpha {c['alpha']:.3f}), "
        f"{c['steps']} steps, {c['fraction_all_stored']:.2f} stored"
    )
    print(
        f"  instance-steps: needed {c['needed_instance_steps']}, computed {c['computed_compacted']} "
        f"compacted ({c['computed_compacted'] / floor:.2f}x the floor), "
        f"{c['computed_uncompacted']} uncompacted ({c['computed_uncompacted'] / floor:.2f}x)"
    )
    print(
        f"  wall: {c['seconds_compacted']:.2f} s compacted, {c['seconds_uncompacted']:.2f} s uncompacted "
        f"({c['speedup']:.2f}x); first runs with their compiles {c['seconds_compacted_first']:.2f} s "
        f"and {c['seconds_uncompacted_first']:.2f} s"
    )
    print(f"sweep: `{s['command']}`:")
    print(
        f"  {s['chunk_compiles']} compiles of the training kernel, {s['all_compiles']} in all "
        f"({s['seconds']:.1f} s)"
    )
    print(
        f"tiny budget: steps=2 at d={b['d']}, p={b['p']}: {b['seconds_chunk100']:.2f} s with chunk=100, "
        f"{b['seconds_chunk3']:.2f} s with chunk=3 ({b['evaluations']} evaluations)"
    )
    name = "compaction_quick" if quick else "compaction"
    print(f"written {write(name, dict(compaction=c, sweep=s, tiny_budget=b))}")


if __name__ == "__main__":
    main()
