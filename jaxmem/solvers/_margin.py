"""The max-margin memory of a storable instance, certified to a stated gap (docs/science.md, 2.7,
"The max-margin memory").

With `B_i = A_i / a` (`a` the root-mean-square `|A_i|_F`), the hard-margin problem

    minimise |X|_F^2 / 2   subject to   <X, B_i> >= 1 for every constraint i

is strictly convex; its solution `X*` is unique and `gamma* = 1 / |X*|_F` is the best normalised
margin. Its Lagrange dual is `max_{lambda >= 0} sum lambda - |sum lambda_i B_i|^2 / 2`. Both sides
certify:

- **below**: any `X` with every margin positive has `gamma(X) = min_i <X, B_i> / |X|_F <= gamma*`;
- **above**: any `lambda >= 0` has `gamma* <= |sum_i lambda_i B_i|_F / sum_i lambda_i` (Gordan's
  bound of the deciders: `min_i <W, B_i> <= <W, G>` for a convex combination `G`).

`gap = 1 - gamma(X) / bound` is then a certified relative distance from the optimum, and the
solver stops when it is below `MaxMarginConfig.gap`.

The solver is a primal-dual interior-point method (Mehrotra's predictor-corrector) on all
`p (p - 1)` constraints, in float64. Each iteration solves one Newton system in the `n = d^2`
unknowns, `(I + B^T D B) dX = r`, `D = lambda / s`; the constraints are rank one,
`B_{mu rho} = a_{mu rho} e_mu^T / a`, so the matrix is `I + sum_mu G_mu (x) e_mu e_mu^T / a^2`
with `G_mu = sum_rho D_{mu rho} a_{mu rho} a_{mu rho}^T`: `O(p^2 d^2 + p d^4)` to form and
`O(d^6)` to factor (one Cholesky serves both the predictor and the corrector). That is under a
second per iteration at d = 64, and the iteration count (about 20) hardly depends on how
ill-conditioned the problem is near the capacity, where first-order methods crawl. It is meant for
`d <= 64` (the `d^2 x d^2` matrix is 2 GiB at d = 128).

A rank-`m` memory `W = Q R^T` has no convex max-margin problem. From the better of the rank-`m`
truncated SVD of the full-rank optimum and the decider's rank-`m` memory (near the rank-`m`
threshold the truncation often stores nothing), it alternates two convex problems of the same
form: `Q` with `R` fixed (orthonormal columns, so `|Q R^T|_F = |Q|_F`: inputs `R^T e_mu`) and
`R` with `Q` fixed (candidates `Q^T c`). Each is solved exactly, so the margin never decreases. The result
is a certified lower bound on the rank-`m` optimum (an explicit rank-`m` memory); the full-rank bound
is an upper bound on it, and their gap says how far the rank constraint and the local search
leave it below the full-rank optimum.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._models import resolve_kappa
from .._validate import check_int, check_memory, check_real, InvalidArgument
from ._constraints import batch_constraints, Constraints, HIGHEST, task_prefixes
from ._decide import decide_constraints, MAX_TOL, to64
from ._status import STORABLE, UNDECIDED, UNSTORABLE


# converged: the margin is certified within the gap of the best one
CONVERGED, UNCONVERGED = STORABLE, UNDECIDED


class MaxMarginConfig(eqx.Module):
    """Settings of the max-margin solver.

    **Arguments:**

    - `gap`: stop once `1 - margin / margin_bound <= gap` (certified both ways).
    - `max_iter`: interior-point iterations per solve.
    - `tol`: an instance whose upper bound on the normalised margin falls below `tol` is
      unstorable (as `DecideConfig.tol`).
    - `rank_rounds`: alternations of `Q` and `R` for a rank-`m` memory.
    - `active`: a constraint counts as active when its margin is below `1 + active` at the memory
      scaled to least margin 1.
    """

    gap: float = 1e-2
    max_iter: int = 100
    tol: float = 1e-5
    rank_rounds: int = 10
    active: float = 1e-2

    def __check_init__(self):
        check_real("gap", self.gap, low=0.0, low_open=True, high=1.0)
        check_int("max_iter", self.max_iter, 1)
        check_real("tol", self.tol, low=0.0, low_open=True, high=MAX_TOL)
        check_int("rank_rounds", self.rank_rounds, 0)
        check_real("active", self.active, low=0.0, low_open=True, high=1.0)


class MaxMargin(eqx.Module):
    """Max-margin memories of a batch (numpy arrays, host side, float64).

    - `weight`: `(n, d, d)`, the memories scaled so that their least margin is 1 (for rank `m`,
      the product `Q R^T`).
    - `margin`: the normalised least margin `gamma(W)`, a certified lower bound on `gamma*`
      (on the rank-`m` optimum for a factored memory).
    - `margin_bound`: the dual multipliers' certified upper bound on `gamma*` (full rank).
    - `gap`: `1 - margin / margin_bound`.
    - `active`: `(n, P)`, per input the constraints with margin below `1 + config.active` at
      `weight` (rows `>= p` are 0).
    - `status`: 0 converged (`gap <= config.gap`; for rank `m`, the full-rank solve), 1 unstorable
      (`margin_bound < config.tol`), 2 not converged within `max_iter`.
    - `iterations`: interior-point iterations (all solves).
    """

    weight: np.ndarray
    margin: np.ndarray
    margin_bound: np.ndarray
    gap: np.ndarray
    active: np.ndarray
    status: np.ndarray
    iterations: np.ndarray


def newton_matrix(cons: Constraints, D, a):
    """`I + B^T D B` in the `d^2` entries of `X` (row-major): `sum_mu G_mu (x) e_mu e_mu^T / a^2`
    plus the identity, with `G_mu = sum_rho D[mu, rho] a_{mu rho} a_{mu rho}^T` and `D` zero off
    the mask."""
    E = cons.inputs
    P, n2 = E.shape
    C = cons.candidates
    n1 = C.shape[-1]
    sD = D.sum(axis=1)
    if cons.decoupled:
        t = jnp.diagonal(C, axis1=0, axis2=1).T
        Dc = jnp.einsum("mr,mrj->mj", D, C, precision=HIGHEST)
        CDC = jnp.einsum("mrj,mrl->mjl", D[:, :, None] * C, C, precision=HIGHEST)
    else:
        t = C
        Dc = jnp.matmul(D, C, precision=HIGHEST)
        UU = (C[:, :, None] * C[:, None, :]).reshape(P, n1 * n1)
        CDC = jnp.matmul(D, UU, precision=HIGHEST).reshape(P, n1, n1)
    tDc = t[:, :, None] * Dc[:, None, :]
    G = sD[:, None, None] * t[:, :, None] * t[:, None, :] - tDc - jnp.swapaxes(tDc, 1, 2) + CDC
    EE = (E[:, :, None] * E[:, None, :]).reshape(P, n2 * n2)
    H = jnp.matmul(G.reshape(P, n1 * n1).T, EE, precision=HIGHEST)
    H = H.reshape(n1, n1, n2, n2).transpose(0, 2, 1, 3).reshape(n1 * n2, n1 * n2)
    return H / (a * a) + jnp.eye(n1 * n2, dtype=H.dtype)


def _to_boundary(v, dv, mask):
    """The largest step in `(0, 1]` keeping `v + t dv >= 0` on the mask."""
    t = jnp.where(mask & (dv < 0), -v / jnp.where(dv < 0, dv, -1.0), jnp.inf)
    return jnp.minimum(1.0, jnp.min(t))


class _IPM(eqx.Module):
    X: jax.Array
    s: jax.Array
    lam: jax.Array
    lower: jax.Array
    upper: jax.Array
    it: jax.Array


def _normalised_margin(cons: Constraints, a, W):
    """`gamma(W) = min_i <W, A_i> / (a |W|_F)` over the real constraints."""
    M = jnp.where(cons.mask, cons.margins(W) / a, jnp.inf)
    return jnp.min(M) / jnp.maximum(jnp.linalg.norm(W), jnp.finfo(W.dtype).tiny)


def _bounds(cons: Constraints, a, X, lam):
    """`(gamma(X), |sum lambda_i B_i| / sum lambda_i)`."""
    lower = _normalised_margin(cons, a, X)
    lsum = jnp.sum(lam)
    G = cons.adjoint(jnp.where(cons.mask, lam, 0.0)) / a
    upper = jnp.where(lsum > 0, jnp.linalg.norm(G) / jnp.where(lsum > 0, lsum, 1.0), jnp.inf)
    return lower, upper


def interior_point(cons: Constraints, a, gap: float, tol: float, max_iter: int) -> _IPM:
    """The hard-margin problem of one instance by Mehrotra's predictor-corrector, float64, from
    `X = 0`, slacks and multipliers 1 (an infeasible start). Stops when the certified gap is at
    most `gap`, the upper bound is below `tol` (unstorable) or after `max_iter` iterations;
    `upper` is the least bound met on the way (every iterate's multipliers are valid)."""
    mask = cons.mask
    f = mask.astype(a.dtype)
    n = jnp.sum(f)
    n1, n2 = cons.candidates.shape[-1], cons.inputs.shape[1]
    B = lambda X: jnp.where(mask, cons.margins(X) / a, 0.0)
    Bt = lambda L: cons.adjoint(jnp.where(mask, L, 0.0)) / a

    def body(st: _IPM) -> _IPM:
        X, s, lam = st.X, st.s, st.lam
        r_d = X - Bt(lam)
        r_p = jnp.where(mask, B(X) - s - 1.0, 0.0)
        D = jnp.where(mask, lam / s, 0.0)
        chol = jax.scipy.linalg.cho_factor(newton_matrix(cons, D, a))
        mu = jnp.sum(s * lam * f) / n

        def direction(q):
            rhs = -r_d - Bt(q / s + D * r_p)
            dX = jax.scipy.linalg.cho_solve(chol, rhs.ravel()).reshape(n1, n2)
            ds = jnp.where(mask, B(dX) + r_p, 0.0)
            return dX, ds, jnp.where(mask, -(q + lam * ds) / s, 0.0)

        _, ds, dl = direction(s * lam * f)
        t = jnp.minimum(_to_boundary(s, ds, mask), _to_boundary(lam, dl, mask))
        mu_aff = jnp.sum((s + t * ds) * (lam + t * dl) * f) / n
        sigma = (mu_aff / mu) ** 3
        dX, ds, dl = direction((s * lam + ds * dl - sigma * mu) * f)
        t = 0.99 * jnp.minimum(_to_boundary(s, ds, mask), _to_boundary(lam, dl, mask))
        X, s, lam = X + t * dX, jnp.where(mask, s + t * ds, 1.0), jnp.where(mask, lam + t * dl, 0.0)
        lower, upper = _bounds(cons, a, X, lam)
        return _IPM(X, s, lam, lower, jnp.minimum(st.upper, upper), st.it + 1)

    def cond(st: _IPM):
        done = ((st.lower > 0) & (st.lower >= (1.0 - gap) * st.upper)) | (st.upper < tol)
        return ~done & (st.it < max_iter)

    dtype = a.dtype
    X0 = jnp.zeros((n1, n2), dtype)
    inf = jnp.asarray(jnp.inf, dtype)
    st = _IPM(X0, jnp.ones(mask.shape, dtype), f, -inf, inf, jnp.array(0, jnp.int32))
    return lax.while_loop(cond, body, st)


@eqx.filter_jit
def _solve_batch(cons: Constraints, a, gap: float, tol: float, max_iter: int):
    return jax.vmap(lambda c, a: interior_point(c, a, gap, tol, max_iter))(cons, a)


@jax.jit
def _rms(cons):
    return jax.vmap(lambda c: c.rms_norm())(cons)


def _truncate(W, m: int):
    """The rank-`m` truncated SVD of each `W` as factors `(Q, R)` with `W ~ Q R^T`."""
    U, s, Vt = np.linalg.svd(W)
    root = np.sqrt(s[:, :m])
    return U[:, :, :m] * root[:, None, :], np.swapaxes(Vt[:, :m, :], 1, 2) * root[:, None, :]


def _rank_phase(cons: Constraints, c64: Constraints, a, W, m: int, cfg: MaxMarginConfig):
    """Alternating exact max-margin solves in `Q` and `R` (host loop over rounds, each solve
    vmapped over the batch) from the rank-`m` truncated SVD of the full-rank optimum `W`, or,
    where that stores nothing, from the decider's rank-`m` memory if it is better; the best
    `W = Q R^T` per instance and the iterations spent."""
    Q, R = _truncate(W, m)
    gamma = np.asarray(_gamma(c64, a, jnp.asarray(np.einsum("nim,njm->nij", Q, R))))
    bad = np.flatnonzero(gamma <= 0)
    if bad.size:
        sub = jax.tree.map(lambda x: x[bad], cons)
        with jax.enable_x64(False):
            W_dec = decide_constraints(sub, rank=m).weight
        Qd, Rd = _truncate(W_dec, m)
        sub64 = jax.tree.map(lambda x: x[bad], c64)
        g_dec = np.asarray(_gamma(sub64, a[bad], jnp.asarray(np.einsum("nim,njm->nij", Qd, Rd))))
        better = g_dec > gamma[bad]
        Q[bad[better]], R[bad[better]] = Qd[better], Rd[better]
    best = np.einsum("nim,njm->nij", Q, R)
    gamma = np.asarray(_gamma(c64, a, jnp.asarray(best)))
    iters = np.zeros(W.shape[0], np.int64)
    tight = min(cfg.gap, 1e-6)
    for r in range(2 * cfg.rank_rounds):
        if r % 2 == 0:  # Q with R fixed: inputs R^T e
            Ro = np.linalg.qr(R)[0]  # orthonormal columns spanning R's
            sub = eqx.tree_at(lambda c: c.inputs, c64, jnp.einsum("npd,ndm->npm", c64.inputs, Ro))
            st = _solve_batch(sub, a, tight, cfg.tol, cfg.max_iter)
            Q, R = np.asarray(st.X), Ro
        else:  # R with Q fixed: candidates Q^T c, X = R^T
            Qo = np.linalg.qr(Q)[0]
            cand = c64.candidates
            sub = eqx.tree_at(lambda c: c.candidates, c64, jnp.einsum("n...d,ndm->n...m", cand, Qo))
            st = _solve_batch(sub, a, tight, cfg.tol, cfg.max_iter)
            Q, R = Qo, np.swapaxes(np.asarray(st.X), 1, 2)
        iters += np.asarray(st.it)
        W_new = np.einsum("nim,njm->nij", Q, R)
        g_new = np.asarray(_gamma(c64, a, jnp.asarray(W_new)))
        better = g_new > gamma
        gain = np.where(better, g_new - gamma, 0.0)
        best[better], gamma = W_new[better], np.where(better, g_new, gamma)
        if r % 2 == 1 and np.all(gain <= 1e-4 * np.abs(gamma)):
            break
    return best, iters


@jax.jit
def _gamma(cons, a, W):
    return jax.vmap(_normalised_margin)(cons, a, W)


@jax.jit
def _active(cons, W, slack):
    def one(c, W):
        M = c.margins(W)
        least = jnp.min(jnp.where(c.mask, M, jnp.inf))
        return jnp.sum(c.mask & (M < (1.0 + slack) * least), axis=1)

    return jax.vmap(one)(cons, W)


def max_margin_constraints(
    cons: Constraints, *, rank: int | None = None, config=MaxMarginConfig()
) -> MaxMargin:
    """`max_margin` on a batch of dense `Constraints` (leading ensemble axis); `rank` is `m` for
    `W = Q R^T`, `None` for full rank."""
    if not isinstance(cons, Constraints):
        raise InvalidArgument("cons must be dense Constraints (batch_constraints(..., stream=False))")
    n, P, d = cons.inputs.shape
    if rank is not None:
        check_int("rank", rank, 1, d)
    # the Newton matrices of the batch (float64, d^2 x d^2) and about three times as much besides
    check_memory("d and the number of tasks", 4 * n * 8.0 * d**4 + 8.0 * n * P * P * d)
    with jax.enable_x64(True):
        c64 = jax.tree.map(to64, cons)
        a = _rms(c64)
        st = _solve_batch(c64, a, config.gap, config.tol, config.max_iter)
        X, lower, upper = np.asarray(st.X), np.asarray(st.lower), np.asarray(st.upper)
        iters = np.asarray(st.it).astype(np.int64)
        status = np.where(
            (lower > 0) & (lower >= (1 - config.gap) * upper),
            CONVERGED,
            np.where(upper < config.tol, UNSTORABLE, UNCONVERGED),
        )
        W = X / np.asarray(a)[:, None, None]
        if rank is not None and rank < W.shape[-1]:
            W, more = _rank_phase(cons, c64, a, W, int(rank), config)
            iters = iters + more
        margin = np.asarray(_gamma(c64, a, jnp.asarray(W)))
        least = margin * np.linalg.norm(W, axis=(1, 2)) * np.asarray(a)
        W = W / np.where(least > 0, least, 1.0)[:, None, None]
        active = np.asarray(_active(c64, jnp.asarray(W), config.active))
    gap = np.where(margin > 0, 1.0 - margin / upper, np.inf)
    return MaxMargin(
        weight=W,
        margin=margin,
        margin_bound=upper,
        gap=gap,
        active=np.where(margin[:, None] > 0, active, 0),
        status=status.astype(np.int32),
        iterations=iters,
    )


def max_margin(
    tasks,
    p=None,
    *,
    model: str = "full",
    kappa: float | None = None,
    config: MaxMarginConfig = MaxMarginConfig(),
) -> MaxMargin:
    """The max-margin memory of each storable task of a batch, certified to `config.gap`.

    **Arguments:**

    - `tasks`: a batch from `make_tasks` (leading ensemble axis), OP or DP.
    - `p`: the prefix of the first `p` associations of each task (an int, or one per task;
      default all of them).
    - `model`: `"full"` or `"factored"` (`W = Q R^T` of rank `m = kappa d`, a local optimum from
      the full-rank one: a certified lower bound on the rank-`m` best margin).
    - `kappa`: the rank fraction of a factored memory.
    - `config`: a `MaxMarginConfig`.

    **Returns:** a `MaxMargin` with one entry per task.
    """
    ps = task_prefixes(tasks, p, model)
    m, _ = resolve_kappa(model, tasks.inputs.shape[-1], kappa)
    cons = batch_constraints(tasks, jnp.asarray(ps), int(ps.max()), stream=False)
    return max_margin_constraints(cons, rank=m if model == "factored" else None, config=config)
