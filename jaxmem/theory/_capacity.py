"""Gardner capacity of the decoupled problem (docs/science.md 2.1, 2.2).

`alpha_c(p, kappa, m) = ln(p) F(kappa) / E_z[dist(z, C_p(m))^2]`, `z ~ N(0, I_p)`, where
`C_p(m) = {h : h_1 >= h_rho + m for all rho != 1}`. The projection pools the target with the
largest competitors, so only the top `K` competitor order statistics enter: they are sampled
directly (Renyi's representation of uniform order statistics, through the Gaussian upper tail),
which makes the cost independent of `p`, and differentiable in `p`.
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.scipy.special import ndtr, ndtri

from .._validate import check_positive, check_real_if_scalar
from ._common import default_key, Domain, exponential, f64, float64, KAPPA, MARGIN
from ._spectra import F


DEFAULT_SE = 0.0015
DEFAULT_TOP = 128
# The largest finite `p`: beyond about 1e305 the competitors' upper-tail quantiles underflow
# (`jaxmem theory capacity --p 1e306` is NaN, 1e300 is 0.5075).
P_LIMIT = 1e300
_BLOCK = 8192


@float64(n=Domain(low=1.0), k=Domain(low=1, integer=True))
def top_order_stats(key, n, k: int, shape=()):
    """The `k` largest of `n` i.i.d. `N(0, 1)`, in decreasing order (shape `shape + (k,)`).

    `-ln U_(n-j+1) = sum_{i<=j} E_i / (n - i + 1)`, `E_i ~ Exp(1)`; entries `j >= n` are `-inf`.
    `n` may be a float (and traced), so the law is differentiable in `n`.

    **Arguments:** `key`: of the draws; `n`: the number of competitors; `k`: how many of the largest
    to return; `shape`: the batch shape.

    **Returns:** `shape + (k,)` decreasing order statistics of `n` standard normals.
    """
    n = f64(n)
    j = jnp.arange(k, dtype=jnp.float64)
    e = exponential(key, shape + (k,))
    log_u = -jnp.cumsum(e / jnp.maximum(n - j, 1.0), axis=-1)
    tail = -jnp.expm1(log_u)  # 1 - U, accurate when tiny
    z = -ndtri(tail)
    return jnp.where(j < n, z, -jnp.inf)


class Projection(eqx.Module):
    """Projection of `(z_1, competitors)` onto `C_p(margin)`: the water level `t` shared by the
    target and the `k` pooled competitors, the squared distance, and whether `K` sufficed."""

    target: jax.Array  # target coordinate of the projection
    best: jax.Array  # largest competitor coordinate of the projection
    k: jax.Array
    dist2: jax.Array
    complete: jax.Array


@float64(margin=MARGIN)
def project(z1, top, margin=0.0) -> Projection:
    """Project onto `C_p(margin)` given the target field `z1` and the competitors' top order
    statistics `top` (decreasing, last axis; one more than can be pooled, or `-inf` padding).

    Competitors are shifted by `margin` (then the cone is `C_p(0)`); with sorted shifted values
    `y_(j)`, `k` is the first with `t_k = (z1 + sum_{j<=k} y_(j)) / (1 + k) >= y_(k+1)`.

    **Arguments:** `z1`: the target field; `top`: the decreasing competitor order statistics;
    `margin`: the shift.

    **Returns:** a `Projection` (water level, best competitor, pooled count, `dist2`, completeness).
    """
    z1, top, margin = f64(z1), f64(top), f64(margin)
    y = top + margin
    K = y.shape[-1] - 1
    csum = jnp.cumsum(y[..., :K], axis=-1)
    ks = jnp.arange(K + 1, dtype=jnp.float64)
    S = jnp.concatenate([jnp.zeros_like(csum[..., :1]), csum], axis=-1)
    t = (z1[..., None] + S) / (1 + ks)
    ok = t >= y[..., : K + 1]
    complete = ok.any(axis=-1)
    # the first True (0 if none), counted in int32: `argmax` would be int64 inside the float64
    # context and fail to lower in a `jit` traced with x64 off
    k = jnp.where(complete, jnp.sum(jnp.cumprod((~ok).astype(jnp.int32), axis=-1), axis=-1), 0)
    tk = jnp.take_along_axis(t, k[..., None], axis=-1)[..., 0]
    pooled = jnp.arange(K + 1) < k[..., None]
    yy = jnp.where(jnp.isfinite(y[..., : K + 1]), y[..., : K + 1], 0.0)
    dist2 = (z1 - tk) ** 2 + jnp.sum(jnp.where(pooled, (yy - tk[..., None]) ** 2, 0.0), axis=-1)
    best_raw = jnp.where(k > 0, tk, y[..., 0])
    return Projection(tk, best_raw - margin, k, dist2, complete)


def _check_p(p):
    check_real_if_scalar("p", p, low=2.0, finite=False)


def _check_kappa(kappa):
    check_real_if_scalar("kappa", kappa, low=0.0, high=1.0, low_open=True)


def _check_margin(margin):
    check_real_if_scalar("margin", margin, low=0.0)


@float64(margin=MARGIN)
def dist2_given_competitors(top, margin=0.0):
    """`E_{z_1 ~ N(0,1)} dist^2` for fixed competitors, in closed form (Rao-Blackwellised).

    `k` pooled competitors exactly when `b_k <= z_1 < b_{k-1}`, `b_k = (1+k) y_(k+1) - S_k`
    (decreasing in `k`), and there `dist^2 = z_1^2 + Q_k - (z_1 + S_k)^2 / (1+k)` with
    `S_k, Q_k` the sum and sum of squares of the `k` largest shifted competitors; the Gaussian
    partial moments of each interval give the expectation. Also returns the mass `P(z_1 < b_K)`
    that would need more than the `K` sampled statistics.

    **Arguments:** `top`: the decreasing top competitor order statistics (last axis; `-inf`
    padding); `margin`: the shift.

    **Returns:** `(E dist^2, mass beyond the statistics)`.
    """
    y = f64(top) + f64(margin)
    K = y.shape[-1] - 1
    yf = jnp.where(jnp.isfinite(y), y, 0.0)
    zeros = jnp.zeros_like(y[..., :1])
    S = jnp.concatenate([zeros, jnp.cumsum(yf[..., :K], axis=-1)], axis=-1)
    Q = jnp.concatenate([zeros, jnp.cumsum(yf[..., :K] ** 2, axis=-1)], axis=-1)
    n = jnp.arange(K + 1, dtype=jnp.float64) + 1.0
    b = jnp.where(jnp.isfinite(y), n * yf - S, -jnp.inf)  # b_k, k = 0..K
    # Gaussian partial moments on [b_k, b_{k-1}), b_{-1} = inf: evaluate at each b once, shift.
    fin = jnp.isfinite(b)
    bf = jnp.where(fin, b, 0.0)
    cdf = jnp.where(fin, ndtr(bf), 0.0)
    pdf = jnp.where(fin, jnp.exp(-0.5 * bf * bf) / jnp.sqrt(2 * jnp.pi), 0.0)
    xpdf = bf * pdf
    shift = lambda x, top: jnp.concatenate([jnp.full_like(x[..., :1], top), x[..., :K]], axis=-1)
    m0 = shift(cdf, 1.0) - cdf
    m1 = pdf - shift(pdf, 0.0)
    m2 = m0 + xpdf - shift(xpdf, 0.0)
    c2 = 1.0 - 1.0 / n
    c1 = -2.0 * S / n
    c0 = Q - S**2 / n
    e = jnp.sum(c2 * m2 + c1 * m1 + c0 * m0, axis=-1)
    return e, ndtr(b[..., K])


@float64(p=Domain(low=2.0, high=P_LIMIT), margin=MARGIN)
def e_dist2(p, margin=0.0, *, key=None, samples: int = 65_536, top: int | None = None):
    """`E_z dist(z, C_p(margin))^2` from `samples` competitor draws (rounded up to blocks of
    8192), and its standard error; cost independent of `p`.

    Competitors: `top + 1` sampled order statistics; the target field is integrated exactly.
    Returns `(mean, se, incomplete)`, `incomplete` the neglected probability mass.

    **Arguments:** `p`: associations; `margin`: the shift; `key`: of the samples; `samples`: how
    many; `top`: order statistics kept.

    **Returns:** `(mean, standard error, incomplete mass)` of `dist^2`.
    """
    _check_p(p)
    _check_margin(margin)
    nb = -(-samples // _BLOCK)
    return _e_dist2(
        default_key(key), f64(p), f64(margin), f64(1.0), f64(0.0), order_stats_needed(p, top), nb, nb
    )


def order_stats_needed(p, top):
    """Order statistics to sample: the projection pools about 2 ln p competitors, so 128
    suffice up to p ~ 1e12 (neglected mass < 1e-17); a concrete larger p gets 4.5 ln p, and a
    concrete p <= 17 needs only 16 (two sizes share all compilations)."""
    if top is not None:
        return int(top)
    if isinstance(p, (int, float)):
        if p > 1e12:
            return max(DEFAULT_TOP, math.ceil(4.5 * math.log(p)))
        return 16 if p <= 17 else DEFAULT_TOP
    return DEFAULT_TOP


@functools.partial(jax.jit, static_argnums=(5, 6, 7))
def _e_dist2(key, p, margin, scale, se_target, top, min_blocks, max_blocks):
    """Blocks of _BLOCK samples until the standard error of `scale / E` falls below
    `se_target` (at least `min_blocks`, at most `max_blocks`); memory stays one block."""

    def block(i):
        comps = top_order_stats(jax.random.fold_in(key, i), p - 1, top + 1, (_BLOCK,))
        e, inc = dist2_given_competitors(comps, margin)
        return e.sum(), (e * e).sum(), inc.sum()

    def stats(c):
        i, s1, s2, si = c
        n = i * _BLOCK
        mean = s1 / n
        se = jnp.sqrt(jnp.maximum(s2 / n - mean**2, 0.0) / (n - 1))
        return mean, se, si / n

    def cond(c):
        mean, se, _ = stats(c)
        return (c[0] < min_blocks) | ((c[0] < max_blocks) & (scale * se / mean**2 > se_target))

    def body(c):
        b = block(c[0])
        return (c[0] + 1, c[1] + b[0], c[2] + b[1], c[3] + b[2])

    z = jnp.zeros((), jnp.float64)
    return stats(jax.lax.while_loop(cond, body, (jnp.array(0, jnp.int32), z, z, z)))


class Capacity(eqx.Module):
    """`alpha_c` with its Monte Carlo standard error, `E dist^2` and its error, the
    probability mass neglected by sampling only the top order statistics (should be ~0), and
    `se_reached`: whether `alpha_c_se` reached the `se_target` asked for (false when the sample
    cap came first)."""

    alpha_c: jax.Array
    alpha_c_se: jax.Array
    e_dist2: jax.Array
    e_dist2_se: jax.Array
    incomplete: jax.Array
    se_reached: jax.Array


@float64(p=Domain(low=2.0, high=P_LIMIT, inf=True), kappa=KAPPA, margin=MARGIN)
def capacity(
    p,
    kappa=1.0,
    margin=0.0,
    *,
    key=None,
    se_target: float = DEFAULT_SE,
    max_samples: int = 2**21,
    top: int | None = None,
) -> Capacity:
    """`alpha_c(p, kappa) = ln(p) F(kappa) / E dist^2` (in the load `p ln p / d^2`), with errors.

    Samples competitor order statistics in blocks until the standard error of `alpha_c` is
    below `se_target` (or `max_samples` are used). `p = inf` gives the asymptote `F(kappa)/2`.

    **Arguments:** `p`: associations (`>= 2`, or `inf`); `kappa`: the rank fraction; `margin`: the
    normalised margin; `key`: of the order-statistic samples; `se_target`: the standard error to
    reach on `alpha_c`; `max_samples`: the sample cap; `top`: order statistics kept per sample.

    **Returns:** a `Capacity` (`alpha_c`, `alpha_c_se`, `e_dist2`, ...).
    """
    _check_p(p)
    _check_kappa(kappa)
    _check_margin(margin)
    if isinstance(se_target, (int, float)):
        check_positive("se_target", se_target)
    if isinstance(p, (int, float)) and math.isinf(p):
        z = jnp.zeros(())
        return Capacity(F(f64(kappa)) / 2, z, jnp.inf * jnp.ones(()), z, z, jnp.asarray(True))
    return _capacity(
        default_key(key),
        f64(p),
        f64(kappa),
        f64(margin),
        f64(se_target),
        order_stats_needed(p, top),
        -(-max_samples // _BLOCK),
    )


@functools.partial(jax.jit, static_argnums=(5, 6))
def _capacity(key, p, kappa, margin, se_target, top, max_blocks):
    scale = jnp.log(p) * F(kappa)
    mean, se, inc = _e_dist2(key, p, margin, scale, se_target, top, 1, max_blocks)
    # the top order statistics must hold the pooled competitors (a traced p beyond ~1e12 gets
    # only DEFAULT_TOP): otherwise NaN, never a number that looks right
    p_max = max(1e12, math.exp(top / 4.5))  # what `top` order statistics cover (see `order_stats_needed`)
    ok = (inc < 1e-12) & jnp.isfinite(mean) & (mean > 0) & (p <= p_max)
    a = jnp.where(ok, scale / mean, jnp.nan)
    nan = lambda x: jnp.where(ok, x, jnp.nan)
    a_se = nan(a * se / mean)
    return Capacity(a, a_se, nan(mean), nan(se), inc, a_se <= se_target)


def alpha_c(p, kappa=1.0, margin=0.0, **kwargs):
    """Capacity in the load `p ln p / d^2` (float64, differentiable in `p` and `kappa`).

    **Arguments:** `p`: associations (`>= 2`, or `inf`); `kappa`: the rank fraction; `margin`: the
    required normalised margin; `**kwargs`: as `capacity`.

    **Returns:** `alpha_c(p, kappa)` (float64).
    """
    return capacity(p, kappa, margin, **kwargs).alpha_c


@float64(kappa=KAPPA)
def alpha_c_asymptotic(kappa=1.0):
    """`lim_{p -> inf} alpha_c(p, kappa) = F(kappa) / 2` (1/2 at full rank).

    **Arguments:** `kappa`: the rank fraction.

    **Returns:** `F(kappa) / 2`.
    """
    _check_kappa(kappa)
    return F(f64(kappa)) / 2
