"""The max-margin memory of a storable instance (docs/science.md, 2.3 and 2.7).

The law of 2.3 describes the optimal memory at capacity: the `W` that maximises the normalised
margin `gamma(W) = min_i <W, A_i> / (|W|_F a)` over the constraints of the decision solver. It is
found as the limit of the regularised squared hinge

    L_lam(W) = sum_i (1 - <W, A_i> / (a g))_+^2 + lam |W|_F^2,

whose minimiser, rescaled, tends to the max-margin direction as `lam -> 0` (the L2 support
vector machine path), by continuation in `lam` with warm starts (L-BFGS of optimistix, float64).
`g` is the current estimate of `gamma*`, reset to the margin reached before each stage: margins
of 1 then need `|W|_F ~ g / gamma* ~ 1`, which keeps every stage well scaled where `gamma*` is
tiny (1e-4 at capacity), and the violations at the solution are of relative order `lam`.
The result is certified both ways, as the decision solver's certificates are: `gamma(W)` is a
lower bound on `gamma*`, and the residuals `r_i = (1 - <W, A_i>/a)_+` normalised to sum 1 are
multipliers whose `|sum_i r_i A_i|_F / (a sum_i r_i)` bounds `gamma*` above; their ratio says
how far from the maximum the memory is.

For `W = Q R^T` of rank `m` the same objective in `(Q, R)` is not convex: it starts from the
rank-`m` truncated SVD of the full-rank max-margin memory and finds a local maximiser of the
margin, which is what a rank-constrained memory at its certified threshold holds.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from .._validate import check_int, InvalidArgument
from ._constraints import Constraints


LAMBDAS = (1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001)


class MaxMargin(eqx.Module):
    """Max-margin memories of a batch (numpy arrays, host side).

    - `weight`: `(n, d, d)`, the memories (for rank `m`, the product `Q R^T`).
    - `margin`: `gamma(W)`, the normalised min margin in float64 (a lower bound on `gamma*`).
    - `margin_bound`: the multipliers' upper bound on `gamma*`.
    - `converged`: every stage of the continuation met its tolerance.
    """

    weight: np.ndarray
    margin: np.ndarray
    margin_bound: np.ndarray
    converged: np.ndarray


def _objective(cons: Constraints, a, lam, W):
    m = cons.margins(W) / a
    r = jnp.where(cons.mask, jnp.maximum(1.0 - m, 0.0), 0.0)
    return jnp.sum(r * r) + lam * jnp.sum(W * W)


def _certify(cons: Constraints, a, g, W):
    """`(gamma(W), the multipliers' bound, |W|_F)`; the residuals are those of scale `g`."""
    m = cons.margins(W) / a
    norm = jnp.linalg.norm(W)
    lower = jnp.min(jnp.where(cons.mask, m, jnp.inf)) / norm
    r = jnp.where(cons.mask, jnp.maximum(1.0 - m / g, 0.0), 0.0)
    upper = jnp.linalg.norm(cons.adjoint(r)) / (a * jnp.sum(r))
    return lower, upper, norm


def _solve(fn, bounds, y0, g0, lams, max_steps):
    """Continuation in `lam`; before each stage the margin scale `g` is reset to the current
    normalised margin (when positive) and the iterate normalised to `|W|_F = 1`, where every
    margin is then at least 1: each stage starts feasible, at the scale of its solution.
    Returns the last iterate, the tightest upper bound met on the way (any multipliers bound
    `gamma*`) and whether every stage converged."""
    solver = optx.LBFGS(rtol=1e-9, atol=1e-15)
    ok, y, g, upper = jnp.array(True), y0, g0, jnp.inf
    for lam in lams:
        gam, _, norm = bounds(y, g)
        positive = gam > 0
        g = jnp.where(positive, gam, g)
        factor = jnp.where(positive, 1.0 / norm, 1.0)
        factor = jnp.sqrt(factor) if isinstance(y, tuple) else factor
        y = jax.tree.map(lambda x: x * factor, y)
        sol = optx.minimise(lambda y, g: fn(lam, g, y), solver, y, g, max_steps=max_steps, throw=False)
        y = sol.value
        upper = jnp.minimum(upper, bounds(y, g)[1])
        ok &= sol.result == optx.RESULTS.successful
    return y, upper, ok


@eqx.filter_jit
def _full(cons: Constraints, scale, lams, max_steps):
    def one(c, g):
        a = c.rms_norm()
        W0 = jnp.zeros(2 * c.inputs.shape[-1:])
        fn = lambda lam, g, W: _objective(c, a * g, lam, W)
        W, upper, ok = _solve(fn, lambda W, g: _certify(c, a, g, W), W0, g, lams, max_steps)
        return W, _certify(c, a, g, W)[0], upper, ok

    return jax.vmap(one)(cons, scale)


@eqx.filter_jit
def _factored(cons: Constraints, scale, W0, rank: int, lams, max_steps):
    def one(c, g, W0):
        a = c.rms_norm()
        U, s, Vt = jnp.linalg.svd(W0)
        root = jnp.sqrt(s[:rank])
        QR = (U[:, :rank] * root, Vt[:rank].T * root)
        fn = lambda lam, g, qr: _objective(c, a * g, lam, qr[0] @ qr[1].T)
        bounds = lambda qr, g: _certify(c, a, g, qr[0] @ qr[1].T)
        (Q, R), upper, ok = _solve(fn, bounds, QR, g, lams, max_steps)
        W = Q @ R.T
        return W, _certify(c, a, g, W)[0], upper, ok

    return jax.vmap(one)(cons, scale, W0)


def max_margin(
    cons: Constraints, scale, *, rank: int | None = None, lams=LAMBDAS, max_steps: int = 2000
) -> MaxMargin:
    """The max-margin memory of each instance of a batch of storable constraints, in float64.

    **Arguments:**

    - `cons`: dense `Constraints` with a leading ensemble axis (`batch_constraints(...,
      stream=False)`); each instance should be storable (else the margin found is negative).
    - `scale`: `(n,)` positive first guesses of each instance's `gamma*` (refined by the stages).
    - `rank`: `m` for `W = Q R^T` (a local maximiser from the full-rank one), `None` for full rank.
    - `lams`: the continuation, decreasing; `max_steps`: BFGS steps per stage.

    **Returns:** a `MaxMargin`.
    """
    check_int("max_steps", max_steps, 1)
    lams = tuple(float(x) for x in lams)
    with jax.enable_x64(True):
        c64 = jax.tree.map(
            lambda x: x.astype(jnp.float64) if jnp.issubdtype(x.dtype, jnp.floating) else x, cons
        )
        g = jnp.asarray(scale, jnp.float64)
        if g.shape != c64.p.shape or not bool(jnp.all(g > 0)):
            raise InvalidArgument(
                f"scale must hold one positive value per instance, got {np.asarray(scale)!r}"
            )
        out = _full(c64, g, lams, max_steps)
        if rank is not None:
            check_int("rank", rank, 1, c64.inputs.shape[-1])
            out = _factored(c64, jnp.where(out[1] > 0, out[1], g), out[0], int(rank), lams, max_steps)
        W, lower, upper, ok = (np.asarray(x) for x in out)
    return MaxMargin(weight=W, margin=lower, margin_bound=upper, converged=ok)
