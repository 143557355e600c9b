"""Replica-symmetric saddle point of the decoupled problem (docs/science.md 2.1), at any `p`.

    phi(q) = 1/2 [ln(1-q) + q/(1-q)] + alpha_G E_z ln Z_out(sqrt(q) z, 1-q)
    Z_out(omega, V) = int Dxi prod_{rho != 1} Phi((omega_1 - omega_rho - m)/sqrt(V) + xi)
    q/(1-q)^2 = alpha_G E_z |grad_omega ln Z_out|^2 =: qhat,   alpha_G = p / d^2 = alpha / ln p.

**Fields at any `p`.** A sample is the target field `z_1` and the `p - 1` competitors. The `K`
largest competitors are drawn exactly as order statistics (`top_order_stats`, as for
`alpha_c`); given the `K`-th largest, `c`, the other `p - 1 - K` are i.i.d. `N(0, 1)` below `c`,
and enter through their law: their sum `sum_rho f(z_rho)` is replaced by `(p - 1 - K) E[f(z) |
z < c]`, a Gauss-Laguerre quadrature in minus the log of their tail share. Only the top enters
the projection as `q -> 1` (`K` as in `alpha_c`), and the bulk's terms are small and many, so
the law of large numbers makes this exact as `p` grows; the cost does not depend on `p`. The
all-fields Monte Carlo (`saddle_fields`, integer `p` only) stays as the reference.

**ln Z_out** is a Laplace-centred Gauss-Hermite quadrature in log space: the log-integrand
`g(xi) = ln phi(xi) + sum log Phi(a_rho + xi)` is concave, so a safeguarded Newton iteration
finds its mode and curvature, which place the nodes (smooth functions of the fields, so that
derivatives are those of the computed numbers). With `pi_i` the normalised quadrature weights
and `M_rho = sum_i pi_i Phi'/Phi(a_rho + xi_i)` (the gradient at fixed nodes, equal to the
exact one up to the quadrature error), `|grad_omega ln Z_out|^2 = [(sum M_rho)^2 + sum M_rho^2] / V`.

**The solve.** The fixed point is solved by Newton in `w = logit(q)` (so `q` stays in `(0, 1)`
from `alpha = 1e-6` to the capacity), on frozen samples (common random numbers), with
a one-step implicit derivative (`_fixed_point`). Samples come in blocks of `BLOCK`; `se_target` doubles
the blocks until the Monte Carlo standard error of `q*` is below it. `q_se` is the delta
method: `dq*/d gbar` (implicit) times the standard error of the mean `gbar` of
`|grad ln Z_out|^2`; at the saddle point `d phi / dq = 0`, so `free_entropy_se` is `alpha_G`
times the standard error of the mean `ln Z_out`. Above the capacity of the samples themselves
(`ln p / mean dist^2`, the load at which `q* -> 1`) there is no solution, and the status says so.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr, ndtr, ndtri

from .._validate import check_int, check_memory, check_positive, check_real_if_scalar, InvalidArgument
from ._capacity import dist2_given_competitors, order_stats_needed, project
from ._common import default_key, Domain, f64, float64, MARGIN, normal, P, POSITIVE, uniform


BLOCK = 8  # competitor samples per block (the unit of the error estimate)
STRATA = 8  # leading order-statistic spacings stratified within a block
GROUP = 8  # blocks evaluated together (sample counts are multiples of GROUP * BLOCK)
DEFAULT_BLOCKS = 8
MAX_BLOCKS = 4096
DEFAULT_SE = 0.003
DEFAULT_NODES = 12  # Gauss-Hermite nodes of ln Z_out
TARGET_NODES = 8  # Gauss-Hermite nodes of the target field
EXACT_TOP = 16  # competitors entering ln Z_out exactly (the rest through their law)
BULK_NODES = 16
DEFAULT_SAMPLES = 256  # of the all-fields reference


class SaddleStatus(eqx.Enumeration):
    """What a saddle-point solve found."""

    success = "converged: q in (0, 1) solves the saddle-point equation"
    above_capacity = "no solution: the load is at or above the capacity of the samples (q* -> 1)"
    not_converged = "the root finder did not converge within max_steps"
    invalid_input = "invalid input: alpha <= 0, p < 2 or margin < 0 (or not finite)"
    near_capacity = (
        "undecided: the load is within two standard errors of the samples' capacity at max_samples"
    )
    imprecise = "converged, but q_se is above se_target at max_samples (values kept)"


STATUS = tuple(SaddleStatus._name_to_item)


def status_name(status) -> str:
    """The name of a concrete `SaddleStatus` item (`"success"`, ...)."""
    if not hasattr(status, "_value"):
        raise InvalidArgument(f"status must be a SaddleStatus item (a Saddle's status), got {status!r}")
    return STATUS[int(status._value)]


def _gh(nodes: int):
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    return jnp.asarray(x, jnp.float64), jnp.asarray(np.log(w / np.sqrt(2 * np.pi)), jnp.float64)


_HALF_LOG_2PI = 0.5 * np.log(2 * np.pi)


def _mills(u):  # phi(u) / Phi(u)
    return jnp.exp(-0.5 * u**2 - _HALF_LOG_2PI - log_ndtr(u))


_BIG = 1e4  # a field this far above the target contributes exactly 0 (and keeps 0 * inf away)


def _quadrature(a, weight, nodes: int):
    """Laplace-centred Gauss-Hermite quadrature of `int Dxi exp(sum_j weight_j log Phi(a_j + xi))`:
    `(ln Z, M)` with `M_j = d ln Z / d a_j / weight_j` (the posterior mean of the Mills ratio)."""
    x, logw = _gh(nodes)
    a0 = jax.lax.stop_gradient(a)
    w0 = jax.lax.stop_gradient(weight)

    # The mode solves sum_j w_j m(a_j + xi) = xi (m the Mills ratio; the root is > 0): Newton on
    # h = ln(sum w m) - ln xi, whose exponential steepness the logarithm removes, safeguarded in
    # a bracket [lo, hi] (h > 0 at lo, < 0 at hi), on constants; then two plain Newton steps on
    # g' in the live `a`, so that the mode, the nodes and the quadrature are smooth, differentiable
    # functions of the parameters (the derivative of a converged Newton step is the implicit one).
    def h(xi):
        r = _mills(a0 + xi)
        S = jnp.sum(w0 * r)
        return jnp.log(S) - jnp.log(xi), -jnp.sum(w0 * r * (a0 + xi + r)) / S - 1.0 / xi

    def expand(c, _):
        lo, hi = c
        up = h(hi)[0] > 0
        return (jnp.where(up, hi, lo), jnp.where(up, 2 * hi, hi)), None

    hi0 = jnp.maximum(-jnp.min(a0), 1.0)
    (lo, hi), _ = jax.lax.scan(expand, (jnp.zeros_like(hi0), hi0), None, length=6)

    def newton(c, _):
        lo, hi, xi = c
        v, dv = h(xi)
        lo, hi = jnp.where(v > 0, xi, lo), jnp.where(v > 0, hi, xi)
        xn = xi - v / dv
        return (lo, hi, jnp.where((xn > lo) & (xn < hi), xn, 0.5 * (lo + hi))), None

    (_, _, xi0), _ = jax.lax.scan(newton, (lo, hi, jnp.minimum(hi0, 0.5 * (lo + hi))), None, length=10)
    for _ in range(2):  # on g' = sum w m - xi itself: well conditioned at the root, even a tiny one
        r = _mills(a + xi0)
        step = (jnp.sum(weight * r) - xi0) / (-jnp.sum(weight * r * (a + xi0 + r)) - 1.0)
        xi0 = xi0 - jnp.where(jnp.isfinite(step), step, 0.0)
    r = _mills(a + xi0)
    s = 1.0 / jnp.sqrt(jnp.sum(weight * r * (a + xi0 + r)) + 1.0)
    xi = xi0 + s * x
    u = a[None, :] + xi[:, None]
    L = log_ndtr(u)
    lw = logw + jnp.sum(weight * L, axis=1) - 0.5 * xi**2 + 0.5 * x**2
    lnz = jnp.log(s) + jax.scipy.special.logsumexp(lw)
    post = jax.nn.softmax(lw)
    M = jnp.sum(post[:, None] * jnp.exp(-0.5 * u**2 - _HALF_LOG_2PI - L), axis=0)
    return lnz, M


@float64(V=POSITIVE, margin=MARGIN)
def log_zout(omega, V, margin=0.0, *, nodes: int = DEFAULT_NODES):
    """`ln Z_out(omega, V)`; `omega[0]` is the target field, the rest the competitors.

    **Arguments:** `omega`, `V`: the cavity mean and variance; `margin`: the margin; `nodes`:
    quadrature nodes.

    **Returns:** `ln Z_out` (float64).
    """
    omega, V = f64(omega), f64(V)
    a = (omega[0] - omega[1:] - margin) / jnp.sqrt(V)
    return _quadrature(a, jnp.ones_like(a), nodes)[0]


def _bulk_nodes(nb, c, nodes: int):
    """Quadrature of the bulk: `sum_{bulk} f(z_rho) ~ nb int_0^1 f(z(t)) dt`, with `t` the share
    of the bulk above `z < c`, so `z(t) = -ndtri(Phibar(c) + t Phi(c))` (the upper-tail
    quantile, accurate far out). With `t = e^-y` this is `nb int_0^inf f(z(e^-y)) e^-y dy`, a
    Gauss-Laguerre quadrature: exact for a constant `f` (low load, where every competitor counts
    alike), and its nodes reach `t ~ 1e-22`, resolving the few bulk competitors just below `c`
    that matter at high load. **Returns:** the nodes `z` and weights (summing to `nb`)."""
    y, w = np.polynomial.laguerre.laggauss(nodes)
    t = jnp.exp(-jnp.asarray(y, jnp.float64))
    z = -ndtri(jnp.clip(ndtr(-c) + t * ndtr(c), 1e-300, 1.0))
    return z, nb * jnp.asarray(w, jnp.float64)


def _terms(q, z1, top, nb, margin, nodes, bulk: int):
    """`ln Z_out` and `|grad ln Z_out|^2` of one sample: target `z1`, the top competitors `top`
    (decreasing, `-inf` padded), and `nb` more below `top[-1]` entering through their law."""
    V = 1.0 - q
    sq, sV = jnp.sqrt(q), jnp.sqrt(V)
    zb, wb = _bulk_nodes(nb, jnp.where(jnp.isfinite(top[-1]), top[-1], 0.0), bulk)
    zs = jnp.concatenate([top, zb])
    a = jnp.minimum((sq * (z1 - zs) - margin) / sV, _BIG)
    a = jnp.where(jnp.isfinite(zs), a, _BIG)
    weight = jnp.concatenate([jnp.ones_like(top), wb])
    lnz, M = _quadrature(a, weight, nodes)
    g2 = (jnp.sum(weight * M) ** 2 + jnp.sum(weight * M**2)) / V
    return lnz, g2


def _draw(key, p, top: int):
    """One block of `BLOCK` competitor samples: the `top` largest of `p - 1` as order
    statistics, their first `STRATA` exponential spacings Latin-hypercube stratified over the
    block (unbiased; the block mean is the unit of the error estimate)."""
    ku, kp = jax.random.split(key)
    u = uniform(ku, (BLOCK, top))
    perms = jax.vmap(lambda k: jax.random.permutation(k, BLOCK))(jax.random.split(kp, STRATA))
    strat = (perms.T.astype(jnp.float64) + u[:, :STRATA]) / BLOCK
    u = jnp.concatenate([strat, u[:, STRATA:]], axis=1)
    n = p - 1.0
    j = jnp.arange(top, dtype=jnp.float64)
    log_u = -jnp.cumsum(-jnp.log(u) / jnp.maximum(n - j, 1.0), axis=-1)
    z = -ndtri(-jnp.expm1(log_u))
    return jnp.where(j < n, z, -jnp.inf)


class _Sums(eqx.Module):
    """Sums over blocks of the block means (and their squares) of `ln Z_out` and `|grad|^2`."""

    lnz: jax.Array
    lnz2: jax.Array
    g2: jax.Array
    g22: jax.Array
    n: jax.Array  # blocks


def _moments(q, key, p, margin, blocks, top: int, nodes: int):
    """Block means of `E_{z_1} ln Z_out` and `E_{z_1} |grad|^2` (the target field integrated by
    Gauss-Hermite, `TARGET_NODES`), summed over `blocks` blocks."""
    x1, w1 = np.polynomial.hermite_e.hermegauss(TARGET_NODES)
    x1, w1 = jnp.asarray(x1), jnp.asarray(w1 / w1.sum())
    K = min(top, EXACT_TOP)
    nb = jnp.maximum(p - 1.0 - K, 0.0)

    def sample(comps):
        lnz, g2 = jax.vmap(lambda z1: _terms(q, z1, comps[:K], nb, margin, nodes, BULK_NODES))(x1)
        return jnp.sum(w1 * lnz), jnp.sum(w1 * g2)

    def one_block(i):
        lnz, g2 = jax.vmap(sample)(_draw(jax.random.fold_in(key, i), p, top))
        return lnz.mean(), g2.mean()

    def body(j, acc):  # GROUP blocks at once: one batch wide enough for the cores
        lm, gm = jax.vmap(one_block)(j * GROUP + jnp.arange(GROUP))
        return _Sums(
            acc.lnz + lm.sum(),
            acc.lnz2 + (lm**2).sum(),
            acc.g2 + gm.sum(),
            acc.g22 + (gm**2).sum(),
            acc.n + GROUP,
        )

    z = jnp.zeros((), jnp.float64)
    return jax.lax.fori_loop(0, blocks // GROUP, body, _Sums(z, z, z, z, z))


def _sample_dist2(key, p, blocks, top: int):
    """`mean E_{z_1} dist^2(z, C_p)` over the same competitor samples (exact in `z_1`), and its
    standard error over blocks: the load `ln p / mean` is their capacity."""

    def body(i, acc):
        comps = _draw(jax.random.fold_in(key, i), p, top)
        pad = jnp.concatenate([comps, jnp.full((BLOCK, 1), -jnp.inf)], axis=1)
        b = dist2_given_competitors(pad)[0].mean()
        return acc[0] + b, acc[1] + b * b

    z = jnp.zeros((), jnp.float64)
    s1, s2 = jax.lax.fori_loop(0, blocks, body, (z, z))
    n = jnp.asarray(blocks, jnp.float64)
    mean = s1 / n
    return mean, jnp.sqrt(jnp.maximum(s2 / n - mean**2, 0.0) / jnp.maximum(n - 1, 1.0))


def _sample_capacity(key, p, blocks, top: int):
    """`(ln p / mean dist^2, its standard error)` of the samples (first order in the mean's)."""
    mean, se = _sample_dist2(key, p, blocks, top)
    cap = jnp.log(p) / mean
    return cap, cap * se / mean


def _qhat_to_w(qhat):
    """`logit(q)` for the root `q` of `q / (1-q)^2 = qhat`: `ln(2 qhat / (sqrt(4 qhat + 1) + 1))`."""
    return jnp.log(2 * qhat) - jnp.log1p(jnp.sqrt(4 * qhat + 1))


class Saddle(eqx.Module):
    """Saddle point at one load: the overlap `q*` and its Monte Carlo standard error `q_se`,
    the free entropy and `free_entropy_se`, the relative residual of the fixed point, the
    `status` (a `SaddleStatus`), Newton `steps`, `alpha_G = p / d^2`, the number of `samples`
    used, and `alpha_samples`, the capacity of those samples (no solution above it)."""

    q: jax.Array
    q_se: jax.Array
    free_entropy: jax.Array
    free_entropy_se: jax.Array
    residual: jax.Array
    status: SaddleStatus
    steps: jax.Array
    alpha_G: jax.Array
    samples: jax.Array
    alpha_samples: jax.Array


class _Fit(eqx.Module):
    """What a solve at fixed samples gives (all float64 scalars)."""

    w: jax.Array
    q: jax.Array
    q_se: jax.Array
    phi: jax.Array
    phi_se: jax.Array
    residual: jax.Array
    converged: jax.Array
    steps: jax.Array


def _residual(moments, alpha_G):
    """`w -> (R, dR/dw, aux)` of the fixed point `w = T(w) = logit Q(alpha_G gbar(sigmoid w))`,
    `moments(q) -> (lnz mean, lnz se, gbar, gbar se)` on frozen samples: one forward-mode pass
    (`jvp`) through the moments."""

    def residual(w):
        q = jax.nn.sigmoid(w)
        (lnz, lnz_se, g, g_se), dg = jax.jvp(lambda x: moments(jax.nn.sigmoid(x)), (w,), (jnp.ones_like(w),))
        qhat = alpha_G * g
        Tw = _qhat_to_w(qhat)
        dQ = 1.0 / qhat - 2.0 / (jnp.sqrt(4 * qhat + 1) * (jnp.sqrt(4 * qhat + 1) + 1))  # dT/d qhat
        dphi = 0.5 * q / (1 - q) ** 2 * q * (1 - q) + alpha_G * dg[0]  # d phi / dw
        return Tw - w, alpha_G * dQ * dg[2] - 1.0, (q, lnz, lnz_se, g_se, alpha_G * dQ, dphi)

    return residual


def _newton_step(R, dR):
    step = jnp.clip(-R / dR, -4.0, 4.0)  # capped at 4 in w
    return jnp.where(jnp.isfinite(step), step, -jnp.sign(R) * 0.5)


def _newton(residual, w0, rtol, max_steps):
    """Newton in `w = logit(q)` from `w0`, on constants: `(w_end, R, dR, aux, steps)`, the
    residual evaluated at the last iterate `w_end` and the number of steps taken.

    Newton converges quadratically, and the final step of `_fit` squares the error once more,
    so the iteration stops once its step is below `sqrt(rtol)`. The residual at `w_end`, which
    that final step needs, is the loop's last evaluation: the program holds one copy of it."""
    tol = lambda w: jnp.sqrt(rtol) * (1.0 + jnp.abs(w))

    def body(c):
        _, w, step, k, _, _, _, _ = c
        R, dR, aux = residual(w)
        go = (k < max_steps) & (jnp.abs(step) > tol(w))  # else w is the last iterate
        nxt = _newton_step(R, dR)
        return go, jnp.where(go, w + nxt, w), nxt, jnp.where(go, k + 1, k), w, R, dR, aux

    z = jnp.zeros((), jnp.float64)
    inf = jnp.asarray(jnp.inf, jnp.float64)
    w = jax.lax.stop_gradient(w0)
    start = (jnp.asarray(True), w, inf, jnp.zeros((), jnp.int32), w, z, z, (z,) * 6)
    _, _, _, steps, w_end, R, dR, aux = jax.lax.while_loop(lambda c: c[0], body, start)
    return w_end, R, dR, aux, steps


def _fit(alpha_G, w_end, R, dR, aux, steps, rtol, max_steps) -> _Fit:
    """The solution one Newton step from the last iterate `w_end` (where `R`, `dR` and `aux` were
    evaluated): its derivative in the parameters is the implicit one (`-R_theta / R_w` at
    `R = 0`), so derivatives in `alpha`, `p` and `margin` cost one pass and never go through
    the loop."""
    q, lnz, lnz_se, g_se, dT_dg, dphi = aux
    w = w_end - R / jax.lax.stop_gradient(dR)  # the implicit derivative, one step
    q = jax.nn.sigmoid(w)
    # delta method: dw*/d gbar = T_g / (1 - T_w)
    q_se = jnp.abs(q * (1 - q) * dT_dg / dR) * g_se
    # the free entropy at w, to first order from w_end (where it and d phi / dw were computed):
    # its value is exact to O((w - w_end)^2), and its derivative is that of the computed phi
    q_end = jax.nn.sigmoid(w_end)
    phi = 0.5 * (jnp.log1p(-q_end) + q_end / (1 - q_end)) + alpha_G * lnz + dphi * (w - w_end)
    # the final step was at most sqrt(rtol): the error left is of order its square
    converged = (jnp.abs(w - w_end) <= jnp.sqrt(rtol) * (1.0 + jnp.abs(w_end))) & (steps < max_steps)
    return _Fit(w, q, q_se, phi, alpha_G * lnz_se, jnp.abs(R) / (1.0 + jnp.abs(w_end)), converged, steps)


def _fixed_point(moments, alpha_G, w0, rtol, max_steps) -> _Fit:
    """Solve `w = T(w)` by Newton (`_newton`) and take the final, differentiable step (`_fit`) in
    the live parameters."""
    residual = _residual(moments, alpha_G)
    w_end, _, _, _, steps = _newton(residual, w0, rtol, max_steps)
    w_end = jax.lax.stop_gradient(w_end)
    return _fit(alpha_G, w_end, *residual(w_end), steps, rtol, max_steps)


def _block_moments(key, p, margin, blocks, top, nodes):
    def moments(q):
        s = _moments(q, key, p, margin, blocks, top, nodes)
        n = s.n
        se = lambda a, a2: jnp.sqrt(jnp.maximum(a2 / n - (a / n) ** 2, 0.0) / (n - 1))
        return s.lnz / n, se(s.lnz, s.lnz2), s.g2 / n, se(s.g2, s.g22)

    return moments


def _result(fit: _Fit, good, status, steps, alpha_G, samples, cap) -> Saddle:
    """The `Saddle` of a fit: values NaN unless `good`."""
    keep = lambda x: jnp.where(good, x, jnp.nan)
    return Saddle(
        keep(fit.q),
        keep(fit.q_se),
        keep(fit.phi),
        keep(fit.phi_se),
        fit.residual,
        status,
        steps,
        alpha_G,
        samples,
        cap,
    )


def _check(alpha, p, margin):
    check_real_if_scalar("alpha", alpha, low=0.0, low_open=True)
    check_real_if_scalar("p", p, low=2.0)
    check_real_if_scalar("margin", margin, low=0.0)


def _status(valid, above, fit: _Fit, near=False, precise=True):
    """`(good, status)`: `good` keeps the values (success, or imprecise); `near`: the load is
    above the samples' capacity by less than two of its standard errors (not decided)."""
    finite = jnp.isfinite(fit.q) & jnp.isfinite(fit.phi) & jnp.isfinite(fit.q_se)
    good = valid & ~above & fit.converged & finite & (fit.q > 0) & (fit.q < 1)
    W = SaddleStatus.where
    status = W(
        good,
        W(jnp.asarray(precise), SaddleStatus.success, SaddleStatus.imprecise),
        W(
            ~valid,
            SaddleStatus.invalid_input,
            W(
                above,
                W(jnp.asarray(near), SaddleStatus.near_capacity, SaddleStatus.above_capacity),
                SaddleStatus.not_converged,
            ),
        ),
    )
    return good, status


def _parameters(alpha, p, margin):
    """`(valid, alpha_s, p_s, margin_s, alpha_G)`: invalid parameters replaced by harmless ones
    (the outputs are NaN there)."""
    alpha, p, margin = f64(alpha), f64(p), f64(margin)
    finite = jnp.isfinite(alpha) & jnp.isfinite(p) & jnp.isfinite(margin)
    valid = finite & (alpha > 0) & (p >= 2) & (margin >= 0)
    alpha_s = jnp.where(valid, alpha, 0.1)
    p_s = jnp.where(valid, p, 10.0)
    margin_s = jnp.where(valid, margin, 0.0)
    return valid, alpha_s, p_s, margin_s, alpha_s / jnp.log(p_s)


def _near(alpha, cap, cap_se):
    """The load is above the samples' capacity by less than two of its standard errors."""
    return (alpha >= cap) & (alpha - cap < 2 * cap_se)


def _outcome(valid, alpha_s, alpha_G, fit, cap, cap_se, steps, blocks, se_target, w0):
    """The `Saddle` of the last fit, and the `w` a continuation starts from."""
    precise = ~(fit.converged & (fit.q_se > se_target))
    good, status = _status(valid, alpha_s >= cap, fit, _near(alpha_s, cap, cap_se), precise)
    nan = jnp.full((), jnp.nan)
    out = _result(
        fit, good, status, steps, jnp.where(valid, alpha_G, nan), blocks * BLOCK, jnp.where(valid, cap, nan)
    )
    return out, jnp.where(good, fit.w, w0)


def _search(alpha, p, margin, key, w0, se_target, min_blocks, max_blocks, top, nodes, rtol, max_steps):
    """The saddle point on constants: grow the samples, from the last solution, until the
    error of q* is below se_target, and while the load is above the samples' capacity by less
    than two of its standard errors (no solution on these samples, but not a decided "above
    capacity"). **Returns:** `(Saddle, w, blocks, w_end, newton_steps)`: the last fit's samples,
    last Newton iterate and Newton steps, from which `_finish` forms the same fit in live
    parameters."""
    valid, alpha_s, p_s, margin_s, alpha_G = _parameters(alpha, p, margin)

    def solve(blocks, w):
        residual = _residual(_block_moments(key, p_s, margin_s, blocks, top, nodes), alpha_G)
        w_end, R, dR, aux, steps = _newton(residual, w, rtol, max_steps)
        return _fit(alpha_G, w_end, R, dR, aux, steps, rtol, max_steps), w_end

    def cond(c):
        blocks, fit, _, steps, first, cap, cap_se = c
        more = (fit.converged & (fit.q_se > se_target)) | _near(alpha_s, cap, cap_se)
        return first | ((blocks < max_blocks) & more)

    def body(c):
        blocks, fit, _, steps, first, cap, cap_se = c
        finite = lambda x: jnp.where(jnp.isfinite(x), x, 0.0)
        need_q = jnp.where(fit.converged, finite((fit.q_se / se_target) ** 2), 0.0)
        need_cap = finite((2 * cap_se / jnp.maximum(alpha_s - cap, 1e-300)) ** 2)
        need = jnp.where(_near(alpha_s, cap, cap_se), jnp.maximum(need_q, need_cap), need_q)
        grow = jnp.ceil(blocks * jnp.clip(need * 1.2, 2.0, 16.0) / GROUP) * GROUP
        blocks = jnp.where(first, blocks, jnp.minimum(grow.astype(jnp.int32), max_blocks))
        new, w_end = solve(blocks, jnp.where(first | ~fit.converged, w0, fit.w))
        # the capacity of these samples: no solution at or above it (q* -> 1)
        cap, cap_se = _sample_capacity(key, p_s, blocks, top)
        return blocks, new, w_end, steps + new.steps, jnp.asarray(False), cap, cap_se

    z = jnp.zeros((), jnp.float64)
    blank = _Fit(z, z, z, z, z, z, jnp.asarray(False), jnp.zeros((), jnp.int32))
    b0 = jnp.asarray(min_blocks, jnp.int32)
    start = (b0, blank, z, jnp.asarray(0, jnp.int32), jnp.asarray(True), z, z)
    blocks, fit, w_end, steps, _, cap, cap_se = jax.lax.while_loop(cond, body, start)
    out, w = _outcome(valid, alpha_s, alpha_G, fit, cap, cap_se, steps, blocks, se_target, w0)
    return out, w, blocks, w_end, fit.steps


def _finish(
    alpha, p, margin, w0, key, se_target, blocks, w_end, newton_steps, steps, top, nodes, rtol, max_steps
):
    """The last fit of `_search` formed again from its samples (`blocks`) and last iterate
    `w_end`, differentiably in `alpha`, `p`, `margin` and `w0`: its derivative is the implicit one
    (`_fit`), and the samples' capacity's that of the samples."""
    valid, alpha_s, p_s, margin_s, alpha_G = _parameters(alpha, p, margin)
    residual = _residual(_block_moments(key, p_s, margin_s, blocks, top, nodes), alpha_G)
    fit = _fit(alpha_G, w_end, *residual(w_end), newton_steps, rtol, max_steps)
    cap, cap_se = _sample_capacity(key, p_s, blocks, top)
    return _outcome(valid, alpha_s, alpha_G, fit, cap, cap_se, steps, blocks, se_target, w0)


@functools.partial(jax.custom_jvp, nondiff_argnums=(6, 7, 8, 9, 10, 11))
def _saddle(alpha, p, margin, key, w0, se_target, min_blocks, max_blocks, top, nodes, rtol, max_steps):
    """`(Saddle, w)` at one load. The derivative never goes through the loops: it is the
    implicit one of the last fit (`_finish`), taken by forward mode (the theory's derivatives
    are jvps, `float64`)."""
    out, w, _, _, _ = _search(
        alpha, p, margin, key, w0, se_target, min_blocks, max_blocks, top, nodes, rtol, max_steps
    )
    return out, w


@_saddle.defjvp
def _saddle_jvp(min_blocks, max_blocks, top, nodes, rtol, max_steps, primals, tangents):
    alpha, p, margin, key, w0, se_target = primals
    da, dp, dm, _, dw0, _ = tangents
    out, w, blocks, w_end, newton_steps = _search(
        alpha, p, margin, key, w0, se_target, min_blocks, max_blocks, top, nodes, rtol, max_steps
    )
    finish = lambda a, pp, m, w_0: _finish(
        a, pp, m, w_0, key, se_target, blocks, w_end, newton_steps, out.steps, top, nodes, rtol, max_steps
    )
    live = (alpha, p, margin, w0)

    def tangent(x, t):  # float64, and zero for an integer argument (whose tangent is float0)
        if jnp.asarray(t).dtype == jax.dtypes.float0:
            return jnp.zeros(jnp.shape(x), jnp.float64)
        return jnp.asarray(t, jnp.float64)

    _, t = jax.jvp(finish, tuple(f64(x) for x in live), tuple(map(tangent, live, (da, dp, dm, dw0))))
    return (out, w), t


class SaddleConfig(eqx.Module):
    """How `saddle` and `saddle_path` sample and solve (validated).

    - `se_target`: the Monte Carlo standard error of `q*` to reach: the samples double from
      `min_samples` up to `max_samples` (rounded up to multiples of `GROUP * BLOCK`).
    - `nodes`: Gauss-Hermite nodes of `ln Z_out`; `top`: competitor order statistics drawn
      (default as `alpha_c`: 16 for `p <= 17`, else 128; the first `EXACT_TOP` enter exactly).
    - `rtol`, `max_steps`: of the Newton iteration in `logit(q)`.
    """

    se_target: float = DEFAULT_SE
    min_samples: int = DEFAULT_BLOCKS * BLOCK
    max_samples: int = MAX_BLOCKS * BLOCK
    nodes: int = DEFAULT_NODES
    top: int | None = None
    rtol: float = 1e-7
    max_steps: int = 64

    def __check_init__(self):
        check_positive("se_target", self.se_target)
        min_samples = check_int("min_samples", self.min_samples, 2)
        check_int("max_samples", self.max_samples, min_samples)
        check_int("nodes", self.nodes, 2)
        if self.top is not None:
            check_int("top", self.top, 2)
        check_real_if_scalar("rtol", self.rtol, low=0.0, low_open=True, high=1e-2)
        check_int("max_steps", self.max_steps, 1)

    def static(self, p) -> tuple:
        """`(min_blocks, max_blocks, top, nodes, rtol, max_steps)` for the jitted solvers."""
        unit = GROUP * BLOCK
        blocks = lambda n: unit * -(-n // unit) // BLOCK
        top = order_stats_needed(p, self.top)
        return blocks(self.min_samples), blocks(self.max_samples), top, self.nodes, self.rtol, self.max_steps


@float64(alpha=POSITIVE, p=P, margin=MARGIN)
def saddle(alpha, p, margin=0.0, *, key=None, config: SaddleConfig = SaddleConfig(), q0=0.5) -> Saddle:
    """RS saddle point `q*` at load `alpha = p ln p / d^2` (so `alpha_G = alpha / ln p`), at any
    `p` from 2 to beyond 1e12 at a cost that does not grow with `p`, with Monte Carlo errors.

    Never raises inside transformations: no solution (above capacity), no convergence and
    invalid inputs are reported in `status` (a `SaddleStatus`), with NaN values. Differentiable
    in `alpha`, `margin` and `p` (a real `p`) by the implicit function theorem; under
    `jax.grad` the derivative is formed by forward mode in float64 (so `p` and the sampling
    loops, which reverse mode cannot transpose, are covered too).

    **Arguments:** `alpha`: the load `p ln p / d^2`; `p`: associations (real, `>= 2`); `margin`:
    the margin; `key`: of the frozen samples; `config`: a `SaddleConfig`; `q0`: the start.

    **Returns:** a `Saddle`.
    """
    _check(alpha, p, margin)
    w0 = jnp.log(f64(q0)) - jnp.log1p(-f64(q0))
    out, _ = _saddle_jit(alpha, p, margin, default_key(key), w0, f64(config.se_target), *config.static(p))
    return out


_saddle_jit = jax.jit(_saddle, static_argnums=(6, 7, 8, 9, 10, 11))


@float64(alphas=POSITIVE, p=P, margin=MARGIN)
def saddle_path(alphas, p, margin=0.0, *, key=None, config: SaddleConfig = SaddleConfig(), q0=0.05) -> Saddle:
    """Continuation along an increasing grid of loads: each solve starts from the secant
    prediction (in `ln alpha`) of the two previous `logit(q*)` (restarting from `q0` after a
    failure). Called on
    concrete values it is a host loop of jitted solves (each one uses every core: XLA runs a
    loop body inside a `scan` on one); traced, the same steps as a `scan`.

    **Arguments:** `alphas`: an increasing grid of loads; the rest as `saddle`.

    **Returns:** a `Saddle` with a leading grid axis.
    """
    _check(1.0, p, margin)
    if np.ndim(alphas) != 1 or np.shape(alphas)[0] == 0:
        raise InvalidArgument(f"alphas must be a non-empty 1-D grid of loads, got shape {np.shape(alphas)}")
    alphas = f64(alphas)
    args = (default_key(key), f64(config.se_target))
    rest = config.static(p)
    if not any(isinstance(x, jax.core.Tracer) for x in (alphas, p, margin, args[0])):
        carry = _path_start(alphas, f64(q0))
        outs = []
        for i in range(alphas.shape[0]):
            carry, out = _path_step_jit(carry, alphas[i], p, margin, *args, *rest)
            outs.append(out)
        return jax.tree.map(lambda *xs: jnp.stack(xs), *outs)
    return _path_jit(alphas, p, margin, *args, f64(q0), *rest)


def _path_start(alphas, q0):
    w = jnp.log(q0) - jnp.log1p(-q0)
    nan = jnp.full((), jnp.nan, jnp.float64)
    return (w, w, nan, nan, w)  # two previous (w, alpha), and the restart point


def _path_step(carry, a, p, margin, key, se_target, min_blocks, max_blocks, top, nodes, rtol, max_steps):
    w1, w2, a1, a2, w_init = carry
    # secant in ln(alpha) (w ~ ln alpha + const at low load), its change capped at 3
    slope = (w1 - w2) / (jnp.log(a1) - jnp.log(a2))
    guess = jnp.where(jnp.isfinite(slope), w1 + jnp.clip(slope * (jnp.log(a) - jnp.log(a1)), -3.0, 3.0), w1)
    out, w_new = _saddle(
        a, p, margin, key, guess, se_target, min_blocks, max_blocks, top, nodes, rtol, max_steps
    )
    ok = jnp.isfinite(out.q)  # a solution (success, or imprecise)
    nan = jnp.full((), jnp.nan, jnp.float64)
    new = (
        jnp.where(ok, w_new, w_init),
        jnp.where(ok, w1, w_init),
        jnp.where(ok, a, nan),
        jnp.where(ok, a1, nan),
        w_init,
    )
    return new, out


_path_step_jit = jax.jit(_path_step, static_argnums=(6, 7, 8, 9, 10, 11))


def _path(alphas, p, margin, key, se_target, q0, *rest):
    step = lambda c, a: _path_step(c, a, p, margin, key, se_target, *rest)
    return jax.lax.scan(step, _path_start(alphas, q0), alphas)[1]


_path_jit = jax.jit(_path, static_argnums=(6, 7, 8, 9, 10, 11))


# ---------------------------------------------------------------- the all-fields reference


def _fields(key, p: int, samples: int):
    return normal(default_key(key), (samples, p))


def _moments_fields(q, z, margin, nodes):
    """`E ln Z_out` and `E |grad ln Z_out|^2` at overlap `q` over all-fields samples `z` (n, p)."""
    V = 1.0 - q
    lz = lambda om: log_zout(om, V, margin, nodes=nodes)

    def one(zz):
        val, g = jax.value_and_grad(lz)(jnp.sqrt(q) * zz)
        return val, jnp.sum(g * g)

    vals, g2 = jax.vmap(one)(z)
    return vals, g2


@float64(q=Domain(low=0.0, high=1.0, high_open=True), alpha_G=POSITIVE, margin=MARGIN)
def free_entropy(q, alpha_G, z, margin=0.0, *, nodes: int = DEFAULT_NODES):
    """RS free entropy `phi(q)` for given all-fields samples `z` (the reference).

    **Arguments:** `q`: the overlap; `alpha_G`: the load `alpha / ln p`; `z`: `(samples, p)` frozen
    fields; `margin`: the margin; `nodes`: Gauss-Hermite nodes.

    **Returns:** the RS free entropy at `q` (float64).
    """
    q = f64(q)
    vals, _ = _moments_fields(q, z, margin, nodes)
    return 0.5 * (jnp.log1p(-q) + q / (1 - q)) + alpha_G * vals.mean()


@float64(alpha=POSITIVE, margin=MARGIN)
def saddle_fields(
    alpha,
    p: int,
    margin=0.0,
    *,
    key=None,
    samples: int = DEFAULT_SAMPLES,
    config: SaddleConfig = SaddleConfig(),
    q0=0.5,
) -> Saddle:
    """The reference: the saddle point on `samples` draws of all `p` fields (cost `O(p)`), with
    the same Newton in `logit(q)`, status codes and errors as `saddle` (plain i.i.d. samples).

    **Arguments:** as `saddle`, with `samples` all-fields draws (integer `p`); of the `config`,
    `nodes`, `rtol` and `max_steps` apply.

    **Returns:** a `Saddle`.
    """
    _check(alpha, p, margin)
    p = check_int("p", p, 2)
    samples = check_int("samples", samples, 2)
    check_memory("p and samples", 8.0 * 8 * samples * p)
    z = _fields(key, p, samples)
    alpha, margin = f64(alpha), f64(margin)
    alpha_G = alpha / jnp.log(f64(p))
    root_n = jnp.sqrt(f64(samples))

    def moments(q):
        vals, g2 = _moments_fields(q, z, margin, config.nodes)
        return vals.mean(), vals.std(ddof=1) / root_n, g2.mean(), g2.std(ddof=1) / root_n

    w0 = jnp.log(f64(q0)) - jnp.log1p(-f64(q0))
    fit = _fixed_point(moments, alpha_G, w0, config.rtol, config.max_steps)
    comps = -jnp.sort(-z[:, 1:], axis=1)
    top = jnp.concatenate([comps, jnp.full((samples, 1), -jnp.inf)], axis=1)
    cap = jnp.log(f64(p)) / jnp.mean(project(z[:, 0], top).dist2)
    good, status = _status(jnp.asarray(True), alpha >= cap, fit)
    return _result(fit, good, status, fit.steps, alpha_G, jnp.asarray(samples), cap)


@float64(p=P)
def sample_capacity(p, *, key=None, samples: int = DEFAULT_BLOCKS * BLOCK, top: int | None = None):
    """The Gardner capacity on the saddle point's own samples, `ln p / mean dist^2(z_i)`
    (docs/science.md 2.1): the load at which `saddle(..., key=key)` has `q* -> 1` (reported as
    `Saddle.alpha_samples`). It tends to `alpha_c(p)` as `samples` grows.

    **Arguments:** `p` (real, `>= 2`); the `key`, number of `samples` and `top` of `saddle`.

    **Returns:** the capacity in the load `alpha = p ln p / d^2` (float64)."""
    check_real_if_scalar("p", p, low=2.0)
    blocks = -(-check_int("samples", samples, 2) // BLOCK)
    return _sample_capacity(default_key(key), f64(p), blocks, order_stats_needed(p, top))[0]
