"""Hebbian memory `W_H = sum_mu u_mu e_mu^T` at finite `(d, p)` (docs/science.md 2.5).

Exact representation of the DP. Condition on `a = |e_mu|^2`, `b = |u_mu|^2` (chi^2_d),
`C = sum_{nu != mu} (e_nu . e_mu)^2 / a` (chi^2_{p-1}), `y ~ N(0,1)`, `R ~ chi^2_{d-1}`. Then
`v = W e_mu = a u_mu + sqrt(a C) g` with `g ~ N(0, I_d)`, and the target score in units of
`|v|` is
    x = sqrt(b) N / sqrt(N^2 + C R),   N = sqrt(a b) + sqrt(C) y.
DP competitors are fresh: given `v` they are i.i.d. `N(0, |v|^2)`, so
    accuracy_DP = E[ Phi(x)^(p-1) ]          (exact; five scalar variables, Monte Carlo).
OP competitors `u_rho . v` contain `u_rho` itself: `|u_rho|^2 (e_rho . e_mu)` adds variance
`a (d^2 + d)` (net of the `u_rho` term it replaces in `|v|^2`), so in units of `|v|` they have
spread `sigma_OP^2 = 1 + (d^2 + d) / (N^2 + C R)`; treating them as independent Gaussians gives
    accuracy_OP ~= E[ Phi(x / sigma_OP)^(p-1) ].
First two moments (unconditional): target mean `d^2`, variance `4 d^3 + 4 d^2 + (p-1) d^2`;
competitor variance `d^2 (p + d + 1)` (DP) and `d^2 (p + 2 d + 2)` (OP).
All stored is approximated by independence across inputs, `P(all) ~= accuracy^p`; its error
against simulation is measured in the tests and docs/results/theory.md.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.scipy.special import log_ndtr

from .._validate import check_choice, check_int
from ._common import default_key, f64, float64, normal, P, POSITIVE


DEFAULT_SAMPLES = 200_000


class Hebbian(eqx.Module):
    accuracy: jax.Array
    accuracy_se: jax.Array
    p_all_stored: jax.Array
    target_mean: jax.Array  # normalised target score x (units of |W e_mu|)
    target_std: jax.Array


def _chi2(key, df, shape):
    # drawn in float32 (32-bit random bits lower under any jit) and used in float64: a sample's
    # relative rounding of 1e-7 is far below the Monte Carlo error
    return 2.0 * jax.random.gamma(key, jnp.float32(df) / 2.0, shape, jnp.float32).astype(jnp.float64)


def target_samples(key, d: int, p: int, n: int):
    """Samples of the normalised Hebbian target score `x` and the OP competitor spread."""
    ks = jax.random.split(key, 5)
    a, b = _chi2(ks[0], d, (n,)), _chi2(ks[1], d, (n,))
    C = _chi2(ks[2], p - 1, (n,))
    y = normal(ks[3], (n,))
    R = _chi2(ks[4], d - 1, (n,)) if d > 1 else jnp.zeros((n,))
    N = jnp.sqrt(a * b) + jnp.sqrt(C) * y
    D = N * N + C * R
    x = jnp.sqrt(b) * N / jnp.sqrt(D)
    sigma_op = jnp.sqrt(1.0 + (d * d + d) / D)
    return x, sigma_op


def check_point(d, p, problem):
    d, p = check_int("d", d, 2), check_int("p", p, 2)
    check_choice("problem", problem, ("op", "dp"))
    return d, p


@float64
def hebbian(d: int, p: int, problem: str = "op", *, key=None, samples: int = DEFAULT_SAMPLES) -> Hebbian:
    """Finite-size Hebbian accuracy and probability that all `p` are stored.

    **Arguments:** `d`, `p`: dimension and associations; `problem`: `"op"` or `"dp"`; `key`,
    `samples`: of the Monte Carlo over the target field.

    **Returns:** a `Hebbian` (`accuracy`, `accuracy_se`, `p_all_stored`).
    """
    d, p = check_point(d, p, problem)
    x, sigma = target_samples(default_key(key), d, p, samples)
    if problem == "op":
        x = x / sigma
    ok = jnp.exp((p - 1) * log_ndtr(x))
    acc = ok.mean()
    return Hebbian(acc, ok.std() / math.sqrt(samples), acc**p, x.mean(), x.std())


@float64(d=POSITIVE, p=P)
def hebbian_asymptotic(d, p, *, nodes: int = 64):
    """`E_z Phi(d/sqrt(p) + z)^(p-1)` (Gauss-Hermite), the large-`d` Hebbian accuracy.

    **Arguments:** `d`, `p`: dimension and associations; `nodes`: quadrature nodes.

    **Returns:** the large-`d` accuracy (float64).
    """
    import numpy as np

    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    x, w = jnp.asarray(x), jnp.asarray(w / np.sqrt(2 * np.pi))
    mu = f64(d) / jnp.sqrt(f64(p))
    return jnp.sum(w * jnp.exp((f64(p) - 1) * log_ndtr(mu + x)))


ALPHA_ALL_STORED = 1.0 / 8.0  # all stored while d/sqrt(p) > 2 sqrt(2 ln p), i.e. alpha < 1/8
