"""DP candidate generation rate (normals/s) by PRNG implementation: the DP streaming loss is
bound by it. Generates one `(rows, block, d)` candidate block as the streaming kernel does.

    python benchmarks/rng.py
"""

import jax
import jax.numpy as jnp
import jaxmem as jm
from _common import best_time, write


ROWS, BLOCK, D, P = 256, 256, 128, 4096


def rate(impl):
    task = jm.make_task(jax.random.key(0, impl=impl), d=D, p=P, problem="dp", materialise_limit=0)
    rows = jnp.arange(ROWS)[:, None]
    f = jax.jit(lambda t, b: jm.dp_candidates(t, rows, b * BLOCK + jnp.arange(BLOCK)[None, :]).sum())
    t = best_time(lambda: f(task, 1).block_until_ready(), repeats=3)
    plain = jax.jit(lambda k: jax.random.normal(k, (ROWS * BLOCK, D)).sum())
    k = jax.random.key(1, impl=impl)
    t_plain = best_time(lambda: plain(k).block_until_ready(), repeats=3)
    n = ROWS * BLOCK * D
    return dict(impl=impl, candidates_per_s=n / t, plain_normals_per_s=n / t_plain)


def main():
    rows = [rate(impl) for impl in ("threefry2x32", "rbg", "unsafe_rbg")]
    for r in rows:
        print(
            f"{r['impl']:>13}: DP candidates {r['candidates_per_s'] / 1e6:6.1f} M normals/s, "
            f"one jax.random.normal call {r['plain_normals_per_s'] / 1e6:6.1f} M/s"
        )
    print(f"written {write('rng', dict(rows=rows, rows_block_d=[ROWS, BLOCK, D]))}")


if __name__ == "__main__":
    main()
