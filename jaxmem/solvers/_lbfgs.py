"""L-BFGS on the squared hinge `L(X) = sum_i (1 - M_i(X))_+^2` of margins linear in `X`, with a
safeguarded Newton line search that stops at 1% of the initial slope (an inexact minimum along
the direction; docs/science.md 2.7): the one minimiser under the dense and working-set
deciders. A `Linear` map gives the margins and their adjoint; the streamed steps
take a streamed operator, which never forms the margins. The variable's margins reach L-BFGS
through one interface, `AbstractMarginOperator`: `Linear` (a map, its adjoint and a mask) or
`Streamed` (constraints that fold over score tiles)."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Int


HIGHEST = lax.Precision.HIGHEST


def tmatmul(X, Y, precision=HIGHEST):
    """`X^T Y`, contracting the leading axes: one `dot_general`, not a transpose and a matmul,
    which XLA's CPU backend ran up to 20 times slower under `vmap` over a single instance when
    `X` is computed in the same program (measured under `vmap` over one instance)."""
    return jnp.einsum("pi,pj->ij", X, Y, precision=precision)


class LBFGS(eqx.Module):
    X: Array
    M: Array  # margins of X (a placeholder scalar when streamed: never formed)
    g: Array  # gradient of the squared hinge at X
    rsum: Array  # sum of the residuals (1 - M)_+ at X
    stored: Bool[Array, ""]  # every margin at X is positive
    S: Array  # the last `memory` steps s, in a circular buffer (slot k % memory is the next)
    Y: Array  # their gradient changes y
    SY: Array  # SY[i, j] = s_i . y_j over the slots
    YY: Array  # YY[i, j] = y_i . y_j
    k: Int[Array, ""]  # pairs stored since the last restart


def residual(M, mask):
    return jnp.where(mask, jnp.maximum(1.0 - M, 0.0), 0.0)


def hinge_summary(M, mask):
    return jnp.sum(residual(M, mask)), jnp.min(jnp.where(mask, M, jnp.inf))


def lbfgs_init(op: Linear, X, memory: int) -> LBFGS:
    # masked entries hold the margin 2 (never a residual, never negative) and their direction
    # margins are 0, so the steps need no mask
    M = jnp.where(op.mask, op.apply(X), 2.0)
    g = -2.0 * op.adjoint(residual(M, op.mask))
    rsum, mmin = hinge_summary(M, op.mask)
    return fresh_state(X, M, g, rsum, mmin > 0, memory)


def fresh_state(X, M, g, rsum, stored, memory: int) -> LBFGS:
    """The L-BFGS state at `X` (margins `M`, gradient `g`, residual sum, stored) with an empty
    history of `memory` pairs."""
    z = jnp.zeros((memory,) + X.shape, X.dtype)
    zm = jnp.zeros((memory, memory), X.dtype)
    return LBFGS(X, M, g, rsum, stored, z, z, zm, zm, jnp.array(0, jnp.int32))


def streamed_init(cons, X, memory: int) -> LBFGS:
    g, rsum, mmin = cons.hinge(X)
    return fresh_state(X, jnp.zeros((), X.dtype), g, rsum, mmin > 0, memory)


def lbfgs_direction(st: LBFGS):
    """`-H g`, the L-BFGS direction, in the compact form of Byrd, Nocedal and Schnabel (1994):

        H g = gamma g + S p1 - gamma Y u,   u = R^-1 S^T g,   p1 = R^-T ((D + gamma Y^T Y) u - gamma Y^T g),

    with `R` the upper triangle of `S^T Y` and `D` its diagonal, in chronological order, and
    `gamma = s^T y / y^T y` of the newest pair. Six matrix-vector products and two `m x m`
    triangular solves, where the two-loop recursion takes `2m` dependent steps. The pairs live
    in a circular buffer (slot `k % m` is the next), so only the small matrices are permuted."""
    m = st.SY.shape[0]
    order = (st.k + jnp.arange(m)) % m  # chronological position -> slot
    valid = jnp.arange(m) >= m - jnp.minimum(st.k, m)
    both = valid[:, None] & valid[None, :]
    S, Y = st.S.reshape(m, -1), st.Y.reshape(m, -1)
    g = st.g.ravel()
    SY = jnp.where(both, st.SY[order][:, order], 0.0)
    YY = jnp.where(both, st.YY[order][:, order], 0.0)
    a = jnp.where(valid, jnp.matmul(S, g, precision=HIGHEST)[order], 0.0)
    b = jnp.where(valid, jnp.matmul(Y, g, precision=HIGHEST)[order], 0.0)
    tiny = jnp.finfo(g.dtype).tiny
    gnorm = jnp.sqrt(jnp.vdot(g, g))
    newest = SY[-1, -1] / jnp.where(st.k > 0, YY[-1, -1], 1.0)
    gamma = jnp.where(st.k > 0, newest, 1.0 / jnp.maximum(gnorm, tiny))
    R = jnp.triu(SY) + jnp.diag(jnp.where(valid, 0.0, 1.0))
    u = jax.scipy.linalg.solve_triangular(R, a, lower=False)
    w = jnp.diagonal(SY) * u + gamma * (jnp.matmul(YY, u, precision=HIGHEST) - b)
    p1 = jax.scipy.linalg.solve_triangular(R, w, trans="T", lower=False)
    slot = lambda v: jnp.zeros_like(v).at[order].set(v)
    Hg = gamma * g + jnp.matmul(slot(p1), S, precision=HIGHEST)
    Hg = Hg - gamma * jnp.matmul(slot(u), Y, precision=HIGHEST)
    D = -Hg.reshape(st.g.shape)
    return jnp.where(jnp.vdot(D, st.g) < 0, D, -st.g / jnp.maximum(gnorm, tiny))


def line_search(M, dM, slope0, iters: int = 12, rtol: float = 1e-2, dM2=None):
    """`argmin_{t >= 0} phi(t) = sum (1 - M - t dM - t^2 dM2)_+^2` (masked entries hold
    `M = 2, dM = dM2 = 0`; `dM2 = None`: margins linear in `t`).

    With linear margins `phi'` is piecewise linear and non-decreasing, so Newton from `t = 1`
    (where L-BFGS steps usually land) is exact once it stays on one linear piece; a bracket
    `[lo, hi]` of the root, updated at every evaluation, keeps it safe (bisection, or growth by 4
    while no upper end is known). Quadratic margins (a bilinear model, `Bilinear`) make `phi`
    piecewise quartic and `phi''` possibly negative; the bracket then finds a root of `phi'` at
    which it turns from negative to positive, a local minimum along the direction. It stops when
    `|phi'(t)| <= rtol |phi'(0)|` (`slope0` is `phi'(0)`, from the gradient), or after `iters`
    evaluations: an inexact minimum, which L-BFGS tolerates and the certificates never rely on.
    Each evaluation is one fused pass over the margins, its sums in one reduction; the last also
    says whether every margin at the step is positive (`r >= 1` where the margin is `<= 0`).

    **Returns:** `(t, stored)`.
    """

    def slopes(t):
        if dM2 is None:
            r = 1.0 - M - t * dM
            a = jnp.where(r > 0, dM, 0.0)
            hh = a * dM
        else:
            r, v = 1.0 - M - t * (dM + t * dM2), dM + 2.0 * t * dM2
            a = jnp.where(r > 0, v, 0.0)
            hh = a * v - 2.0 * jnp.maximum(r, 0.0) * dM2
        z = jnp.zeros((), M.dtype)
        # one variadic reduction: on the CPU three times faster than three sums
        g, h, bad = lax.reduce(
            (a * r, hh, (r >= 1.0).astype(M.dtype)),
            (z, z, z),
            lambda x, y: (x[0] + y[0], x[1] + y[1], jnp.maximum(x[2], y[2])),
            tuple(range(M.ndim)),
        )
        return -2.0 * g, 2.0 * h, bad == 0

    return newton_search(slopes, slope0, M.dtype, iters=iters, rtol=rtol)


def newton_search(slopes, slope0, dtype, iters: int = 12, rtol: float = 1e-2):
    """The safeguarded Newton search of `line_search` on any convex `phi` along a direction:
    `slopes(t) -> (phi'(t), phi''(t), stored)`, `slope0 = phi'(0)`; from `t = 1`, a bracket of the
    root of `phi'` updated at every evaluation, until `|phi'(t)| <= rtol |phi'(0)|` or `iters`
    evaluations.

    **Returns:** `(t, stored)` of the last evaluation."""
    tiny = jnp.finfo(dtype).tiny

    def cond(c):
        lo, hi, t, g, h, stored, k = c
        return (k < iters) & (jnp.abs(g) > rtol * jnp.abs(slope0)) & (hi - lo > rtol * t)

    def body(c):
        lo, hi, t, g, h, stored, k = c
        tn = t - g / jnp.maximum(h, tiny)
        fallback = jnp.where(jnp.isfinite(hi), 0.5 * (lo + hi), 4.0 * jnp.maximum(t, lo))
        tn = jnp.where((tn > lo) & (tn < hi), tn, fallback)
        gn, hn, stored = slopes(tn)
        return jnp.where(gn < 0, tn, lo), jnp.where(gn >= 0, tn, hi), tn, gn, hn, stored, k + 1

    one = jnp.ones((), dtype)
    g1, h1, s1 = slopes(one)
    inf = jnp.asarray(jnp.inf, dtype)
    init = (jnp.where(g1 < 0, one, 0 * one), jnp.where(g1 >= 0, one, inf), one, g1, h1, s1, jnp.array(1))
    lo, hi, t, g, h, stored, k = lax.while_loop(cond, body, init)
    return t, stored


def _bracketed_root(slopes, dtype, newton: int = 2):
    """The root of a non-decreasing `phi'` on `t >= 0`, from `slopes(ts) -> (phi'(ts), phi''(ts))`:
    one evaluation at the steps `4^-8 .. 4^8` brackets it, then `newton` safeguarded Newton
    steps inside the bracket.

    **Returns:** `t`; the largest step tried, `4^8`, where `phi' < 0` at every step."""
    ts = 4.0 ** jnp.arange(-8, 9).astype(dtype)
    g, h = slopes(ts)
    pos = g >= 0
    k = jnp.argmax(pos)
    none = ~jnp.any(pos)
    lo = jnp.where(k > 0, ts[jnp.maximum(k - 1, 0)], 0.0)
    hi = jnp.where(none, ts[-1], ts[k])
    tiny = jnp.finfo(dtype).tiny

    def step(lo, hi, t, g, h):
        tn = t - g / jnp.maximum(h, tiny)
        return jnp.where((tn > lo) & (tn < hi), tn, 0.5 * (lo + hi))

    t = step(lo, hi, hi, g[k], h[k])
    for _ in range(newton):
        g1, h1 = slopes(t[None])
        lo, hi = jnp.where(g1[0] < 0, t, lo), jnp.where(g1[0] >= 0, t, hi)
        t = step(lo, hi, t, g1[0], h1[0])
    return jnp.where(none, ts[-1], t)


def _line_search_streamed(cons, X, D):
    """`line_search` without the margins: `_bracketed_root` of the slopes of tiled passes."""
    return _bracketed_root(lambda ts: cons.line_slopes(X, D, ts), X.dtype)


def lbfgs_step_streamed(cons, st: LBFGS) -> LBFGS:
    D = lbfgs_direction(st)
    t = _line_search_streamed(cons, st.X, D)
    X = st.X + t * D
    g, rsum, mmin = cons.hinge(X)
    return lbfgs_update(st, X, st.M, g, rsum, mmin > 0, t)


def lbfgs_step(op: Linear, st: LBFGS) -> LBFGS:
    D = lbfgs_direction(st)
    dM = op.apply(D)
    t, stored = line_search(st.M, dM, jnp.vdot(st.g, D))
    X = st.X + t * D
    M = st.M + t * dM
    res = jnp.maximum(1.0 - M, 0.0)
    g = -2.0 * op.adjoint(res)
    return lbfgs_update(st, X, M, g, jnp.sum(res), stored, t)


def lbfgs_update(st: LBFGS, X, M, g, rsum, stored, t) -> LBFGS:
    """The state at the new iterate `X` (margins `M`, gradient `g`, residual sum `rsum`, reached
    with step `t`): the pair `(s, y)` enters the history where `s . y > 0`, and a step of 0
    restarts it."""
    s, y = X - st.X, g - st.g
    sy = jnp.vdot(s, y)
    ok = sy > 1e-12 * jnp.sqrt(jnp.vdot(s, s) * jnp.vdot(y, y))
    m = st.SY.shape[0]
    j = st.k % m
    S = st.S.at[j].set(jnp.where(ok, s, st.S[j]))
    Y = st.Y.at[j].set(jnp.where(ok, y, st.Y[j]))
    Sf, Yf = S.reshape(m, -1), Y.reshape(m, -1)
    sy_col = jnp.matmul(Sf, y.ravel(), precision=HIGHEST)  # s_i . y_new
    ys_row = jnp.matmul(Yf, s.ravel(), precision=HIGHEST)  # s_new . y_i
    yy = jnp.matmul(Yf, y.ravel(), precision=HIGHEST)
    SY = jnp.where(ok, st.SY.at[:, j].set(sy_col).at[j, :].set(ys_row), st.SY)
    YY = jnp.where(ok, st.YY.at[:, j].set(yy).at[j, :].set(yy), st.YY)
    k = jnp.where(ok, st.k + 1, jnp.where(t > 0, st.k, 0))  # no progress: restart the memory
    return LBFGS(X, M, g, rsum, stored, S, Y, SY, YY, k)


def best_multiple(slopes, W0):
    """The multiple `s W0` of a warm start that minimises the squared hinge along it,
    `s = argmin_{t >= 0} L(t W0)`, from `slopes(ts) -> (phi'(ts), phi''(ts))` of
    `phi(t) = L(t W0)` (`_bracketed_root`). A memory that stores a prefix of the task has margins
    far above 1 on most of its constraints, so at its own scale it is a poor start; its best
    multiple is no worse than `W = 0 = 0 W0`, and `W0 = 0` stays 0 (a cold start).

    **Returns:** `s W0`."""
    return _bracketed_root(slopes, W0.dtype) * W0


def dense_slopes(M, mask):
    """`slopes` for `best_multiple` from the margins `M` of `W0` (masked entries ignored):
    `phi'(t) = -2 sum M (1 - t M)_+`, `phi''(t) = 2 sum_{1 - t M > 0} M^2`."""

    M = jnp.where(mask, M, 0.0)

    def at(t):
        r = jnp.maximum(1.0 - t * M, 0.0)
        return -2.0 * jnp.sum(M * r), 2.0 * jnp.sum(jnp.where(r > 0, M * M, 0.0))

    return lambda ts: lax.map(at, ts)


def margin_bound(rsum, g, a):
    """The multiplier bound `|grad L| / (2 a sum r)` on the best normalised margin."""
    return jnp.where(rsum > 0, jnp.sqrt(jnp.vdot(g, g)) / (2 * a * jnp.where(rsum > 0, rsum, 1.0)), jnp.inf)


class AbstractMarginOperator(eqx.Module):
    """The margins `M(X)` of the variable being optimised, as L-BFGS needs them."""

    @abc.abstractmethod
    def init(self, X, memory: int) -> LBFGS:
        """The L-BFGS state at `X` with a history of `memory` pairs."""

    @abc.abstractmethod
    def step(self, st: LBFGS) -> LBFGS:
        """One L-BFGS iteration: direction, line search, update."""

    @abc.abstractmethod
    def warm(self, W0):
        """The start of a warm decision: the best multiple of `W0` (`best_multiple`)."""


class Linear(AbstractMarginOperator):
    """Dense margins: a linear map `X -> M` (`apply`), its adjoint, and the mask of the real
    constraints (the margins are held in the state)."""

    apply: Callable
    adjoint: Callable
    mask: Array

    def init(self, X, memory: int) -> LBFGS:
        return lbfgs_init(self, X, memory)

    def step(self, st: LBFGS) -> LBFGS:
        return lbfgs_step(self, st)

    def warm(self, W0):
        return best_multiple(dense_slopes(self.apply(W0), self.mask), W0)


class Streamed(AbstractMarginOperator):
    """Margins never formed: `cons` gives the squared hinge's gradient, residual sum and least
    margin at `X` (`hinge`) and the line search's slopes (`line_slopes`) by tiled passes."""

    cons: Any

    def init(self, X, memory: int) -> LBFGS:
        return streamed_init(self.cons, X, memory)

    def step(self, st: LBFGS) -> LBFGS:
        return lbfgs_step_streamed(self.cons, st)

    def warm(self, W0):
        return best_multiple(lambda ts: self.cons.line_slopes(jnp.zeros_like(W0), W0, ts), W0)


