"""The working-set decider: certified storability at the cost of the few constraints that matter
(docs/science.md, 2.7, "The working set").

At a minimiser of the squared hinge only a handful of the `p - 1` competitors of each input have
a margin below 1; every other constraint contributes nothing to the loss or its gradient. The
`WorkingSetDecider` minimises the squared hinge restricted to a working set `J` of `k`
competitors per input,

    L_J(W) = sum_mu sum_{rho in J_mu} (1 - <W, A_{mu rho}>)_+^2,

by the dense decider's L-BFGS and line search (`_lbfgs`), at `O(p d^2 + p k d)` per iteration instead
of `O(p^2 d)`. One solver step is up to `outer_every` such inner iterations followed by one
**outer pass** over all `p (p - 1)` margins, tile by tile (`StreamedConstraints`; DP candidates
regenerated from the key or read where materialised: `hold_candidates` generates a batch's into
memory when all of them fit in `HOLD_BYTES`). The pass gives
the least margin of the whole system and, per input, its lowest margins; the next working set
keeps violated constraints first, then the members that still carry a residual, then the
outsiders with one (`_merge`). The L-BFGS pairs are kept across the swap: while `J` holds every
constraint of margin below 1, `L_J` and the full loss agree near the iterate, and so do their
curvatures.

- **Storable** is concluded only by an outer pass: every one of the `p (p - 1)` margins positive
  (then recomputed in float64 over all constraints).
- **Unstorable**: the residuals of `L_J`, extended by zeros outside `J`, are non-negative
  multipliers of the whole system, so `|sum_{i in J} r_i A_i|_F / (a sum r_i)` bounds the best
  normalised margin `gamma*` of the whole system from above, whatever `J` is: a subsystem that
  cannot be stored with margin `tol` proves the same of the system. The bound is recomputed in
  float64 from `W` and `J`; `a` is the root-mean-square norm of all constraints.

`k` is the one static shape of the working set: `working_set` competitors per input. It must
hold the busiest input's constraints below margin 1, which grow with `p`: `working_set_size` is
32 below `WIDE_FROM_D` = 128 and 64 from there, unless the config sets it (docs/decisions.md,
"working_set").
Each outer pass counts,
per input, the constraints of margin below 1; an input with more than `k` of them means `L_J`
misses part of the loss. That slows convergence but never a certificate. When it lasts
`_PATIENCE` passes, the instance stops (reason `_GROW`) and `conclude_working_set` continues it from its
`W` with `k` doubled, up to `p`. Where `|W|` grows so large that float32 no longer resolves the
margins, the outer pass and the working set can disagree on a margin's sign; the instance then
stops (reason `_RESOLUTION`) and continues in float64.
"""

from __future__ import annotations

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Bool, Float, Int

from .._validate import check_int
from ._certificate import certified_status, settle
from ._constraints import compaction, HIGHEST, StreamedConstraints
from ._decide import DecideConfig, Decision, decision, to64
from ._lbfgs import LBFGS, Linear, margin_bound, tmatmul
from ._runner import AbstractEnsembleSolver, run_ensemble
from ._status import RUNNING, STORABLE, UNDECIDED, UNSTORABLE


# Why an instance stopped early for the working set's own reasons (`_WSState.reason`; its status
# is then undecided until `conclude_working_set` acts on the reason).
#
# An instance stops to have its working set doubled (reason _GROW) once an input has had more
# active constraints than k at _PATIENCE consecutive outer passes, after the first _START inner
# iterations (from W = 0 every margin starts below 1, so early passes always overflow).
_GROW = 3
_PATIENCE = 5
_START = 50

# An instance stops (reason _RESOLUTION) where the working set's margins are all positive but
# the outer pass at the same `W` found one that is not: two evaluations of the same margins
# disagree in sign, so the scores are so large that float32 no longer resolves the margins
# (scores 1/16 apart at d = 192, p = 3679). Without it the next step would take no inner
# iteration, the pass would see the same `W`, and so on until the budget.
_RESOLUTION = 4


WIDE_FROM_D = 128

# The most margins an outer pass holds per instance (a row block against all columns).
_SELECT_FLOATS = 2**21

