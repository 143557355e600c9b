"""The certified tail-average decider (docs/science.md, 2.6 and 2.7, "The tail average").

Under the tail-average criterion input `mu` is stored when its target's score beats the mean of
its `k = ceil(r (p - 1))` highest competitor scores. In the top-1 margins
`M[mu, rho] = <W, A_{mu rho}>` that is a positive **tail margin**

    t_mu(W) = (1/k) (sum of the k smallest M[mu, .]) = max_s [ s - (1/k) sum_rho (s - M[mu, rho])_+ ],

a concave, piecewise-linear function of `W`. Storing all `p` inputs is the strict system
`t_mu(W) > 0`, scale-free and convex. With a scale variable `s_mu` per input, `t_mu >= 1` holds
as soon as `h_mu(W, s) = sum_rho q(s_mu - M[mu, rho]) - k (s_mu - 1) <= 0`, where `q >= (.)_+`
is the ReLU smoothed on `[-delta, delta]` (`q(x) = (x + delta)^2 / (4 delta)` there; `SMOOTH`).
The `TailDecider` minimises the convex, continuously differentiable

    F(W, s) = sum_mu h_mu(W, s)_+^2

by the one L-BFGS (its compact direction and update) with the safeguarded Newton line search on
`F` along the direction (the margins move linearly; `h` is piecewise quadratic in the step). Every
`outer_every` iterations it computes every tail margin and the certificate:

- **Storable**: a `W` with every tail margin positive (recomputed in float64).
- **Unstorable** (Gordan): per input a weight `lambda_mu = h_mu+ / sum h+` and weights
  `w_mu` on its competitors in `[0, 1/k]` summing to 1, taken from `q'(s_mu - M[mu, .]) / k` and
  brought onto that capped simplex (`capped_weights`). Since `t_mu(W) <= <W, sum_rho w_{mu rho}
  A_{mu rho}>` for any such `w_mu` (the tail average is the least of these averages), every unit
  `W` has `min_mu t_mu(W) <= |sum_mu lambda_mu sum_rho w_{mu rho} A_{mu rho}|_F`, which bounds the
  best normalised tail margin `max_{|W|_F = 1} min_mu t_mu(W) / a` (`a` the root-mean-square
  `|A_{mu rho}|_F`, as for top-1). At a minimiser of `F` with `F > 0` the gradient vanishes, so
  the bound does; the instance is unstorable when it is below `tol` (recomputed in float64).

Smoothing changes no decision: `h <= 0` implies `t >= 1`, and a system with a positive tail margin
has `h <= 0` at a large enough multiple of its `(W, s)`, so `F` has a positive minimum exactly when
the system is unstorable. The decider holds the dense `P x P` margins, so it serves the sizes at
which the tail-average capacity is measured (`p` up to a few thousand).
"""

from __future__ import annotations

import math
from fractions import Fraction

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Bool, Float, Int

from .._validate import check_real, InvalidArgument
from ._certificate import certified_status, settle
from ._constraints import compaction, Constraints, HIGHEST, StreamedConstraints
from ._decide import DecideConfig, Decision, decision, to64
from ._lbfgs import fresh_state, LBFGS, lbfgs_direction, lbfgs_update, newton_search
from ._runner import AbstractEnsembleSolver, run_ensemble
from ._status import RUNNING, STORABLE, UNDECIDED, UNSTORABLE


# The half-width `delta` of the smoothed ReLU `q`, in units of the target margin 1
# (docs/decisions.md, "The tail average's smoothing").
SMOOTH = 0.1


def tail_fraction(r) -> Fraction:
    """`r` as an exact fraction (its shortest decimal), so that `k = ceil(r (p - 1))` is computed
    in integers: `0.1 * 30` is `3.0000000000000004` in floating point, whose ceiling is 4."""
    check_real("r", r, low=0.0, low_open=True, high=1.0)
    return Fraction(repr(float(r))).limit_denominator(10**6)


