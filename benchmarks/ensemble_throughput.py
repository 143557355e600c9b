"""(a) Ensemble throughput: 64 OP instances, d = 32, alpha = 0.6, 500 Adam steps (full budget,
no early stop). jaxmem vmapped vs a loop of single jitted jaxmem runs vs a plain PyTorch eager
loop of the same algorithm (skipped if torch is absent). Ratios from one run.

    python benchmarks/ensemble_throughput.py
"""

import time

import jax

import jaxmem as jm
from _common import write

N, D, ALPHA, STEPS = 64, 32, 0.6, 500


def torch_loop(tasks, lr):
    import numpy as np
    import torch

    torch.set_num_threads(jax.local_device_count() and __import__("os").cpu_count())
    E_all, U_all = np.asarray(tasks.inputs), np.asarray(tasks.targets)
    t = time.perf_counter()
    for i in range(E_all.shape[0]):
        E, U = torch.from_numpy(E_all[i]), torch.from_numpy(U_all[i])
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
    try:
        t_torch = torch_loop(tasks, float(run.lr[0]))
    except ImportError:
        t_torch = None
    res = dict(n=N, d=D, p=p, alpha=jm.load(D, p), steps=STEPS, vmapped_s=t_vmap, loop_jitted_s=t_loop,
               torch_eager_s=t_torch, speedup_vs_loop=t_loop / t_vmap,
               speedup_vs_torch=None if t_torch is None else t_torch / t_vmap,
               fraction_all_stored=float(run.all_stored.mean()))
    print(f"{N} OP instances, d={D}, p={p}, {STEPS} Adam steps")
    print(f"{'jaxmem vmapped':>24}: {t_vmap:8.2f} s")
    print(f"{'loop of single jitted':>24}: {t_loop:8.2f} s   ({res['speedup_vs_loop']:.1f}x slower)")
    if t_torch is not None:
        print(f"{'PyTorch eager loop':>24}: {t_torch:8.2f} s   ({res['speedup_vs_torch']:.1f}x slower)")
    print(f"written {write('ensemble_throughput', res)}")


if __name__ == "__main__":
    main()