class Bilinear(AbstractMarginOperator):
    """Margins of a product `W = Q R^T` in its factors `X = (Q, R)` (stacked, `(2, d, d)`, the
    columns beyond the rank zero): `M(X) = apply(Q R^T)` with `apply` linear in `W`. Along a
    direction `D = (dQ, dR)` the margins are quadratic,

        M(X + t D) = M + t apply(dQ R^T + Q dR^T) + t^2 apply(dQ dR^T),

    so the line search stays exact in three margin passes; the gradient of the squared hinge is
    `(G R, G^T Q)` with `G` its gradient in `W` (columns that are zero in `Q` and `R` stay zero).
    With `free_r` false `R` stays where it is (its gradient is taken as zero): from `R = I` that
    is L-BFGS on a full-rank `W = Q`, with linear margins. Otherwise the problem is not convex:
    L-BFGS finds a stationary point, which certifies nothing."""

    apply: Callable
    adjoint: Callable
    mask: Array
    free_r: Array  # scalar boolean: whether R moves

    def _grad(self, X, res):
        G = -2.0 * self.adjoint(res)
        Q, R = X[0], X[1]
        gR = jnp.where(self.free_r, tmatmul(G, Q), 0.0)
        return jnp.stack([jnp.matmul(G, R, precision=HIGHEST), gR])

    def init(self, X, memory: int) -> LBFGS:
        W = jnp.matmul(X[0], X[1].T, precision=HIGHEST)
        M = jnp.where(self.mask, self.apply(W), 2.0)
        res = residual(M, self.mask)
        rsum, mmin = hinge_summary(M, self.mask)
        return fresh_state(X, M, self._grad(X, res), rsum, mmin > 0, memory)

    def step(self, st: LBFGS) -> LBFGS:
        D = lbfgs_direction(st)
        (Q, R), (dQ, dR) = st.X, D
        mm = lambda A, B: jnp.matmul(A, B.T, precision=HIGHEST)
        M1 = self.apply(mm(dQ, R) + mm(Q, dR))
        M2 = self.apply(mm(dQ, dR))
        t, stored = line_search(st.M, M1, jnp.vdot(st.g, D), dM2=M2)
        X = st.X + t * D
        M = st.M + t * (M1 + t * M2)
        res = jnp.maximum(1.0 - M, 0.0)
        return lbfgs_update(st, X, M, self._grad(X, res), jnp.sum(res), stored, t)

    def warm(self, W0):
        raise NotImplementedError("a factored decision starts from the truncated full-rank solution")
