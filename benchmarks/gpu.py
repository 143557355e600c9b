"""(d) Accelerator benchmark, one command (< 8 minutes on one H200).

1. Training step (streaming kernels, one instance near capacity) at each matmul precision
   (`highest` = float32, `tf32`, `bf16`): time per step and achieved TFLOP/s against this
   device's measured matmul peak at the same precision, for the OP at d in {256, 512, 1024} and
   the DP at d = 256.
2. The decision solver: time to decide one instance at d = 256 and 512 (OP near capacity), with
   its iterations.
3. Decisions near capacity: for memories trained with `tf32`, how many stored / not-stored flags
   change when the same memories are evaluated with tf32 matmuls instead of HIGHEST (the risk),
   and how many of the flags jaxmem reports (made at HIGHEST, near-ties in float64) differ from
   an independent float64 evaluation (must be 0).

4. `--certified` instead: one certified OP capacity point at d = 256 (64 seeds) and d = 512
   (16 seeds) with the working-set decider, each with its median, CI, undecided seeds, time,
   decisions and iterations (target: under 8 minutes in all).

    python benchmarks/gpu.py                      # on a GPU
    python benchmarks/gpu.py --certified          # on a GPU
    python benchmarks/gpu.py [--certified] --quick  # tiny sizes, any backend (the code path)
"""

import sys
import time

import jax
import jax.numpy as jnp
import jaxmem as jm
import numpy as np
from _common import best_time, write
from jax import lax
from jaxmem import einsum, stream_pass


PRECISIONS = ("highest", "tf32", "bf16")


def peak(n, precision):
    k1, k2 = jax.random.split(jax.random.key(0))
    a = jax.random.normal(k1, (n, n), jnp.float32)
    b = jax.random.normal(k2, (n, n), jnp.float32)
    f = jax.jit(lambda a, b: einsum("ij,jk->ik", a, b, precision))
    return 2 * n**3 / best_time(lambda: f(a, b).block_until_ready())


def near_capacity(d):
    p_c = float(d * d / (2 * np.log(d)))
    return jm.p_from_alpha(d, 0.9 * float(jm.theory.alpha_c(p_c)))


def train_case(d, problem, steps, precision):
    p = near_capacity(d)
    tasks = jm.make_tasks(jax.random.key(0), n=1, d=d, p=p, problem=problem, materialise_limit=0)
    cfg = jm.TrainConfig(stream=True, block=1024, precision=precision, early_stop=False, chunk=steps)
    jm.train(jm.FullRank, tasks, cfg, steps=steps - 1)  # compile (the budget is a traced bound)
    t = time.perf_counter()
    jm.train(jm.FullRank, tasks, cfg, steps=2 * steps - 1)
    t2 = time.perf_counter() - t
    t = time.perf_counter()
    run = jm.train(jm.FullRank, tasks, cfg, steps=steps - 1)
    t1 = time.perf_counter() - t
    per_step = max(t2 - t1, 1e-9) / steps
    flops = 4 * p * p * d + 4 * p * d * d
    return dict(
        d=d,
        p=p,
        problem=problem,
        precision=precision,
        seconds_per_step=per_step,
        achieved_flops=flops / per_step,
        run=run,
        tasks=tasks,
    )


def flag_changes(run, tasks):
    """(flags changed by evaluating with tf32 matmuls, reported flags against float64 numpy)."""
    changed = wrong = total = 0
    for i in range(tasks.inputs.shape[0]):
        task = jax.tree.map(lambda x: x[i], tasks)
        W = run.model.W[i]
        hi = stream_pass(task.inputs @ W.T, task, 1024, lax.Precision.HIGHEST)[2].stored
        tf = stream_pass(einsum("pe,de->pd", task.inputs, W, "tf32"), task, 1024, "tf32")[2].stored
        changed += int(jnp.sum(hi != tf))
        total += int(hi.size)
        if task.problem == "op" and task.p * task.p * task.d <= 2**28:
            E, U, W64 = (np.asarray(x, np.float64) for x in (task.inputs, task.targets, W))
            s = (E @ W64.T) @ U.T
            ref = np.diagonal(s) > np.where(np.eye(len(s), dtype=bool), -np.inf, s).max(axis=1)
            wrong += int(np.sum(ref != np.asarray(run.metrics.stored[i])))
    return changed, wrong, total


