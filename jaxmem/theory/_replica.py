"""Replica-symmetric saddle point of the decoupled problem (docs/science.md 2.1).

    phi(q) = 1/2 [ln(1-q) + q/(1-q)] + alpha_G E_z ln Z_out(sqrt(q) z, 1-q)
    Z_out(omega, V) = int Dxi prod_{rho != 1} Phi((omega_1 - omega_rho - m)/sqrt(V) + xi)
    q/(1-q)^2 = alpha_G E_z |grad_omega ln Z_out|^2 =: qhat,   alpha_G = p / d^2 = alpha / ln p.

`ln Z_out` is a Laplace-centred Gauss-Hermite quadrature in log space: the log-integrand
`g(xi) = ln phi(xi) + sum log Phi(a_rho + xi)` is concave, so a few Newton steps find its mode
`xi_0` and curvature; the nodes are placed at `xi_0 + s x_i`. `xi_0` and `s` only choose the
change of variables, so they are held constant under differentiation and the gradient is that
of the quadrature itself. This stays finite as `V = 1-q -> 0`, where the mass sits far out.

`z` are frozen Monte Carlo samples (common random numbers), so the map `q -> T(q)` is smooth
and the saddle point can be solved by Newton with implicit differentiation (optimistix).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jax.scipy.special import log_ndtr

from .._validate import check_int, check_memory, check_real_if_scalar
from ._capacity import project
from ._common import default_key, f64, float64, normal


DEFAULT_SAMPLES = 256
DEFAULT_NODES = 16

STATUS = {0: "success", 1: "max_steps", 2: "nonfinite", 3: "no_solution"}


def _gh(nodes: int):
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    return jnp.asarray(x, jnp.float64), jnp.asarray(np.log(w / np.sqrt(2 * np.pi)), jnp.float64)


@float64
def log_zout(omega, V, margin=0.0, *, nodes: int = DEFAULT_NODES):
    """`ln Z_out(omega, V)`; `omega[0]` is the target field, the rest the competitors.

    **Arguments:** `omega`, `V`: the cavity mean and variance; `margin`: the margin; `nodes`:
    quadrature nodes.

    **Returns:** `ln Z_out` (float64).
    """
    omega, V = f64(omega), f64(V)
    a = (omega[0] - omega[1:] - margin) / jnp.sqrt(V)
    x, logw = _gh(nodes)

    def g(xi):
        return jnp.sum(log_ndtr(a + xi)) - 0.5 * xi**2

    def mills(u):  # phi(u) / Phi(u)
        return jnp.exp(-0.5 * u**2 - 0.5 * jnp.log(2 * jnp.pi) - log_ndtr(u))

    a0 = jax.lax.stop_gradient(a)

    def newton(xi, _):
        r = mills(a0 + xi)
        d1 = jnp.sum(r) - xi
        d2 = -jnp.sum(r * (a0 + xi + r)) - 1.0
        return xi - d1 / d2, None

    xi0, _ = jax.lax.scan(newton, jnp.maximum(-jnp.min(a0), 0.0), None, length=8)
    r = mills(a0 + xi0)
    s = 1.0 / jnp.sqrt(jnp.sum(r * (a0 + xi0 + r)) + 1.0)
    xi0, s = jax.lax.stop_gradient(xi0), jax.lax.stop_gradient(s)
    vals = jax.vmap(g)(xi0 + s * x) + 0.5 * x**2
    return jnp.log(s) + jax.scipy.special.logsumexp(logw + vals)


def _moments(q, z, margin, nodes):
    """`E ln Z_out` and `E |grad ln Z_out|^2` at overlap `q` over samples `z` (n, p)."""
    V = 1.0 - q
    lz = lambda om: log_zout(om, V, margin, nodes=nodes)

    def one(zz):
        val, g = jax.value_and_grad(lz)(jnp.sqrt(q) * zz)
        return val, jnp.sum(g * g)

    vals, g2 = jax.vmap(one)(z)
    return vals.mean(), g2.mean()


def _q_of_qhat(qhat):
    """Solution of `q / (1-q)^2 = qhat` in (0, 1), and `ln(1-q)` computed stably."""
    root = jnp.sqrt(4 * qhat + 1)
    one_minus_q = 2.0 / (root + 1.0)
    return 1.0 - one_minus_q, jnp.log(one_minus_q)


@float64
def free_entropy(q, alpha_G, z, margin=0.0, *, nodes: int = DEFAULT_NODES):
    """RS free entropy `phi(q)` for given samples `z`.

    **Arguments:** `q`: the overlap; `alpha_G`: the load `alpha / ln p`; `z`: `(samples, p)` frozen
    fields; `margin`: the margin; `nodes`: Gauss-Hermite nodes.

    **Returns:** the RS free entropy at `q` (float64).
    """
    q = f64(q)
    elz, _ = _moments(q, z, margin, nodes)
    return 0.5 * (jnp.log1p(-q) + q / (1 - q)) + alpha_G * elz


class Saddle(eqx.Module):
    """Saddle point at one load: overlap `q`, free entropy, true residual `|T(q) - q|`
    (relative, in `ln(1-q)`), status code (see `STATUS`), Newton steps, and `alpha_G = p/d^2`."""

    q: jax.Array
    free_entropy: jax.Array
    residual: jax.Array
    status: jax.Array
    steps: jax.Array
    alpha_G: jax.Array


def _samples(key, p: int, samples: int):
    return normal(default_key(key), (samples, p))


@float64
def sample_capacity(p: int, *, key=None, samples: int = DEFAULT_SAMPLES):
    """The Gardner capacity on the saddle point's own frozen samples, `ln p / mean dist^2(z_i)`
    (docs/science.md 2.1): the load at which `saddle(..., key=key, samples=samples)` has
    `q* -> 1`. It tends to `alpha_c(p)` as `samples` grows.

    **Arguments:** `p` fields per sample, the `key` and number of `samples` of `saddle`.

    **Returns:** the capacity in the load `alpha = p ln p / d^2` (float64)."""
    _check(1.0, p, 0.0, samples)
    z = _samples(key, p, samples)
    comps = -jnp.sort(-z[:, 1:], axis=1)
    top = jnp.concatenate([comps, jnp.full((samples, 1), -jnp.inf)], axis=1)
    return jnp.log(f64(p)) / jnp.mean(project(z[:, 0], top).dist2)


def _solve(alpha, p, margin, z, u0, nodes, rtol, max_steps):
    alpha_G = alpha / jnp.log(f64(p))

    def T(u, args):  # u = ln(1-q); fixed point in that variable
        q = -jnp.expm1(u)
        _, g2 = _moments(q, z, margin, nodes)
        return _q_of_qhat(alpha_G * g2)[1]

    def residual_fn(u, args):
        return T(u, args) - u

    sol = optx.root_find(residual_fn, optx.Newton(rtol=rtol, atol=rtol), u0, max_steps=max_steps, throw=False)
    u = sol.value
    q = -jnp.expm1(u)
    res = jnp.abs(T(u, None) - u)
    phi = free_entropy(q, alpha_G, z, margin, nodes=nodes)
    ok_solver = sol.result == optx.RESULTS.successful
    finite = jnp.isfinite(u) & jnp.isfinite(res) & jnp.isfinite(phi)
    converged = finite & (res < 1e3 * rtol) & (q > 0) & (q < 1)
    status = jnp.where(
        converged,
        0,
        jnp.where(~finite, 2, jnp.where(ok_solver, 3, 1)),
    )
    return Saddle(q, phi, res, status, sol.stats["num_steps"], alpha_G), u


def _check(alpha, p, margin, samples):
    check_real_if_scalar("alpha", alpha, low=0.0, low_open=True)
    check_int("p", p, 2)
    check_int("samples", samples, 1)
    # the (samples, p) fields and a few temporaries of that size, in float64
    check_memory("p and samples", 8.0 * 8 * samples * p)
    check_real_if_scalar("margin", margin, low=0.0)


@float64
def saddle(
    alpha,
    p: int,
    margin=0.0,
    *,
    key=None,
    samples: int = DEFAULT_SAMPLES,
    nodes: int = DEFAULT_NODES,
    q0=0.5,
    rtol: float = 1e-10,
    max_steps: int = 64,
) -> Saddle:
    """RS saddle point `q*` at load `alpha = p ln p / d^2` (so `alpha_G = alpha / ln p`).

    Never raises inside transformations: an unconverged or absent solution is reported in
    `status`. Differentiable in `alpha` and `margin` by the implicit function theorem.

    **Arguments:** `alpha`: the load `p ln p / d^2`; `p`: associations; `margin`: the margin; `key`,
    `samples`: the frozen fields; `nodes`: quadrature nodes; `q0`: the start; `rtol`, `max_steps`:
    of the Newton solve.

    **Returns:** a `Saddle` (`q`, `free_entropy`, `residual`, `status`, `steps`, `alpha_G`).
    """
    _check(alpha, p, margin, samples)
    z = _samples(key, p, samples)
    u0 = jnp.log1p(-f64(q0))
    return _solve(f64(alpha), p, f64(margin), z, u0, nodes, rtol, max_steps)[0]


@float64
def saddle_path(
    alphas,
    p: int,
    margin=0.0,
    *,
    key=None,
    samples: int = DEFAULT_SAMPLES,
    nodes: int = DEFAULT_NODES,
    q0=0.05,
    rtol: float = 1e-10,
    max_steps: int = 64,
) -> Saddle:
    """Continuation along an increasing grid of loads: each solve starts from the previous `q*`
    (restarting from `q0` after a failure). Returns a `Saddle` with a leading grid axis.

    **Arguments:** `alphas`: an increasing grid of loads; the rest as `saddle`.

    **Returns:** a `Saddle` with a leading grid axis.
    """
    alphas = f64(alphas)
    _check(p=p, alpha=1.0, margin=margin, samples=samples)
    z = _samples(key, p, samples)
    u_init = jnp.log1p(-f64(q0))

    def body(u, a):
        out, u_new = _solve(a, p, f64(margin), z, u, nodes, rtol, max_steps)
        return jnp.where(out.status == 0, u_new, u_init), out

    return jax.lax.scan(body, u_init, alphas)[1]
