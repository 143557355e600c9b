"""Ensemble throughput: 64 OP instances, d = 32, alpha = 0.6, 500 Adam steps (full budget,
no early stop). jaxmem vmapped against three loops over instances: single-instance `jaxmem.train`
(jitted chunks), a jitted Adam step called once per step, and a plain PyTorch eager loop of the
same algorithm (skipped if torch is absent). Also the achieved FLOP/s of the vmapped run against
this machine's measured float32 matmul peak (FLOPs per step and instance: `4 p d^2 + 4 p^2 d`,
the score matmuls forward and backward), and the loss evaluations against the floor (one per
step and instance, plus the first). Ratios from one run.

    python benchmarks/run.py throughput
"""

import os
import time

import jax
import jaxmem as jm
from _common import matmul_peak, write


N, D, ALPHA, STEPS = 64, 32, 0.6, 500


def torch_loop(tasks, lr):
    import numpy as np
    import torch

    torch.set_num_threads(os.cpu_count())
    E_all, U_all = np.asarray(tasks.inputs), np.asarray(tasks.targets)
    t = time.perf_counter()
    for i in range(E_all.shape[0]):
        E, U = torch.tensor(E_all[i]), torch.tensor(U_all[i])
        p, d = E.shape
        W = torch.nn.Parameter(1e-3 / d**0.5 * torch.randn(d, d))
        opt = torch.optim.Adam([W], lr=lr)
        labels = torch.arange(p)
        for _ in range(STEPS):
            opt.zero_grad()
            S = (E @ W.T) @ U.T
            loss = torch.nn.functional.cross_entropy(S, labels)
            loss.backward()
            opt.step()
    return time.perf_counter() - t


def stepwise_loop(tasks, lr):
    """The plain JAX way: one jitted Adam step per call, a Python loop over steps and instances."""
    import optax

    opt = optax.adam(lr)

    @jax.jit
    def step(params, st, task):
        g = jax.grad(lambda pr: jm.dense_ce(pr.project(task.inputs), task)[0])(params)
        u, st = opt.update(g, st, params)
        return optax.apply_updates(params, u), st

    def run(i):
        task = jax.tree.map(lambda x: x[i], tasks)
        params = jm.FullRank.init(task.init_key, D)
        st = opt.init(params)
        for _ in range(STEPS):
            params, st = step(params, st, task)
        return jax.block_until_ready(params)

    run(0)
    t = time.perf_counter()
    for i in range(tasks.inputs.shape[0]):
        run(i)
    return time.perf_counter() - t


def kernel_profile(tasks):
    """Per-step cost of the ensemble's main kernels, on the same arrays (ms per step)."""
    import jax.numpy as jnp
    from _common import best_time

    E, U = tasks.inputs, tasks.targets
    W = jnp.zeros((E.shape[0], D, D), E.dtype)
    scores = jax.jit(lambda W: jnp.einsum("npd,nqd->npq", jnp.einsum("npd,nkd->npk", E, W), U))
    S = scores(W)
    ex = jax.jit(jnp.exp)
    return dict(
        score_matmuls_ms=1e3 * best_time(lambda: scores(W).block_until_ready(), repeats=20),
        exp_ms=1e3 * best_time(lambda: ex(S).block_until_ready(), repeats=20),
    )


def main():
    p = jm.p_from_alpha(D, ALPHA)
    tasks = jm.make_tasks(jax.random.key(0), n=N, d=D, p=p)
    kw = dict(steps=STEPS, chunk=100, progress=False, early_stop=False)
    jm.train(jm.FullRank, tasks, **kw)  # compile
    t = time.perf_counter()
    run = jm.train(jm.FullRank, tasks, **kw)
    t_vmap = time.perf_counter() - t
    singles = [jax.tree.map(lambda x: x[i : i + 1], tasks) for i in range(N)]
    jm.train(jm.FullRank, singles[0], **kw)  # compile
    t = time.perf_counter()
    for s in singles:
        jm.train(jm.FullRank, s, **kw)
    t_loop = time.perf_counter() - t
    t_step = stepwise_loop(tasks, float(run.lr[0]))
    try:
        t_torch = torch_loop(tasks, float(run.lr[0]))
    except ImportError:
        t_torch = None
    prof = kernel_profile(tasks)
    peak = matmul_peak(2048)
    flops = N * STEPS * (4 * p * D * D + 4 * p * p * D)
    evaluations = int(run.computed_steps)  # loss evaluations done, over all instances
    res = dict(
        n=N,
        d=D,
        p=p,
        vmapped_ms_per_step=1e3 * t_vmap / STEPS,
        **prof,
        alpha=jm.alpha_of(D, p),
        steps=STEPS,
        vmapped_s=t_vmap,
        loop_jitted_s=t_loop,
        loop_jitted_step_s=t_step,
        speedup_vs_stepwise=t_step / t_vmap,
        torch_eager_s=t_torch,
        speedup_vs_loop=t_loop / t_vmap,
        speedup_vs_torch=None if t_torch is None else t_torch / t_vmap,
        fraction_all_stored=float(run.all_stored.mean()),
        matmul_peak=peak,
        achieved_flops=flops / t_vmap,
        fraction_of_peak=flops / t_vmap / peak,
        evaluations=evaluations,
        evaluations_floor=N * (STEPS + 1),
    )
    print(f"{N} OP instances, d={D}, p={p}, {STEPS} Adam steps")
    print(f"{'jaxmem vmapped':>24}: {t_vmap:8.2f} s")
    print(f"{'loop of jaxmem.train n=1':>24}: {t_loop:8.2f} s   ({res['speedup_vs_loop']:.1f}x slower)")
    print(f"{'loop of jitted steps':>24}: {t_step:8.2f} s   ({res['speedup_vs_stepwise']:.1f}x slower)")
    if t_torch is not None:
        print(f"{'PyTorch eager loop':>24}: {t_torch:8.2f} s   ({res['speedup_vs_torch']:.1f}x slower)")
    print(
        f"profile: vmapped step {res['vmapped_ms_per_step']:.2f} ms; of which forward score matmuls "
        f"{prof['score_matmuls_ms']:.2f} ms, one exp over the scores {prof['exp_ms']:.2f} ms"
    )
    print(
        f"achieved {flops / t_vmap / 1e9:.1f} GFLOP/s of a measured {peak / 1e9:.1f} GFLOP/s matmul peak "
        f"({res['fraction_of_peak']:.2f}); loss evaluations {evaluations} against the floor {N * (STEPS + 1)}"
    )
    print(f"written {write('throughput', res)}")


if __name__ == "__main__":
    main()
