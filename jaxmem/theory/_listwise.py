"""Listwise (tail-average margin) retrieval, Barnfield et al. arXiv 2605.05189 (docs/science.md 2.6).

The target must beat the mean of its top `k = ceil(r (p-1))` competitors; the capacity in
`p / d^2` is `alpha_G,c(r) = 1 / E[(kappa_r - G)_+^2]` with `kappa_r = phi(Phi^{-1}(1-r)) / r`
(the mean of a standard Gaussian above its `1-r` quantile), and in closed form
`E[(k - G)_+^2] = (k^2 + 1) Phi(k) + k phi(k)`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtr, ndtri

from .._validate import check_real_if_scalar
from ._common import Domain, f64, float64


R = Domain(low=0.0, high=1.0, low_open=True)  # a tail fraction


def _pdf(x):
    return jnp.exp(-0.5 * x * x) / jnp.sqrt(2 * jnp.pi)


@jax.custom_jvp
def _kappa_r(r):
    # the upper quantile as -ndtri(r): ndtri(1 - r) loses everything once 1 - r rounds to 1
    return _pdf(-ndtri(r)) / r


@_kappa_r.defjvp
def _kappa_r_jvp(primals, tangents):
    # d kappa_r / dr = z / r - phi(z) / r^2 with z = Phi^{-1}(1 - r): -inf at r = 1, where
    # autodiff through ndtri would give inf - inf
    (r,), (dr,) = primals, tangents
    z = -ndtri(r)
    return _kappa_r(r), (z / r - _pdf(z) / (r * r)) * dr


@float64(r=R)
def kappa_r(r):
    """Mean of `G ~ N(0,1)` above its `(1-r)` quantile, `phi(z) / r` with `z = Phi^{-1}(1-r)`.

    Its derivative `z / r - phi(z) / r^2` is exact, `-inf` at `r = 1`.

    **Arguments:** `r`: the tail fraction in `(0, 1]`.

    **Returns:** `kappa_r` (float64).
    """
    return _kappa_r(f64(r))


@float64(r=R)
def listwise_alpha_c(r):
    """`alpha_G,c(r) = 1 / E[(kappa_r - G)_+^2]`, `r in (0, 1]`.

    **Arguments:** `r`: the tail fraction in `(0, 1]`.

    **Returns:** the capacity `alpha_G,c(r)` (float64).
    """
    check_real_if_scalar("r", r, low=0.0, high=1.0, low_open=True)
    return _inverse_tail_moment(kappa_r(r))


def _tail_moment(k):
    return (k * k + 1) * ndtr(k) + k * _pdf(k)


@jax.custom_jvp
def _inverse_tail_moment(k):
    return 1.0 / _tail_moment(k)


@_inverse_tail_moment.defjvp
def _inverse_tail_moment_jvp(primals, tangents):
    # E'(k) = 2 (k Phi(k) + phi(k)), in one product with dk: at r = 1 (k = 0, dk = -inf) the
    # derivative is +inf, where autodiff of k * k would form 0 * inf
    (k,), (dk,) = primals, tangents
    E = _tail_moment(k)
    return 1.0 / E, -2.0 * (k * ndtr(k) + _pdf(k)) / (E * E) * dk