def decide_case(d):
    p = near_capacity(d)
    tasks = jm.make_tasks(jax.random.key(1), n=1, d=d, p=p)
    jm.decide(tasks, p=p, config=jm.DecideConfig(max_iter=2))  # compile
    t = time.perf_counter()
    dec = jm.decide(tasks, p=p)
    return dict(
        d=d,
        p=p,
        seconds=time.perf_counter() - t,
        status=int(dec.status[0]),
        iterations=int(dec.iterations[0]),
    )


def certified(quick: bool):
    """One certified OP capacity point per size, timed (compilation included)."""
    points = ((16, 8), (24, 8)) if quick else ((256, 64), (512, 16))
    cfg = jm.DecideConfig(decider="working-set")
    print(f"device: {jax.devices()[0].device_kind}", flush=True)
    rows = []
    for d, seeds in points:
        t = time.perf_counter()
        est = jm.capacity(d=d, problem="op", seeds=seeds, decide_config=cfg)
        wall = time.perf_counter() - t
        row = dict(est.to_json(), wall_s=wall)
        rows.append(row)
        print(
            f"certified op d={d} ({seeds} seeds, working set): alpha_c {est.alpha_c:.4f} "
            f"[{est.ci_low:.4f}, {est.ci_high:.4f}], undecided {est.undecided}, {wall:.0f} s; "
            f"theory alpha_c(p_c) {est.theory_alpha_c:.4f}",
            flush=True,
        )
    print("written " + write("gpu_certified_quick" if quick else "gpu_certified", dict(points=rows)))


def main():
    quick = "--quick" in sys.argv
    if "--certified" in sys.argv:
        return certified(quick)
    ops, dps, dec_ds, steps, n_peak = (
        ([16, 32], [16], [16], 5, 512) if quick else ([256, 512, 1024], [256], [256, 512], 10, 8192)
    )
    peaks = {pr: peak(n_peak, pr) for pr in PRECISIONS}
    print(
        f"device: {jax.devices()[0].device_kind}; matmul peak ({n_peak}^2): "
        + ", ".join(f"{pr} {peaks[pr] / 1e12:.2f} TFLOP/s" for pr in PRECISIONS),
        flush=True,
    )
    rows = []
    for problem, ds in (("op", ops), ("dp", dps)):
        for d in ds:
            for pr in PRECISIONS:
                r = train_case(d, problem, steps, pr)
                run, tasks = r.pop("run"), r.pop("tasks")
                r["fraction_of_peak"] = r["achieved_flops"] / peaks[pr]
                if pr == "tf32":
                    r["flags_changed_by_tf32_eval"], r["reported_flags_wrong"], r["flags"] = flag_changes(
                        run, tasks
                    )
                rows.append(r)
                extra = ""
                if pr == "tf32":
                    extra = (
                        f"; flags changed by a tf32 evaluation {r['flags_changed_by_tf32_eval']} of "
                        f"{r['flags']}, reported flags wrong {r['reported_flags_wrong']}"
                    )
                print(
                    f"train {problem} d={d:5d} p={r['p']:6d} {pr:>7}: "
                    f"{1e3 * r['seconds_per_step']:9.2f} ms/step, {r['achieved_flops'] / 1e12:7.2f} TFLOP/s "
                    f"({100 * r['fraction_of_peak']:.0f}% of peak){extra}",
                    flush=True,
                )
    decisions = []
    for d in dec_ds:
        r = decide_case(d)
        decisions.append(r)
        print(
            f"decide op d={d:5d} p={r['p']:6d}: {r['seconds']:.2f} s, status {r['status']}, "
            f"{r['iterations']} iterations",
            flush=True,
        )
    print(
        "written " + write("gpu_quick" if quick else "gpu", dict(peaks=peaks, train=rows, decide=decisions))
    )


if __name__ == "__main__":
    main()
