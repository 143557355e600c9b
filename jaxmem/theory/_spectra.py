"""Quarter-circle law and its truncation to the top `kappa` fraction (docs/science.md 2.2, 2.3).

`rho_qc(s) = sqrt(4 - s^2) / pi` on [0, 2]. With `s = 2 cos(phi)` the mass above `s` is
`(2 phi - sin 2phi) / pi` and the second moment above `s` is `(2 phi - sin(4 phi)/2) / pi`, so the
rank-`m = kappa d` memory keeps `F(kappa) = int_{s_kappa}^2 s^2 rho_qc(s) ds` of the Gaussian width.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optimistix as optx

from .._validate import rank_of
from ._common import Domain, f64, float64, KAPPA, normal, uniform


def _mass_above(phi):
    return (2 * phi - jnp.sin(2 * phi)) / jnp.pi


@jax.custom_jvp
def _phi_root(kappa):
    """The root `phi` of `mass_above(phi) = kappa` for `kappa` in `(0, 1]`, by bisection. Its
    derivative is the implicit function theorem's in closed form, `d phi / d kappa =
    1 / mass_above'(phi) = pi / (4 sin^2 phi)`: a custom JVP, since the root finder's own
    implicit differentiation fails inside a float64 context under an outer `jit` with x64 off."""
    sol = optx.root_find(
        lambda phi, k: _mass_above(phi) - k,
        optx.Bisection(rtol=1e-15, atol=1e-15),
        jnp.pi / 4 * jnp.ones_like(kappa),
        kappa,
        options=dict(lower=0.0, upper=jnp.pi / 2),
        max_steps=200,
        throw=False,
    )
    return sol.value


@_phi_root.defjvp
def _phi_root_jvp(primals, tangents):
    phi = _phi_root(primals[0])
    return phi, tangents[0] * jnp.pi / (4 * jnp.sin(phi) ** 2)


@jax.jit
def _phi(kappa):
    """`phi` in [0, pi/2] with mass `kappa` above `2 cos(phi)` (`_phi_root`). NaN for a (traced)
    `kappa` outside `[0, 1]`: never a plausible number. Jitted: run op by op, every call would
    compile its loop anew."""
    valid = (kappa > 0) & (kappa <= 1)
    phi = _phi_root(jnp.where(valid, kappa, 0.5))
    return jnp.where(valid, phi, jnp.where(kappa == 0, 0.0, jnp.nan))


@float64
def qc_density(s):
    """Quarter-circle density `sqrt(4 - s^2)/pi` on [0, 2], zero elsewhere.

    **Arguments:** `s`: singular values / sqrt(d).

    **Returns:** the density (float64).
    """
    s = f64(s)
    inside = (s >= 0) & (s <= 2)
    density = jnp.where(inside, jnp.sqrt(jnp.clip(4 - s * s, 0)) / jnp.pi, 0.0)
    return jnp.where(jnp.isnan(s), jnp.nan, density)


@float64
def qc_cdf(s):
    """`P(S <= s) = [s sqrt(4 - s^2)/2 + 2 arcsin(s/2)] / pi`.

    **Arguments:** `s`: singular values / sqrt(d).

    **Returns:** the quarter-circle CDF (float64).
    """
    s = jnp.clip(f64(s), 0.0, 2.0)
    return (s * jnp.sqrt(4 - s * s) / 2 + 2 * jnp.arcsin(s / 2)) / jnp.pi


@float64(kappa=KAPPA)
def s_kappa(kappa):
    """Lower edge of the top-`kappa` part of the quarter circle: `int_{s_kappa}^2 rho_qc = kappa`.

    **Arguments:** `kappa`: the rank fraction.

    **Returns:** the edge `s_kappa` above which the top `kappa` fraction lies.
    """
    kappa = f64(kappa)
    return 2 * jnp.cos(_phi(kappa))


@float64(kappa=KAPPA)
def F(kappa):
    """Fraction of the squared Gaussian width kept at rank `kappa d`: `(2 phi - sin(4 phi)/2)/pi`.

    **Arguments:** `kappa`: the rank fraction in `(0, 1]`.

    **Returns:** `F(kappa)` (float64).
    """
    phi = _phi(f64(kappa))
    return (2 * phi - jnp.sin(4 * phi) / 2) / jnp.pi


@float64(kappa=KAPPA)
def truncated_density(s, kappa):
    """Density of the top-`kappa` singular values: `rho_qc(s) / kappa` on `[s_kappa, 2]`.

    **Arguments:** `s`: singular values / sqrt(d); `kappa`: the rank fraction.

    **Returns:** the density of the rescaled top-`kappa` quarter circle.
    """
    s, kappa = f64(s), f64(kappa)
    return jnp.where(s >= s_kappa(kappa), qc_density(s) / kappa, 0.0)


@float64(n=Domain(low=1, integer=True), kappa=KAPPA)
def qc_sample(key, n: int, kappa=1.0):
    """`n` draws from the quarter circle truncated to its top `kappa` (kappa=1: the full law),
    by inverting the mass above `s`.

    **Arguments:** `key`: of the draws; `n`: how many; `kappa`: keep the top `kappa` fraction,
    rescaled to `|W|_F^2 = d^2 F(kappa)`.

    **Returns:** `n` samples (float64).
    """
    kappa = f64(kappa)
    u = uniform(key, (n,)) * kappa
    return 2 * jnp.cos(jax.vmap(_phi)(u))


@float64(
    d=Domain(low=1, integer=True),
    p=Domain(low=1, integer=True),
    samples=Domain(low=1, integer=True),
    kappa=KAPPA,
)
def product_spectrum(key, d: int, p: int, *, samples: int = 4, kappa: float = 1.0):
    """Finite-`p/d` prediction: singular values / sqrt(d) of `U^T E` (`d x p` Gaussian factors,
    the shape of `sum_mu a_mu u_mu e_mu^T`), normalised to `|W|_F^2 = d^2 F(kappa)` after keeping
    the top `m = round(kappa d)`. Returns `samples * m` values.

    **Arguments:** `key`: of the draws; `d`, `p`: dimension and associations; `samples`: matrices
    drawn; `kappa`: the rank fraction.

    **Returns:** `samples * m` normalised singular values.
    """
    m = rank_of(d, kappa=kappa)
    return _product_sv(key, d, p, m, samples, F(kappa))


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _product_sv(key, d, p, m, samples, Fk):
    def one(k):
        ku, ke = jax.random.split(k)
        U = normal(ku, (p, d))
        E = normal(ke, (p, d))
        s = jnp.linalg.svd(U.T @ E, compute_uv=False)[:m]
        return s * jnp.sqrt(d * d * Fk / jnp.sum(s * s)) / jnp.sqrt(d)

    return jax.vmap(one)(jax.random.split(key, samples)).ravel()


@float64(d=Domain(low=1, integer=True), samples=Domain(low=1, integer=True), kappa=KAPPA)
def init_spectrum(key, d: int, *, samples: int = 8, kappa: float = 1.0):
    """The initialisation's law at finite `d`: singular values / sqrt(d) of `samples` Gaussian
    memories (`W = G`, or `W = Q R^T` with `d x m` Gaussian factors for `kappa < 1`),
    normalised to `|W|_F^2 = d^2 F(kappa)` after keeping the top `m = rank_of(d, kappa)`.

    **Returns:** `samples * m` values.

    **Arguments:** `key`: of the draws; `d`: the dimension; `samples`: memories drawn; `kappa`: the
    rank fraction.
    """
    m = rank_of(d, kappa=kappa)
    return _init_sv(key, d, m, samples, F(kappa))


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _init_sv(key, d, m, samples, Fk):
    def one(k):
        kq, kr = jax.random.split(k)
        if m == d:
            W = normal(kq, (d, d))
        else:
            W = normal(kq, (d, m)) @ normal(kr, (d, m)).T
        s = jnp.linalg.svd(W, compute_uv=False)[:m]
        return s * jnp.sqrt(d * d * Fk / jnp.sum(s * s)) / jnp.sqrt(d)

    return jax.vmap(one)(jax.random.split(key, samples)).ravel()
