"""Predicted laws of the normalised target and best-competitor scores (docs/science.md 2.4).

Optimal memory at capacity: the scores of input `mu` are the projection of `z ~ N(0, I_p)` onto
`C_p(0)`; its target coordinate is the water level `t(z)` (or `z_1` when it already wins), the
best competitor equals `t` when pooled. Hebbian: target `x` from `_hebbian.target_samples`, best
competitor the maximum of `p-1` i.i.d. `N(0, sigma^2)` (sigma = 1 in the DP, sigma_OP in the OP).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._capacity import DEFAULT_TOP, project, top_order_stats
from ._common import default_key, float64, MARGIN, normal, P
from ._hebbian import check_point, target_samples


class ScoreLaw(eqx.Module):
    target: jax.Array  # samples
    best: jax.Array  # samples
    threshold: jax.Array  # sqrt(2 ln p)
    pooled: jax.Array | None = None  # samples: competitors at the water level (optimal memory)

    def summary(self) -> dict:
        t, b = np.asarray(self.target), np.asarray(self.best)
        return dict(
            target_mean=float(t.mean()),
            target_std=float(t.std()),
            best_mean=float(b.mean()),
            best_std=float(b.std()),
            threshold=float(self.threshold),
        )


@float64(p=P, margin=MARGIN)
def optimal_scores(p, *, margin=0.0, key=None, samples: int = 100_000, top: int = DEFAULT_TOP) -> ScoreLaw:
    """Scores of the optimal memory: the target coordinate of `proj_{C_p(margin)}(z)` (at capacity
    `margin = 0`; below it, the margin at which `alpha_c(p, margin)` is the load), the best
    competitor, and the number of competitors pooled at the water level.

    **Arguments:** `p`: associations; `margin`: the cone's margin; `key`, `samples`: of the draws;
    `top`: order statistics kept.

    **Returns:** a `ScoreLaw` of the max-margin memory's normalised scores.
    """
    k1, k2 = jax.random.split(default_key(key))
    z1 = normal(k1, (samples,))
    comps = top_order_stats(k2, p - 1, top + 1, (samples,))
    pr = project(z1, comps, margin)
    return ScoreLaw(pr.target, pr.best, jnp.sqrt(2 * jnp.log(jnp.float64(p))), pr.k)


@float64
def hebbian_scores(d: int, p: int, problem: str = "op", *, key=None, samples: int = 100_000) -> ScoreLaw:
    """Scores of the Hebbian memory at finite `(d, p)`, in units of `|W e_mu|`.

    **Arguments:** `d`, `p`: dimension and associations; `problem`: `"op"` or `"dp"`; `key`,
    `samples`: of the draws.

    **Returns:** a `ScoreLaw` of normalised target and best-competitor scores.
    """
    d, p = check_point(d, p, problem)
    k1, k2 = jax.random.split(default_key(key))
    x, sigma = target_samples(k1, d, p, samples)
    best = top_order_stats(k2, p - 1, 1, (samples,))[:, 0]
    if problem == "op":
        best = best * sigma
    return ScoreLaw(x, best, jnp.sqrt(2 * jnp.log(jnp.float64(p))))