def tail_k(p, r):
    """`k = ceil(r (p - 1))`, the competitors averaged at `p`, at least 1: an int for an int `p`,
    an int32 array for an array (traced or not)."""
    f = tail_fraction(r)
    num, den = f.numerator, f.denominator
    if isinstance(p, (int, np.integer)):
        return max(1, -(-num * (int(p) - 1) // den))
    p = jnp.asarray(p, jnp.int32)
    return jnp.maximum(1, (num * (p - 1) + den - 1) // den).astype(jnp.int32)


def tail_margins(M, mask, k):
    """Per input, the mean of its `k` smallest real margins (`M`, `(P, P)`; `mask` the real
    constraints; `k` traced, at most the real competitors); `inf` for a row with none.

    A row's `k` smallest are those below its `k`-th smallest value `v` plus `v` for the rest:
    one sort per row, no static `k`."""
    Ms = jnp.sort(jnp.where(mask, M, jnp.inf), axis=-1)
    take = jnp.arange(M.shape[-1]) < k
    t = jnp.sum(jnp.where(take, Ms, 0.0), axis=-1) / k
    return jnp.where(jnp.any(mask, axis=-1), t, jnp.inf)


def _q(x, delta):
    return jnp.where(x <= -delta, 0.0, jnp.where(x >= delta, x, (x + delta) ** 2 / (4 * delta)))


def _dq(x, delta):
    return jnp.clip((x + delta) / (2 * delta), 0.0, 1.0)


def capped_weights(x, mask, k, delta):
    """Per input, weights on its competitors in `[0, 1/k]` summing to 1 (a subgradient of its
    tail average), from `q'(x) / k` at `x = s - M`: rows whose weights sum above 1 are scaled
    down, rows below it are filled up in proportion to each weight's room below `1/k` (there
    are at least `k` real competitors, so the room suffices)."""
    w = jnp.where(mask, _dq(x, delta), 0.0) / k
    c = jnp.sum(w, axis=-1, keepdims=True)
    over = c > 1.0
    w = jnp.where(over, w / jnp.where(over, c, 1.0), w)
    room = jnp.where(mask, 1.0 / k - w, 0.0)
    c = jnp.sum(w, axis=-1, keepdims=True)
    total = jnp.sum(room, axis=-1, keepdims=True)
    fill = jnp.where(over, 0.0, (1.0 - c) / jnp.where(total > 0, total, 1.0))
    return w + room * fill


class TailInstance(eqx.Module):
    cons: Constraints
    W0: Float[Array, "d d"]


class TailState(eqx.Module):
    opt: LBFGS  # on X = (W.ravel(), s); `M` holds the P x P margins of W
    status: Int[Array, ""]
    total: Int[Array, ""]  # iterations (at least one charged per step)
    a: Float[Array, ""]


def _split(X, d: int):
    return X[: d * d].reshape(d, d), X[d * d :]


def _hinge(cons: Constraints, k, M, s, delta):
    """`h_mu`, the gradient of `F` in `(W, s)` (flat) and the residual sum `sum h+`."""
    real = jnp.arange(M.shape[0]) < cons.p
    x = s[:, None] - M
    h = jnp.sum(jnp.where(cons.mask, _q(x, delta), 0.0), axis=1) - k * (s - 1.0)
    hp = jnp.where(real, jnp.maximum(h, 0.0), 0.0)
    dq = jnp.where(cons.mask, _dq(x, delta), 0.0)
    gs = 2.0 * hp * (jnp.sum(dq, axis=1) - k)
    gW = -2.0 * cons.adjoint(hp[:, None] * dq)
    return h, jnp.concatenate([gW.ravel(), gs]), jnp.sum(hp)


def _stored(h, cons):
    return jnp.all(jnp.where(jnp.arange(h.shape[0]) < cons.p, h <= 0.0, True))


def _line_search(cons, k, M, dM, s, ds, slope0, delta):
    """The step along `(dW, ds)` (margins `M + t dM`, scales `s + t ds`) by `newton_search` on
    `phi(t) = F`: `phi' = 2 sum h+ h'`, `phi'' = 2 sum_{h > 0} (h'^2 + h h'')`."""
    real = jnp.arange(M.shape[0]) < cons.p
    dx = jnp.where(cons.mask, ds[:, None] - dM, 0.0)
    x0 = s[:, None] - M

    def slopes(t):
        x = x0 + t * dx
        q = jnp.where(cons.mask, _q(x, delta), 0.0)
        band = cons.mask & (jnp.abs(x) < delta)
        h = jnp.sum(q, axis=1) - k * (s + t * ds - 1.0)
        h1 = jnp.sum(_dq(x, delta) * dx, axis=1) - k * ds
        h2 = jnp.sum(jnp.where(band, dx * dx, 0.0), axis=1) / (2 * delta)
        on = real & (h > 0)
        g = 2.0 * jnp.sum(jnp.where(on, h * h1, 0.0))
        hh = 2.0 * jnp.sum(jnp.where(on, h1 * h1 + h * h2, 0.0))
        return g, hh, jnp.all(jnp.where(real, h <= 0.0, True))

    return newton_search(slopes, slope0, M.dtype)


class TailDecider(AbstractEnsembleSolver):
    """Smoothed tail-average hinge in `(W, s)` by L-BFGS, with a certificate every
    `config.outer_every` iterations; see the module docstring. `num / den = r` exactly."""

    config: DecideConfig
    num: int = eqx.field(static=True)
    den: int = eqx.field(static=True)
    delta: float = eqx.field(static=True, default=SMOOTH)

    def k(self, cons) -> Int[Array, ""]:
        return jnp.maximum(1, (self.num * (cons.p - 1) + self.den - 1) // self.den).astype(jnp.int32)

    def start(self, cons, W):
        """The L-BFGS state at `W`, each scale `s_mu` at its input's `k`-th smallest margin."""
        k = self.k(cons)
        M = jnp.where(cons.mask, cons.margins(W), 0.0)
        Ms = jnp.sort(jnp.where(cons.mask, M, jnp.inf), axis=-1)
        kth = jnp.take_along_axis(Ms, jnp.full((M.shape[0], 1), k - 1), axis=-1)[:, 0]
        s = jnp.where(jnp.isfinite(kth), kth, 0.0)
        h, g, hsum = _hinge(cons, k, M, s, self.delta)
        X = jnp.concatenate([W.ravel(), s])
        return fresh_state(X, M, g, hsum, _stored(h, cons), self.config.memory)

    def certificates(self, cons, X, M, a):
        """`(least tail margin / (|W| a), Gordan bound)` at `X` with margins `M`."""
        d = cons.inputs.shape[-1]
        W, s = _split(X, d)
        k = self.k(cons)
        t = tail_margins(M, cons.mask, k)
        real = jnp.arange(M.shape[0]) < cons.p
        x = s[:, None] - M
        h = jnp.sum(jnp.where(cons.mask, _q(x, self.delta), 0.0), axis=1) - k * (s - 1.0)
        lam = jnp.where(real, jnp.maximum(h, 0.0), 0.0)
        w = capped_weights(x, cons.mask, k, self.delta)
        G = cons.adjoint(lam[:, None] * w)
        lsum = jnp.sum(lam)
        bound = jnp.where(lsum > 0, jnp.linalg.norm(G) / (a * jnp.where(lsum > 0, lsum, 1.0)), jnp.inf)
        wn = jnp.linalg.norm(W)
        return jnp.min(t) / (jnp.maximum(wn, jnp.finfo(W.dtype).tiny) * a), bound

    def init(self, inst: TailInstance) -> TailState:
        cons = inst.cons
        zero = jnp.array(0, jnp.int32)
        opt = self.start(cons, inst.W0)
        a = cons.rms_norm()
        margin, _ = self.certificates(cons, opt.X, opt.M, a)
        status = jnp.where(jnp.any(inst.W0 != 0) & (margin > 0), STORABLE, RUNNING).astype(jnp.int32)
        return TailState(opt, status, zero, a)

    def _iterate(self, cons, k, opt: LBFGS) -> LBFGS:
        d = cons.inputs.shape[-1]
        D = lbfgs_direction(opt)
        dW, ds = _split(D, d)
        _, s = _split(opt.X, d)
        dM = jnp.where(cons.mask, cons.margins(dW), 0.0)
        t, stored = _line_search(cons, k, opt.M, dM, s, ds, jnp.vdot(opt.g, D), self.delta)
        X = opt.X + t * D
        M = opt.M + t * dM
        h, g, hsum = _hinge(cons, k, M, _split(X, d)[1], self.delta)
        return lbfgs_update(opt, X, M, g, hsum, stored, t)

    def step(self, inst: TailInstance, st: TailState) -> TailState:
        cfg = self.config
        cons = inst.cons
        k = self.k(cons)

        def cond(c):
            opt, i = c
            return (i < cfg.outer_every) & ~opt.stored & (st.total + i < cfg.max_iter)

        opt, i = lax.while_loop(
            cond, lambda c: (self._iterate(cons, k, c[0]), c[1] + 1), (st.opt, jnp.array(0))
        )
        total = st.total + jnp.maximum(i, 1).astype(jnp.int32)
        margin, bound = self.certificates(cons, opt.X, opt.M, st.a)
        status = jnp.where(
            margin > 0,
            STORABLE,
            jnp.where(bound < cfg.tol / 2, UNSTORABLE, jnp.where(total >= cfg.max_iter, UNDECIDED, RUNNING)),
        )
        return TailState(opt, status.astype(jnp.int32), total, st.a)

    def done(self, st: TailState) -> Bool[Array, ""]:
        return st.status != RUNNING

    def weight(self, st: TailState):
        """The memories `W` of a batch of states."""
        n, P = st.opt.M.shape[:2]
        d = math.isqrt(st.opt.X.shape[-1] - P)
        return st.opt.X[:, : d * d].reshape(n, d, d)


def tail_instances(cons: Constraints, r, *, W0=None, config: DecideConfig = DecideConfig(), smooth=SMOOTH):
    """The `TailDecider` for the criterion `tail:r` and its batch of instances for dense
    constraints `cons` (leading ensemble axis); `W0` starts (default zero); `smooth`: `delta`."""
    check_real("smooth", smooth, low=0.0, low_open=True)
    if isinstance(cons, StreamedConstraints):
        raise InvalidArgument("the tail-average decider needs dense constraints (p too large for them)")
    n, P, d = cons.inputs.shape
    f = tail_fraction(r)
    W0 = jnp.zeros((n, d, d), cons.inputs.dtype) if W0 is None else jnp.asarray(W0, cons.inputs.dtype)
    return TailDecider(config, f.numerator, f.denominator, float(smooth)), TailInstance(cons, W0)


@eqx.filter_jit
def _certify_batch64(solver: TailDecider, cons, X):
    cons, X = jax.tree.map(to64, cons), to64(X)

    def one(c, x):
        d = c.inputs.shape[-1]
        W, _ = _split(x, d)
        M = jnp.where(c.mask, c.margins(W, HIGHEST), 0.0)
        return solver.certificates(c, x, M, c.rms_norm())

    return jax.vmap(one)(cons, X)


def verify_tail(solver: TailDecider, cons, X, tol: float):
    """Both certificates of a batch recomputed in float64 from `X = (W, s)`: `(status, margin,
    margin_bound)`: storable when every tail margin is positive, else unstorable when the
    multipliers bound the best normalised tail margin below `tol`."""
    with jax.enable_x64(True):
        margin, bound = _certify_batch64(solver, cons, X)
        margin, bound = np.asarray(margin).copy(), np.asarray(bound).copy()
    return certified_status(margin, bound, tol), margin, bound


def conclude_tail(solver: TailDecider, inst: TailInstance, st: TailState) -> Decision:
    """Certify finished instances in float64 (`verify_tail`); a float32 certificate its recheck
    refutes continues in float64 from its `W` (undecided if refuted again)."""
    config = solver.config
    status, margin, bound = verify_tail(solver, inst.cons, st.opt.X, config.tol)
    iterations = np.array(st.total)
    W = np.asarray(solver.weight(st))

    def rerun(idx):
        sub = TailInstance(jax.tree.map(lambda x: to64(x[idx]), inst.cons), to64(W[idx]))
        st64, _ = run_ensemble(solver, sub, chunk=config.chunk, early=True, **compaction(sub.cons))
        checked = verify_tail(solver, sub.cons, st64.opt.X, config.tol)
        return np.asarray(st64.status), np.asarray(st64.total), np.asarray(solver.weight(st64)), checked

    status, W = settle(
        status,
        margin,
        bound,
        iterations,
        W,
        np.asarray(st.status),
        rerun=rerun,
        can_rerun=inst.cons.inputs.dtype != jnp.float64,
    )
    return decision(status, margin, bound, iterations, W, config.tol)


@eqx.filter_jit
def resize_tail(st: TailState, P: int) -> TailState:
    """States of a batch re-padded to `P` rows, for instances whose `p <= P`: the rows and
    columns that enter or leave are not real (masked margins, scales that never move)."""
    n, P0, _ = st.opt.M.shape
    if P == P0:
        return st
    dd = st.opt.X.shape[-1] - P0

    def rows(x, fill):  # the trailing P0 entries of a flat (W, s) vector
        s = x[..., dd:]
        s = (
            s[..., :P]
            if P < P0
            else jnp.pad(s, [(0, 0)] * (s.ndim - 1) + [(0, P - P0)], constant_values=fill)
        )
        return jnp.concatenate([x[..., :dd], s], axis=-1)

    M = st.opt.M[:, :P, :P] if P < P0 else jnp.pad(st.opt.M, ((0, 0), (0, P - P0), (0, P - P0)))
    opt = st.opt
    opt = eqx.tree_at(
        lambda o: (o.X, o.M, o.g, o.S, o.Y),
        opt,
        (rows(opt.X, 0.0), M, rows(opt.g, 0.0), rows(opt.S, 0.0), rows(opt.Y, 0.0)),
    )
    return eqx.tree_at(lambda s: s.opt, st, opt)
