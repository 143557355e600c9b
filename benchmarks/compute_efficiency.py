"""(b) Achieved FLOP/s of the training step at d = 128 near capacity against this machine's
measured float32 matmul peak, in one run. FLOPs counted: forward `V = E W^T` (2 p d^2) and
scores `V U^T` (2 p^2 d), backward `dV = G U` (2 p^2 d) and `dW = dV^T E` (2 p d^2).

    python benchmarks/compute_efficiency.py
"""

import time

import jax
import jaxmem as jm
from _common import matmul_peak, write


D, ALPHA, N, STEPS = 128, 0.85, 4, 50


def main():
    p = jm.p_from_alpha(D, ALPHA)
    tasks = jm.make_tasks(jax.random.key(0), n=N, d=D, p=p)

    def timed(steps):  # best of 3 after a compile; chunk fixed so both budgets share it
        kw = dict(steps=steps, chunk=STEPS, progress=False, early_stop=False)
        jm.train(jm.FullRank, tasks, **kw)
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            jm.train(jm.FullRank, tasks, **kw)
            best = min(best, time.perf_counter() - t)
        return best

    # The difference of a 2-chunk and a 1-chunk run is the time of STEPS training steps alone
    # (no compilation, initialisation or final metrics).
    t1, t2 = timed(STEPS - 1), timed(2 * STEPS - 1)
    elapsed = t2 - t1
    flops = N * STEPS * (4 * p * p * D + 4 * p * D * D)
    achieved = flops / elapsed
    peak = matmul_peak(2048)
    peak_shape = matmul_peak(1024)
    res = dict(
        d=D,
        p=p,
        alpha=jm.alpha_of(D, p),
        n=N,
        steps=STEPS,
        seconds=elapsed,
        run_1chunk_s=t1,
        run_2chunk_s=t2,
        flops=flops,
        achieved_flops=achieved,
        matmul_peak_2048=peak,
        matmul_peak_1024=peak_shape,
        fraction_of_peak=achieved / peak,
    )
    print(
        f"training step d={D}, p={p}: {N} instances x {STEPS} steps in {elapsed:.2f} s "
        f"({1e3 * elapsed / (N * STEPS):.2f} ms per instance-step; runs of {t1:.2f} and {t2:.2f} s)"
    )
    print(
        f"achieved {achieved / 1e9:.1f} GFLOP/s; measured float32 matmul peak {peak / 1e9:.1f} GFLOP/s "
        f"(2048^2), "
        f"{peak_shape / 1e9:.1f} (1024^2): {100 * achieved / peak:.0f}% of peak"
    )
    print(f"written {write('compute_efficiency', res)}")


if __name__ == "__main__":
    main()