# The most bytes of DP candidates a search batch holds in memory (`hold_candidates`); otherwise
# every outer pass regenerates all `p^2 d` of them from the key (docs/decisions.md, "HOLD_BYTES").
HOLD_BYTES = 10 * 2**30


def working_set_size(config: DecideConfig, d: int) -> int:
    """Competitors per input `k`: `config.working_set`, or by `d` where that is `None` (32 below
    `WIDE_FROM_D`, 64 from there; see the module docstring)."""
    if config.working_set is not None:
        return config.working_set
    return 64 if d >= WIDE_FROM_D else 32


class _WSInstance(eqx.Module):
    cons: StreamedConstraints
    W0: Float[Array, "d d"]


class _WSState(eqx.Module):
    opt: LBFGS  # L-BFGS on L_J; `M` holds the (P, k) margins of the working set
    J: Int[Array, "P k"]  # the working set: competitors of each input
    C: Float[Array, "P k d"]  # their candidates c^(mu)_J
    valid: Bool[Array, "P k"]  # real constraints of J (rows and columns < p, not the target)
    status: Int[Array, ""]  # a `Status`, or RUNNING
    reason: Int[Array, ""]  # why it stopped undecided before its budget: 0 (none), _GROW, _RESOLUTION
    over: Int[Array, ""]  # consecutive outer passes at which an input had more than k active
    total: Int[Array, ""]  # inner iterations (at least one charged per step)
    a: Float[Array, ""]


def working_set_operator(cons: StreamedConstraints, C, valid) -> Linear:
    """Margins of the working set and their adjoint: `M[mu, j] = v_mu . (u_mu - c^(mu)_{J[mu, j]})`,
    `v = E W^T`; `adjoint(R) = sum R[mu, j] A_{mu J[mu, j]} = X^T E`,
    `X[mu] = (sum_j R[mu, j]) u_mu - sum_j R[mu, j] c^(mu)_{J[mu, j]}`."""
    E, U = cons.task.inputs, cons.task.targets

    def apply(W):
        V = jnp.matmul(E, W.T, precision=HIGHEST)
        s = jnp.einsum("pd,pkd->pk", V, C, precision=HIGHEST)
        return jnp.where(valid, jnp.sum(V * U, axis=1)[:, None] - s, 0.0)

    def adjoint(R):
        X = R.sum(axis=1)[:, None] * U - _weighted_sum(R, C)
        return tmatmul(X, E)

    return Linear(apply, adjoint, valid)


def _weighted_sum(R, C, block: int = 16):
    """`sum_j R[mu, j] C[mu, j]` in products and sums over blocks of `block` columns: on XLA's
    CPU backend a batched dot reads `C` at about half the memory bandwidth, and one sum over all
    `k` columns is several times slower still for some shapes (k = 48 or 64); blocks of 16 ran at
    the bandwidth for every shape measured."""
    k = C.shape[1]
    out = jnp.zeros((C.shape[0], C.shape[2]), C.dtype)
    for j in range(0, k, block):
        out = out + jnp.sum(R[:, j : j + block, None] * C[:, j : j + block], axis=1)
    return out


