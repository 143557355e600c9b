"""(d) Accelerator benchmark: d in {256, 512, 1024}, OP and DP, near capacity.

Per (d, problem): time per training step (streaming path), achieved FLOP/s against the device's
measured matmul peak, and how many stored/not-stored decisions change between the default
matmul precision (TF32 on NVIDIA GPUs) and full float32 (`Precision.HIGHEST`) for a memory
trained near capacity. `--quick` runs tiny sizes on any backend (a check of the code path).

    python benchmarks/gpu.py            # on a GPU
    python benchmarks/gpu.py --quick    # CPU smoke run
"""

import sys
import time

import jax
import jax.numpy as jnp
import jaxmem as jm
from _common import matmul_peak, write
from jax import lax
from jaxmem._loss import stream_pass


def case(d, problem, steps, n):
    p = jm.p_from_alpha(d, 0.9 * float(jm.theory.alpha_c(float(d * d / (2 * jnp.log(d))))))
    tasks = jm.make_tasks(jax.random.key(0), n=n, d=d, p=p, problem=problem, materialise_limit=0)
    kw = dict(steps=steps, chunk=steps, progress=False, early_stop=False, stream=True, block=1024)
    jm.train(jm.FullRank, tasks, **dict(kw, steps=steps - 1))  # compile (the budget is not static)
    t = time.perf_counter()
    run = jm.train(jm.FullRank, tasks, **dict(kw, steps=2 * steps - 1))
    t2 = time.perf_counter() - t
    t = time.perf_counter()
    jm.train(jm.FullRank, tasks, **dict(kw, steps=steps - 1))
    t1 = time.perf_counter() - t
    per_step = (t2 - t1) / steps
    flops = n * (4 * p * p * d + 4 * p * d * d)
    changed = 0
    for i in range(n):
        task = jax.tree.map(lambda x: x[i], tasks)
        W = run.model.W[i]
        s_def = stream_pass(jnp.matmul(task.inputs, W.T), task, 1024, lax.Precision.DEFAULT)[2].stored
        s_hi = stream_pass(
            jnp.matmul(task.inputs, W.T, precision=lax.Precision.HIGHEST), task, 1024, lax.Precision.HIGHEST
        )[2].stored
        changed += int(jnp.sum(s_def != s_hi))
    return dict(
        d=d,
        p=p,
        problem=problem,
        n=n,
        seconds_per_step=per_step,
        achieved_flops=flops / per_step,
        decisions=n * p,
        decisions_changed_tf32=changed,
        accuracy=float(run.accuracy.mean()),
    )


def main():
    quick = "--quick" in sys.argv
    ds, steps, n = ([16, 32], 20, 2) if quick else ([256, 512, 1024], 50, 4)
    peak_default = matmul_peak(512 if quick else 8192)
    peak_highest = matmul_peak(512 if quick else 8192, precision=lax.Precision.HIGHEST)
    rows = []
    for d in ds:
        for problem in ("op", "dp"):
            r = case(d, problem, steps, n)
            r["fraction_of_default_peak"] = r["achieved_flops"] / peak_default
            rows.append(r)
            print(
                f"d={d:5d} p={r['p']:6d} {problem}: {1e3 * r['seconds_per_step']:8.2f} ms/step, "
                f"{r['achieved_flops'] / 1e12:6.2f} TFLOP/s ({100 * r['fraction_of_default_peak']:.0f}% "
                f"of the "
                f"default-precision peak {peak_default / 1e12:.1f}), decisions changed by TF32: "
                f"{r['decisions_changed_tf32']} of {r['decisions']}",
                flush=True,
            )
    print(
        f"float32 matmul peak: default precision {peak_default / 1e12:.2f} TFLOP/s, HIGHEST "
        f"{peak_highest / 1e12:.2f}"
    )
    res = dict(rows=rows, peak_default=peak_default, peak_highest=peak_highest)
    print("written " + write("gpu_quick" if quick else "gpu", res))


if __name__ == "__main__":
    main()
