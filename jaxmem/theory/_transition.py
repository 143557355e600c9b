"""The whole storage transition at finite `d` (docs/science.md 2.8, the kinematic formula).

Feasibility of the Gaussian surrogate is a conic kinematic question: `p` independent cones
`C_p` (one per input, in `R^p`) must meet a random subspace of dimension `D = d^2 F(kappa)` (the
squared Gaussian width of the rank-`kappa d` memories, `d^2` at full rank). The statistical
dimension of the product cone's polar is `p mu_p`, `mu_p = E dist(z, C_p)^2`, with intrinsic-volume
variance `p (v_p - 2 mu_p)`, `v_p = Var dist(z, C_p)^2`; in the normal approximation

    P(all stored | d, p) ~ Phi( (D - p mu_p) / sqrt(p (v_p - 2 mu_p)) ).

`mu_p` and `v_p` come from raw samples `(z_1, top competitor order statistics)`, whose cost does
not grow with `p`; the same frozen samples serve every `p` (common random numbers), so the curve
is smooth in `p` and its loads are found by bisection in `ln p`.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.scipy.special import ndtr, ndtri

from .._validate import check_int, check_real_if_scalar
from ._capacity import order_stats_needed, project, top_order_stats
from ._common import default_key, Domain, f64, float64, KAPPA, normal, P
from ._spectra import F


BLOCK = 8192
DEFAULT_BLOCKS = 4  # 32768 raw samples


def _dist2_moments(key, p, blocks: int, top: int):
    """`(mu, mu_se, v, v_se)` of `dist(z, C_p)^2` over `blocks * BLOCK` raw samples."""

    def body(i, acc):
        k1, k2 = jax.random.split(jax.random.fold_in(key, i))
        z1 = normal(k1, (BLOCK,))
        comps = top_order_stats(k2, p - 1.0, top + 1, (BLOCK,))
        d2 = project(z1, comps).dist2
        return acc + jnp.stack([d2.sum(), (d2**2).sum(), (d2**3).sum(), (d2**4).sum()])

    n = blocks * BLOCK
    m1, m2, m3, m4 = jax.lax.fori_loop(0, blocks, body, jnp.zeros(4, jnp.float64)) / n
    var = m2 - m1**2
    # standard errors: of the mean, and of the variance (fourth central moment)
    c4 = m4 - 4 * m3 * m1 + 6 * m2 * m1**2 - 3 * m1**4
    return m1, jnp.sqrt(var / n), var, jnp.sqrt(jnp.maximum(c4 - var**2, 0.0) / n)


class Transition(eqx.Module):
    """The predicted `P(all stored)` at `(d, p, kappa)`, with its Monte Carlo standard error,
    and the statistics it is made of."""

    probability: jax.Array
    probability_se: jax.Array
    mu: jax.Array
    v: jax.Array


def _prob(D, p, mu, v):
    return ndtr((D - p * mu) / jnp.sqrt(p * (v - 2 * mu)))


@float64(d=Domain(low=1.0), p=P, kappa=KAPPA)
def transition(d, p, kappa=1.0, *, key=None, samples: int = DEFAULT_BLOCKS * BLOCK, top: int | None = None):
    """`P(all stored | d, p)` of the Gaussian surrogate in the normal approximation of the
    kinematic formula (docs/science.md 2.8), for a memory of rank `kappa d`.

    **Arguments:** `d`: the dimension; `p`: associations (real, `>= 2`); `kappa`: the rank
    fraction; `key`, `samples`: of the raw `dist^2` samples; `top`: order statistics drawn.

    **Returns:** a `Transition` (`probability`, `probability_se`, `mu`, `v`).
    """
    check_real_if_scalar("d", d, low=1.0)
    check_real_if_scalar("p", p, low=2.0)
    check_real_if_scalar("kappa", kappa, low=0.0, high=1.0, low_open=True)
    blocks = -(-check_int("samples", samples, 2) // BLOCK)
    mu, mu_se, v, v_se = _dist2_moments(default_key(key), f64(p), blocks, order_stats_needed(p, top))
    D = f64(d) ** 2 * F(f64(kappa))
    P = _prob(D, f64(p), mu, v)
    # delta method over the two sampled statistics (treated as independent)
    gm = jax.grad(lambda m: _prob(D, f64(p), m, v))(mu)
    gv = jax.grad(lambda s: _prob(D, f64(p), mu, s))(v)
    return Transition(P, jnp.sqrt((gm * mu_se) ** 2 + (gv * v_se) ** 2), mu, v)


class TransitionLoads(eqx.Module):
    """The loads `alpha = p ln p / d^2` at which the predicted `P(all stored)` is 0.75, 0.5 and
    0.25, the `p` at 0.5, and their Monte Carlo standard errors."""

    p_50: jax.Array
    p_50_se: jax.Array
    alpha_50: jax.Array
    alpha_50_se: jax.Array
    alpha_p75: jax.Array
    alpha_p75_se: jax.Array
    alpha_p25: jax.Array
    alpha_p25_se: jax.Array


def _load_map(D, z, mu, v):
    """`p` solving `D - p mu - z sqrt(p (v - 2 mu)) = 0` at fixed `mu, v` (a quadratic in `sqrt p`)."""
    s = jnp.sqrt(v - 2 * mu)
    root = (-z * s + jnp.sqrt(z**2 * s**2 + 4 * mu * D)) / (2 * mu)
    return root**2


def _load_at(D, P, moments, iters: int = 16):
    """The `p` at which the predicted `P(all stored)` is `P`, and its standard error.

    The fixed point `p = G(p) = _load_map(D, z, mu_p, v_p)` (`z = ndtri(P)`) converges fast:
    `mu_p` and `v_p` grow only like `ln p`. Its error: `dp = G_theta dtheta / (1 - G_p)` for
    each sampled statistic `theta` (independent), `G_p` by a central difference in `ln p` on the
    same samples."""
    z = ndtri(P)

    def G(p):
        mu, _, v, _ = moments(p)
        return _load_map(D, z, mu, v)

    p = jax.lax.fori_loop(0, iters, lambda i, p: G(p), D / (2 * jnp.log(D) + 1.0))
    mu, mu_se, v, v_se = moments(p)
    h = 1e-3
    G_p = (G(p * jnp.exp(h)) - G(p * jnp.exp(-h))) / (2 * h) / p
    g_mu = jax.grad(lambda m: _load_map(D, z, m, v))(mu)
    g_v = jax.grad(lambda s: _load_map(D, z, mu, s))(v)
    return p, jnp.sqrt((g_mu * mu_se) ** 2 + (g_v * v_se) ** 2) / jnp.abs(1 - G_p)


@float64(d=Domain(low=1.0), kappa=KAPPA)
def transition_loads(d, kappa=1.0, *, key=None, samples: int = DEFAULT_BLOCKS * BLOCK) -> TransitionLoads:
    """The predicted transition at dimension `d` (rank `kappa d`): its centre `p_50` (Gardner's
    formula at finite `p`, `d^2 F(kappa) = p mu_p`) and the loads at `P(all stored)` = 0.75, 0.5,
    0.25, with standard errors (delta method on the sampled `mu_p` and `v_p`).

    **Arguments:** `d`: the dimension; `kappa`: the rank fraction; `key`, `samples`: of the raw
    `dist^2` samples (the same for every `p`).

    **Returns:** a `TransitionLoads`.
    """
    check_real_if_scalar("d", d, low=1.0)
    check_real_if_scalar("kappa", kappa, low=0.0, high=1.0, low_open=True)
    blocks = -(-check_int("samples", samples, 2) // BLOCK)
    key = default_key(key)
    return _loads(f64(d), f64(kappa), key, blocks)


@functools.partial(jax.jit, static_argnums=(3,))
def _loads(d, kappa, key, blocks: int):
    D = d**2 * F(kappa)
    moments = lambda p: _dist2_moments(key, p, blocks, 128)
    out = {}
    for name, level in (("p75", 0.75), ("50", 0.5), ("p25", 0.25)):
        p, p_se = _load_at(D, level, moments)
        a = p * jnp.log(p) / d**2
        out[name] = (p, p_se, a, a * (1 + 1 / jnp.log(p)) * p_se / p)
    return TransitionLoads(*out["50"], *out["p75"][2:], *out["p25"][2:])