def outer_pass(cons: StreamedConstraints, W, k: int):
    """One pass over every constraint at `W`, tile by tile: the least margin, per input the `k`
    competitors of lowest margin (`(P, k)` columns; `inf` margins where fewer than `k` are real),
    and per input the number of margins below 1.

    **Returns:** `(least margin, J, margins of J, active counts)`."""
    task = cons.task
    P = task.p
    V = jnp.matmul(task.inputs, W.T, precision=HIGHEST)
    dtype = W.dtype
    if not task.shared and not task.streams_only:
        # materialised DP candidates: one contraction over them, not a gather per tile
        idx = jnp.arange(P)
        real = idx < cons.p
        valid = real[:, None] & real[None, :] & (idx[:, None] != idx[None, :])
        S = task.score_matrix(V, HIGHEST)
        M = jnp.where(valid, jnp.diagonal(S)[:, None] - S, jnp.inf)
        neg, J = lax.top_k(-M, k)
        return jnp.min(M), J.astype(jnp.int32), -neg, jnp.sum(M < 1.0, axis=1).astype(jnp.int32)
    # a row block's margins against all `P` columns, then one `top_k` per row: over whole
    # rows it is several times cheaper than merging a running top-`k` with every tile
    B, R0, _, nb = cons.tiling()
    width = nb * B
    R = max(1, min(R0, _SELECT_FLOATS // width))
    nr = -(-P // R)

    def fn(carry, buf, r, rows, cols, valid, scores, C):
        M = jnp.where(valid, cons._targets(V, rows)[:, None] - scores[0], jnp.inf)
        return carry, lax.dynamic_update_slice_in_dim(buf, M, cols[0], 1)

    def row_done(carry, buf, r, rows):
        Vals, Idx, Act = carry
        neg, idx = lax.top_k(-buf, k)
        act = jnp.sum(buf < 1.0, axis=1).astype(jnp.int32)
        return (
            lax.dynamic_update_slice_in_dim(Vals, -neg, r * R, 0),
            lax.dynamic_update_slice_in_dim(Idx, idx.astype(jnp.int32), r * R, 0),
            lax.dynamic_update_slice_in_dim(Act, act, r * R, 0),
        )

    init = (
        jnp.zeros((nr * R, k), dtype),
        jnp.zeros((nr * R, k), jnp.int32),
        jnp.zeros((nr * R,), jnp.int32),
    )
    row_init = lambda R: jnp.full((R, width), jnp.inf, dtype)
    Vals, Idx, Act = cons.fold([V], fn, init, row_init, row_done, rows=R)
    Vals, Idx, Act = Vals[:P], Idx[:P], Act[:P]
    return jnp.min(Vals[:, 0]), Idx, Vals, Act


def hold_candidates(cons: StreamedConstraints, budget: int | None = None) -> StreamedConstraints:
    """A batch of streamed DP constraints whose candidates are generated from the key, with the
    `(P, P, d)` candidates of every instance held in memory instead, where all of them fit in
    `budget` bytes (else, and for the OP, `cons` as it is). The numbers are the same: a held
    candidate is the generated one.

    **Arguments:** `cons`: `StreamedConstraints` with a leading ensemble axis; `budget`: bytes
    (default `HOLD_BYTES`).

    **Returns:** `StreamedConstraints`."""
    budget = HOLD_BYTES if budget is None else budget
    task = cons.task
    n, P, d = task.inputs.shape
    if task.shared or not task.streams_only or n * P * P * d * task.inputs.dtype.itemsize > budget:
        return cons
    held = jnp.zeros((n, P, P, d), task.inputs.dtype)
    rows = min(P, max(1, HOLD_BLOCK // (P * d)))
    for i in range(n):
        one = jax.tree.map(lambda x: x[i], task)
        for r0 in range(0, P, rows):
            held = _hold_rows(held, one, i, min(r0, P - rows), rows)
    task = eqx.tree_at(lambda t: t.materialised, task, held, is_leaf=lambda x: x is None)
    return dataclasses.replace(cons, task=task, held=True)


# Floats of candidates generated per call of `_hold_rows`: generating a block takes a few times its size in
# temporaries (random bits, the draw, the target substituted on the diagonal), which for a whole
# (P, P, d) table at d = 192 asked for 41 GB.
HOLD_BLOCK = 2**25


@functools.partial(jax.jit, donate_argnums=0, static_argnums=4)
def _hold_rows(held, task, i, r0, rows):
    # rows r0 .. r0 + rows of instance i's table, written into the donated batch buffer: no
    # second copy of the batch (a last block that would overrun starts earlier and rewrites rows)
    idx = jnp.arange(held.shape[1])
    block = task.candidates((r0 + jnp.arange(rows))[:, None], idx[None, :])
    return jax.lax.dynamic_update_slice(held, block[None], (i, r0, 0, 0))


def cast64(cons: StreamedConstraints) -> StreamedConstraints:
    """`cons` in float64 (`to64`), but for the candidates `hold_candidates` added: they keep their
    dtype, and each tile is cast as it is read (exact: the same numbers, without a float64 copy of
    the batch's candidates)."""
    if not cons.held:
        return jax.tree.map(to64, cons)
    held = cons.task.materialised
    out = jax.tree.map(to64, eqx.tree_at(lambda c: c.task.materialised, cons, None))
    return eqx.tree_at(lambda c: c.task.materialised, out, held, is_leaf=lambda x: x is None)


def drop_candidates(cons: StreamedConstraints) -> None:
    """Free the candidates `hold_candidates` added to `cons` now (`cons` is unusable after), so
    that a search re-padding its batch never holds two batches of them."""
    if cons.held:
        cons.task.materialised.delete()


def _gather(cons: StreamedConstraints, J):
    """The candidates `c^(mu)_{J[mu, j]}`, `(P, k, d)`, and the mask of the real constraints."""
    task = cons.task
    rows = jnp.arange(task.p)[:, None]
    real = rows < cons.p
    valid = real & (J < cons.p) & (J != rows)
    C = task.candidates(rows, jnp.minimum(J, task.p - 1))
    return jnp.where(valid[..., None], C, task.targets[:, None, :]), valid


def _merge(J, M, valid, J_pass, M_pass):
    """The next working set: per input, the violated constraints (margin <= 0, members or not)
    first, then the members that still carry a residual (margin below 1), then the outsiders with
    one, then the lowest of the rest. An input with more than `k` residual members keeps them, so
    `L_J` stays fixed there and L-BFGS converges on it instead of cycling; a violation outside a
    satisfied set always enters it, so a step never stalls."""
    k = J.shape[1]
    seen = jnp.any(J_pass[:, :, None] == jnp.where(valid, J, -1)[:, None, :], axis=2)

    def key(m, tier):
        # the tier first, then the margin (squashed into the tier's unit interval)
        return jnp.where(jnp.isfinite(m), tier + 0.5 * (1.0 + jnp.tanh(m / 4.0)), jnp.inf)

    member = jnp.where(valid, key(M, jnp.where(M <= 0, 0.0, jnp.where(M < 1.0, 1.0, 3.0))), jnp.inf)
    outsider = jnp.where(
        seen, jnp.inf, key(M_pass, jnp.where(M_pass <= 0, 0.0, jnp.where(M_pass < 1.0, 2.0, 4.0)))
    )
    _, pos = lax.top_k(-jnp.concatenate([member, outsider], axis=1), k)
    return jnp.take_along_axis(jnp.concatenate([J, J_pass], axis=1), pos, axis=1)


class WorkingSetDecider(AbstractEnsembleSolver):
    """Squared-hinge L-BFGS on a working set with outer passes; see the module docstring."""

    config: DecideConfig
    k: int = eqx.field(static=True)
    warm: bool = eqx.field(static=True, default=False)  # W0 given: start from its best multiple

    def swap(self, cons, opt: LBFGS, J):
        """The state of `opt` on the working set `J` (margins, gradient and residual sum re-taken;
        the L-BFGS pairs kept)."""
        C, valid = _gather(cons, J)
        op = working_set_operator(cons, C, valid)
        M = jnp.where(valid, op.apply(opt.X), 2.0)
        res = jnp.where(valid, jnp.maximum(1.0 - M, 0.0), 0.0)
        g = -2.0 * op.adjoint(res)
        opt = eqx.tree_at(lambda o: (o.M, o.g, o.rsum, o.stored), opt, (M, g, jnp.sum(res), jnp.min(M) > 0))
        return opt, C, valid

    def init(self, inst: _WSInstance) -> _WSState:
        cons = inst.cons
        W0 = inst.W0
        cold = jnp.all(W0 == 0)
        # from W = 0 every margin is 0: the first working set is that of the Hebbian memory
        real = (jnp.arange(cons.task.p) < cons.p)[:, None]
        hebb = tmatmul(cons.task.targets * real, cons.task.inputs)
        mmin, J, _, _ = outer_pass(cons, jnp.where(cold, hebb, W0), self.k)
        C, valid = _gather(cons, J)
        op = working_set_operator(cons, C, valid)
        # a warm start: the best multiple of W0 for L_J (J from W0's own lowest margins)
        opt = op.init(op.warm(W0) if self.warm else W0, self.config.memory)
        zero = jnp.array(0, jnp.int32)
        status = jnp.where(~cold & (mmin > 0), STORABLE, RUNNING).astype(jnp.int32)
        return _WSState(opt, J, C, valid, status, zero, zero, zero, cons.rms_norm())

    def step(self, inst: _WSInstance, st: _WSState) -> _WSState:
        cfg = self.config
        cons = inst.cons
        op = working_set_operator(cons, st.C, st.valid)

        def cond(c):
            opt, i = c
            return (
                (i < cfg.outer_every)
                & ~opt.stored
                & (margin_bound(opt.rsum, opt.g, st.a) >= cfg.tol / 2)
                & (st.total + i < cfg.max_iter)
            )

        opt, i = lax.while_loop(cond, lambda c: (op.step(c[0]), c[1] + 1), (st.opt, jnp.array(0)))
        # a step charges at least one iteration, so the budget ends every decision
        total = st.total + jnp.maximum(i, 1).astype(jnp.int32)
        unstorable = margin_bound(opt.rsum, opt.g, st.a) < cfg.tol / 2
        mmin, J_pass, vals, act = outer_pass(cons, opt.X, self.k)
        J = _merge(st.J, opt.M, st.valid, J_pass, vals)
        new, C, valid = self.swap(cons, opt, J)
        unresolved = new.stored & (mmin <= 0)
        # an unstorable certificate lives on the working set that gave it: keep that one
        keep = lambda a, b: jnp.where(unstorable, a, b)
        opt = jax.tree.map(keep, opt, new)
        over = jnp.where(jnp.max(act) > self.k, st.over + 1, 0)
        grow = (over >= _PATIENCE) & (total >= _START) & (self.k < cons.task.p - 1)
        concluded = unstorable | (mmin > 0) | (total >= cfg.max_iter)
        reason = jnp.where(concluded, 0, jnp.where(grow, _GROW, jnp.where(unresolved, _RESOLUTION, 0)))
        status = jnp.where(
            unstorable,
            UNSTORABLE,
            jnp.where(
                mmin > 0, STORABLE, jnp.where((total >= cfg.max_iter) | (reason > 0), UNDECIDED, RUNNING)
            ),
        )
        return _WSState(
            opt,
            keep(st.J, J),
            keep(st.C, C),
            keep(st.valid, valid),
            status.astype(jnp.int32),
            reason.astype(jnp.int32),
            over,
            total,
            st.a,
        )

    def done(self, st: _WSState) -> Bool[Array, ""]:
        return st.status != RUNNING

    def weight(self, st: _WSState):
        return st.opt.X


def working_set_instances(cons: StreamedConstraints, *, W0=None, config: DecideConfig = DecideConfig()):
    """The `WorkingSetDecider` and its batch of instances for streamed constraints `cons`
    (leading ensemble axis); `W0` warm starts (each from its best multiple; default zero)."""
    n, P, d = cons.inputs.shape
    k = min(check_int("working_set", working_set_size(config, d), 1), P)
    warm = W0 is not None
    W0 = jnp.zeros((n, d, d), cons.inputs.dtype) if W0 is None else jnp.asarray(W0, cons.inputs.dtype)
    return WorkingSetDecider(config, k, warm), _WSInstance(cons, W0)


@jax.jit
def _certify64(cons: StreamedConstraints, C, valid, W):
    """Float64: the normalised least margin of `W` over every constraint, and the bound of the
    working set's multipliers `(1 - M_J)_+` extended by zeros."""
    mmin = cons.least_margin(W)
    a = cons.rms_norm()
    op = working_set_operator(cons, C, valid)
    r = jnp.where(valid, jnp.maximum(1.0 - op.apply(W), 0.0), 0.0)
    G = op.adjoint(r)
    rsum = jnp.sum(r)
    bound = jnp.where(rsum > 0, jnp.linalg.norm(G) / (a * jnp.where(rsum > 0, rsum, 1.0)), jnp.inf)
    wn = jnp.linalg.norm(W)
    return mmin / (jnp.maximum(wn, jnp.finfo(W.dtype).tiny) * a), bound


@jax.jit
def _certify_batch64(cons, C, valid, W):
    # one program per batch shape, traced once (a vmap built per call is traced at every call)
    return jax.vmap(_certify64)(cast64(cons), to64(C), valid, to64(W))


def verify_working_set(inst: _WSInstance, st: _WSState, tol: float):
    """Both certificates of a batch recomputed in float64: `(status, margin, margin_bound)`;
    storable when every one of the `p (p - 1)` margins is positive, else unstorable when the
    working set's multipliers bound `gamma*` below `tol`."""
    with jax.enable_x64(True):
        margin, bound = _certify_batch64(inst.cons, st.C, st.valid, st.opt.X)
        margin, bound = np.asarray(margin).copy(), np.asarray(bound).copy()
    return certified_status(margin, bound, tol), margin, bound


def conclude_working_set(solver: WorkingSetDecider, inst: _WSInstance, st: _WSState) -> Decision:
    """Certify finished instances in float64 (`verify_working_set`); a float32 near-tie whose
    certificate fails its recheck, or an instance whose margins float32 no longer resolves
    (`_RESOLUTION`), is continued in float64 from where it stopped, and stays undecided if that
    one's certificate fails its recheck too."""
    config = solver.config
    status, margin, bound = verify_working_set(inst, st, config.tol)
    iterations = np.array(st.total)
    W = np.asarray(st.opt.X)
    solver_status, reason = np.asarray(st.status), np.array(st.reason)
    grow = np.flatnonzero(reason == _GROW)
    if grow.size:
        # an input kept more active constraints than k: continue from W with k doubled
        k = min(2 * solver.k, int(inst.cons.task.p))
        sub = jax.tree.map(lambda x: x[grow], inst)
        sub = _WSInstance(sub.cons, jnp.asarray(W[grow], W.dtype))
        bigger = WorkingSetDecider(config, k)
        st2, _ = run_ensemble(bigger, sub, chunk=config.chunk, early=True, **compaction(sub.cons))
        dec = conclude_working_set(bigger, sub, st2)
        status[grow], margin[grow], bound[grow] = dec.status, dec.margin, dec.margin_bound
        iterations[grow] += dec.iterations
        W = W.astype(dec.weight.dtype)
        W[grow] = dec.weight
        solver_status = solver_status.copy()
        solver_status[grow], reason[grow] = dec.status, 0

    def rerun(idx):
        sub = _WSInstance(cast64(jax.tree.map(lambda x: x[idx], inst.cons)), to64(W[idx]))
        st64, _ = run_ensemble(solver, sub, chunk=config.chunk, early=True, **compaction(sub.cons))
        checked = verify_working_set(sub, st64, config.tol)
        return np.asarray(st64.status), np.asarray(st64.total), np.asarray(st64.opt.X), checked

    # float32 could not resolve the margins: float64 continues (in float64 the recheck decides)
    status, W = settle(
        status,
        margin,
        bound,
        iterations,
        W,
        solver_status,
        rerun=rerun,
        can_rerun=inst.cons.inputs.dtype != jnp.float64,
        unresolved=reason == _RESOLUTION,
    )
    return decision(status, margin, bound, iterations, W, config.tol)


@eqx.filter_jit
def resize_working_set(st: _WSState, P: int) -> _WSState:
    """States of a batch re-padded to `P` rows (instances with `p <= P`: the rows that enter or
    leave are not real, so their working-set entries are masked)."""
    n, P0, k = st.J.shape
    if P == P0:
        return st
    if P < P0:
        cut = lambda x: x[:, :P]
        return eqx.tree_at(
            lambda s: (s.opt.M, s.J, s.C, s.valid), st, (cut(st.opt.M), cut(st.J), cut(st.C), cut(st.valid))
        )
    pad = lambda x, v: jnp.pad(x, ((0, 0), (0, P - P0)) + ((0, 0),) * (x.ndim - 2), constant_values=v)
    return eqx.tree_at(
        lambda s: (s.opt.M, s.J, s.C, s.valid),
        st,
        (pad(st.opt.M, 2.0), pad(st.J, 0), pad(st.C, 0.0), pad(st.valid, False)),
    )
