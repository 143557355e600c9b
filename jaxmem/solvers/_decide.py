"""Certified storability decisions (docs/science.md, 2.7).

For a full-rank memory, storing all `p` associations is the strict linear system
`<W, A_i> > 0` over the constraints `i = (mu, rho)`. The `Decider` minimises the convex squared
hinge `L(W) = sum_i (1 - <W, A_i>)_+^2` by L-BFGS (compact form) with a line search (along a
direction `D` the margins move linearly, so `L` is a one-dimensional piecewise quadratic; its
slope is brought to 1% of the initial one by safeguarded Newton steps, one `O(P^2)` pass each).
It stops at the first certificate:

- **storable**: a `W` with every margin positive;
- **unstorable**: at a minimiser with `L > 0`, the residuals `r_i = (1 - <W, A_i>)_+`
  normalised to sum 1 are Gordan multipliers `lambda`, and
  `gamma* <= |sum_i lambda_i A_i|_F / a = |grad L| / (2 a sum r)`, with `gamma*` the best
  normalised margin `max_{|W|_F = 1} min_i <W, A_i> / a` and `a` the root-mean-square `|A_i|_F`.
  The instance is called unstorable when this bound is below `tol`: no `W` stores it with a
  normalised margin above `tol`.

Both certificates are recomputed in float64 from the returned `W` before they count (the
iterations run in the task's dtype at `Precision.HIGHEST`). Anything else is undecided.

For `W = Q R^T` of rank `m` the problem is not convex: a full-rank unstorable certificate carries
over, and a storable one is sought from the balanced factors of the rank-`m` truncated SVD of the
full-rank solution, refined by L-BFGS on the same squared hinge in both factors at once
(`Bilinear`: the margins are quadratic along a direction, so the line search stays exact). That
phase stops, undecided, once its loss has stalled: fallen by less than `rank_progress` of itself
over `rank_window` iterations. If no rank-`m` memory is found the instance is undecided.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Bool, Float, Int

from .._names import MAX_TOL
from .._validate import check_int, check_real, InvalidArgument
from ._certificate import certified_status, settle
from ._constraints import compaction, Constraints, StreamedConstraints
from ._lbfgs import (
    Bilinear,
    hinge_summary,
    LBFGS,
    margin_bound,
    residual,
)
from ._runner import AbstractEnsembleSolver, run_ensemble
from ._status import RUNNING, STATUS, STORABLE, UNDECIDED, UNSTORABLE


# name -> decider class (`AbstractDecider`), filled by `_decider.register_decider`; with "auto"
# these are the values of `DecideConfig.decider`
DECIDERS: dict = {}


class DecideConfig(eqx.Module):
    """Settings of the decision solver.

    **Arguments:**

    - `tol`: an instance is unstorable when its multiplier bound on the best normalised margin
      is below `tol` (the iterations stop at `tol / 2`, leaving room for the float64 recheck).
      At most `MAX_TOL`: "unstorable" then means "no memory with a normalised margin above
      `tol`", and thresholds are those of `tol -> 0`, which a larger `tol` lowers.
    - `max_iter`: L-BFGS iterations per instance (of the full-rank phase of a rank-constrained one).
    - `memory`: L-BFGS history length.
    - `chunk`: the most steps per jitted chunk between compactions of the ensemble (iterations
      of the dense decider; working-set steps of up to `outer_every` inner iterations). A chunk
      also ends where an instance finishes, which then takes its next decision, or leaves the
      batch where the batch is worth compacting (`worth_compacting`; otherwise it is frozen).
    - `rank_window`, `rank_progress`: the rank-`m` phase of a factored memory stops, undecided,
      when its squared hinge has fallen by less than `rank_progress` of itself over
      `rank_window` iterations (a stalled local search; docs/decisions.md, "rank_window").
    - `rank_max_iter`: the most iterations of each start of the rank-`m` phase.
    - `stream`, `block`: the margins are never formed (`StreamedConstraints`, full rank only)
      where `use_stream` says so (`None`) or `stream` forces it; `block` columns per tile.
    - `decider`: `"dense"` (the `Decider`: every iteration touches all `p (p - 1)` margins),
      `"working-set"` (the `WorkingSetDecider`, full rank only: iterations on `working_set`
      competitors per input, outer passes over all of them) or `"auto"` (`choose_decider`).
    - `working_set`: competitors per input in the working set (`k`); `None` chooses by `d`
      (`working_set_size`).
    - `outer_every`: the most inner iterations between two outer passes.
    - `warm_start`: a threshold search starts each full-rank decision of a seed from the best
      multiple of its last storable memory (`best_multiple`), not from `W = 0`. Off by default
      (docs/decisions.md, "warm_start").
      A rank-`m` decision keeps its full-rank phase cold and uses the seed's last rank-`m` memory
      as a second start of its rank phase, once the first has stalled.
    """

    tol: float = 1e-5
    max_iter: int = 20_000
    memory: int = 50
    chunk: int = 50
    rank_window: int = 500
    rank_progress: float = 0.001
    rank_max_iter: int = 8000
    stream: bool | None = None
    block: int = 256
    decider: str = "auto"
    working_set: int | None = None
    outer_every: int = 20
    warm_start: bool = False

    def __check_init__(self):
        check_real("tol", self.tol, low=0.0, low_open=True, high=MAX_TOL)
        check_int("max_iter", self.max_iter, 1)
        check_int("memory", self.memory, 1)
        check_int("chunk", self.chunk, 1)
        check_int("rank_window", self.rank_window, 1)
        check_int("rank_max_iter", self.rank_max_iter, 1)
        check_real("rank_progress", self.rank_progress, low=0.0, high=1.0, high_open=True)
        check_int("block", self.block, 1)
        if self.working_set is not None:
            check_int("working_set", self.working_set, 1)
        check_int("outer_every", self.outer_every, 1)
        if self.decider != "auto" and self.decider not in DECIDERS:
            raise InvalidArgument(f"decider must be one of auto, {', '.join(DECIDERS)}; got {self.decider!r}")
        if not isinstance(self.warm_start, bool):
            raise InvalidArgument(f"warm_start must be True or False, got {self.warm_start!r}")
        if self.stream not in (None, True, False):
            raise InvalidArgument(f"stream must be None, True or False, got {self.stream!r}")


class Decision(eqx.Module):
    """Per-instance outcome of `decide` (numpy arrays, host side).

    - `status`: a `Status` (0 storable, 1 unstorable, 2 undecided within the budget: never
      counted as either).
    - `storable`: `status == Status.STORABLE`.
    - `margin`: normalised min margin `min_i <W, A_i> / (|W|_F a)` of the memory found, in float64:
      a certified lower bound on the best one `gamma*`.
    - `margin_bound`: `|sum_i lambda_i A_i|_F / a` for the final multipliers, in float64: a
      certified upper bound on `gamma*` (`inf` where every residual vanished).
    - `iterations`: solver iterations used (both phases for rank-constrained memories).
    - `weight`: the memories found, `(n, d, d)` in float64; for rank `m`, their product `Q R^T`.
    - `tol`: the tolerance of the unstorable certificate.
    """

    status: np.ndarray
    storable: np.ndarray
    margin: np.ndarray
    margin_bound: np.ndarray
    iterations: np.ndarray
    weight: np.ndarray
    tol: float

    def to_json(self) -> dict:
        fin = lambda x: [float(v) if math.isfinite(v) else None for v in np.asarray(x, float)]
        return dict(
            status=[STATUS[s] for s in self.status],
            storable=self.storable.tolist(),
            margin=fin(self.margin),
            margin_bound=fin(self.margin_bound),
            iterations=self.iterations.tolist(),
            tol=self.tol,
        )


def _certificates(mmin, rsum, g, W, a):
    """Normalised min margin of `W` and the multiplier bound `margin_bound`."""
    wn = jnp.sqrt(jnp.vdot(W, W))
    return mmin / (jnp.maximum(wn, jnp.finfo(W.dtype).tiny) * a), margin_bound(rsum, g, a)


# ---------------------------------------------------------------- the solver


class DecisionInstance(eqx.Module):
    cons: Constraints
    W0: Float[Array, "d d"]
    rank: Int[Array, ""]  # m (d: full rank)


class _State(eqx.Module):
    opt: LBFGS  # full rank: on W; factored: on (Q, R), from (W, I) in the full-rank phase
    phase: Int[Array, ""]  # 0 full rank; rank m: 1 from the truncation, 2 from the warm start
    status: Int[Array, ""]
    it: Int[Array, ""]  # iterations in this phase
    total: Int[Array, ""]
    a: Float[Array, ""]
    ref: Float[Array, ""]  # the rank phase's squared hinge at the start of its progress window
    pending: Bool[Array, ""]  # a factored phase has ended: `settle` starts the next one
    warm: Array | None  # a factored decision's warm start, its best multiple (None at full rank)


def _truncate(W, m_mask):
    """The balanced factors `(U sqrt(s), V sqrt(s))` of the rank-`m` truncated SVD of `W`,
    stacked; `m_mask` keeps the first `m` singular values."""
    U, s, Vt = jnp.linalg.svd(W)
    r = jnp.sqrt(s) * m_mask
    return jnp.stack([U * r, Vt.T * r])


def _bilinear(cons: Constraints, phase) -> Bilinear:
    return Bilinear(cons.margins, cons.adjoint, cons.mask, phase > 0)


class Decider(AbstractEnsembleSolver):
    """Squared-hinge L-BFGS with a safeguarded Newton line search; see the module docstring.

    A factored decision runs every phase on the factors `(Q, R)` (its full-rank phase from
    `(W, I)` with `R` fixed), so one step serves all phases; a phase that ends is marked
    `pending`, and `settle`, once per chunk, starts the next one (its truncated SVD and fresh
    L-BFGS state are then computed once, not at every step)."""

    config: DecideConfig
    factored: bool = eqx.field(static=True)
    warm: bool = eqx.field(static=True, default=False)  # W0 given: start from its best multiple

    def _operator(self, inst: DecisionInstance, st: _State):
        return _bilinear(inst.cons, st.phase) if self.factored else inst.cons.operator()

    def init(self, inst: DecisionInstance) -> _State:
        cons = inst.cons
        op = cons.operator()
        zero, false = jnp.array(0, jnp.int32), jnp.array(False)
        inf = jnp.asarray(jnp.inf, inst.W0.dtype)
        if self.factored:
            # the warm start is the rank phase's second start; the full-rank phase starts cold
            warm = op.warm(inst.W0) if self.warm else jnp.zeros_like(inst.W0)
            eye = jnp.eye(inst.W0.shape[0], dtype=inst.W0.dtype)
            opt = _bilinear(cons, zero).init(jnp.stack([jnp.zeros_like(inst.W0), eye]), self.config.memory)
        else:
            warm = None
            opt = op.init(op.warm(inst.W0) if self.warm else inst.W0, self.config.memory)
        st = _State(opt, zero, jnp.array(RUNNING, jnp.int32), zero, zero, cons.rms_norm(), inf, false, warm)
        return self._judge(inst, st)

    def _judge(self, inst: DecisionInstance, st: _State) -> _State:
        cfg = self.config
        bound = margin_bound(st.opt.rsum, st.opt.g, st.a)
        # a candidate: the float64 recheck of `decide_constraints` is the certificate
        found = st.opt.stored
        unstorable = (st.phase == 0) & (bound < cfg.tol / 2)
        out_of_budget = st.it >= jnp.where(st.phase == 0, cfg.max_iter, cfg.rank_max_iter)
        if not self.factored:
            status = jnp.where(
                found,
                STORABLE,
                jnp.where(unstorable, UNSTORABLE, jnp.where(out_of_budget, UNDECIDED, RUNNING)),
            )
            return eqx.tree_at(lambda s: s.status, st, status.astype(jnp.int32))
        # the rank phase's progress: every rank_window iterations its squared hinge must have
        # fallen by rank_progress of itself, or the phase has stalled
        loss = jnp.sum(residual(st.opt.M, inst.cons.mask) ** 2)
        check = (st.phase > 0) & (st.it > 0) & (st.it % cfg.rank_window == 0)
        stalled = check & (loss > (1.0 - cfg.rank_progress) * st.ref)
        ref = jnp.where(check, loss, st.ref)
        ended = stalled | out_of_budget
        # a full-rank solution goes on in rank m; a stalled start from its truncation is
        # followed by one from the warm start, if there is one
        pending = ((st.phase == 0) & found) | (
            (st.phase == 1) & ended & ~found & self.warm & jnp.any(st.warm != 0)
        )
        status = jnp.where(
            st.phase == 0,
            jnp.where(unstorable, UNSTORABLE, jnp.where(out_of_budget, UNDECIDED, RUNNING)),
            jnp.where(found, STORABLE, jnp.where(ended & ~pending, UNDECIDED, RUNNING)),
        )
        return eqx.tree_at(
            lambda s: (s.status, s.ref, s.pending), st, (status.astype(jnp.int32), ref, pending)
        )

    def settle(self, inst: DecisionInstance, st: _State) -> _State:
        if not self.factored:
            return st
        d = st.opt.X.shape[-1]
        m_mask = (jnp.arange(d) < inst.rank).astype(st.opt.X.dtype)
        W = jnp.where(st.phase == 0, st.opt.X[0], st.warm)
        phase = jnp.where(st.phase == 0, 1, 2).astype(jnp.int32)
        fresh = _bilinear(inst.cons, phase).init(_truncate(W, m_mask), self.config.memory)
        inf = jnp.asarray(jnp.inf, st.ref.dtype)
        zero = jnp.array(0, jnp.int32)
        new = eqx.tree_at(
            lambda s: (s.opt, s.phase, s.it, s.ref, s.pending),
            st,
            (fresh, phase, zero, inf, jnp.array(False)),
        )
        new = self._judge(inst, new)
        return jax.tree.map(lambda a, b: jnp.where(st.pending, a, b), new, st)

    def step(self, inst: DecisionInstance, st: _State) -> _State:
        opt = self._operator(inst, st).step(st.opt)
        new = eqx.tree_at(lambda s: (s.opt, s.it, s.total), st, (opt, st.it + 1, st.total + 1))
        new = self._judge(inst, new)
        if not self.factored:
            return new
        # a pending instance waits for `settle`
        return jax.tree.map(lambda a, b: jnp.where(st.pending, b, a), new, st)

    def done(self, st: _State) -> Bool[Array, ""]:
        return st.status != RUNNING

    def weight(self, st: _State):
        if not self.factored:
            return st.opt.X
        X = st.opt.X
        return jnp.einsum("nij,nkj->nik", X[:, 0], X[:, 1], precision=lax.Precision.HIGHEST)


def to64(x):
    """`x` in float64 if it is floating, else as it is (integer and boolean arrays keep their
    type): the one cast of the float64 rechecks."""
    x = jnp.asarray(x)
    return x.astype(jnp.float64) if jnp.issubdtype(x.dtype, jnp.floating) else x


@jax.jit
def _verify64(cons: Constraints | StreamedConstraints, W):
    if isinstance(cons, StreamedConstraints):
        g, rsum, mmin = cons.hinge(W)
    else:
        M = cons.margins(W)
        g = -2.0 * cons.adjoint(residual(M, cons.mask))
        rsum, mmin = hinge_summary(M, cons.mask)
    return _certificates(mmin, rsum, g, W, cons.rms_norm())


@jax.jit
def _verify_batch(cons, W):
    return jax.vmap(_verify64)(jax.tree.map(to64, cons), to64(W))


@jax.jit
def _fraction64(cons: Constraints, W):
    def one(cons, W):
        ok = (cons.margins(W) > 0) | ~cons.mask
        real = jnp.arange(ok.shape[0]) < cons.p
        return jnp.sum(jnp.all(ok, axis=1) & real) / cons.p

    return jax.vmap(one)(jax.tree.map(to64, cons), to64(W))


def stored_fraction(cons: Constraints, W) -> np.ndarray:
    """The fraction of each instance's `p` inputs whose own target beats all its competitors
    under `W`, in float64 (dense constraints only): the accuracy criterion's check."""
    if isinstance(cons, StreamedConstraints):
        raise InvalidArgument("the accuracy criterion needs dense constraints (p too large)")
    with jax.enable_x64(True):
        return np.asarray(_fraction64(cons, W)).copy()


def verify(cons: Constraints, W, tol: float):
    """Recompute both certificates of a batch in float64: `(status, margin, margin_bound)`.

    `margin > 0` (every margin positive) certifies storable; otherwise `margin_bound < tol`
    certifies that no memory has a normalised margin above `tol`.
    """
    with jax.enable_x64(True):
        margin, bound = _verify_batch(cons, W)
        margin, bound = np.asarray(margin), np.asarray(bound)
    return certified_status(margin, bound, tol), margin.copy(), bound.copy()


def decide_constraints(
    cons: Constraints, *, rank=None, W0=None, config: DecideConfig = DecideConfig(), progress=None
) -> Decision:
    """`decide` on a batch of `Constraints` (leading ensemble axis); `rank` per instance or None
    for full rank; `W0` warm starts (default zero)."""
    solver, inst = decision_instances(cons, rank=rank, W0=W0, config=config)
    st, _ = run_ensemble(
        solver,
        inst,
        chunk=config.chunk,
        progress=progress,
        early=True,
        **compaction(cons, factored=rank is not None),
    )
    return conclude(solver, inst, st)


def decision_instances(cons, *, rank=None, W0=None, config: DecideConfig = DecideConfig()):
    """The `Decider` and its batch of instances for `cons` (see `decide_constraints`); `W0`
    warm starts (each from its best multiple; default zero)."""
    n, P, d = cons.inputs.shape
    dtype = cons.inputs.dtype
    warm = W0 is not None
    W0 = jnp.zeros((n, d, d), dtype) if W0 is None else jnp.asarray(W0, dtype)
    factored = rank is not None
    if factored and isinstance(cons, StreamedConstraints):
        raise InvalidArgument(
            "a factored memory is decided on dense constraints only; these need streaming "
            "(p too large, or DP candidates generated block by block)"
        )
    ranks = jnp.broadcast_to(jnp.asarray(d if rank is None else rank, jnp.int32), (n,))
    return Decider(config, factored, warm), DecisionInstance(cons, W0, ranks)


def conclude(solver: Decider, inst: DecisionInstance, st: _State) -> Decision:
    """Certify finished instances: recompute both certificates in float64 (`verify`), continue
    a float32 near-tie that fails its recheck in float64 from where it stopped, and for a
    rank-`m` memory keep only what its own product (storable) or the full-rank iterate
    (unstorable) certifies.

    **Arguments:** the solver, its instances and their final states (leading batch axis).

    **Returns:** a `Decision`.
    """
    cons, ranks, config, factored = inst.cons, inst.rank, solver.config, solver.factored
    dtype = cons.inputs.dtype
    W = np.asarray(solver.weight(st))
    status, margin, bound = verify(cons, W, config.tol)
    iterations = np.array(st.total)
    solver_status = np.asarray(st.status)

    def rerun(idx):
        sub = jax.tree.map(lambda x: to64(x[idx]), cons)
        st64, _ = run_ensemble(
            solver,
            DecisionInstance(sub, to64(W[idx]), ranks[idx]),
            chunk=config.chunk,
            early=True,
            **compaction(sub),
        )
        W64 = np.asarray(solver.weight(st64))
        return np.asarray(st64.status), np.asarray(st64.total), W64, verify(sub, W64, config.tol)

    can_rerun = not factored and dtype != jnp.float64
    status, W = settle(status, margin, bound, iterations, W, solver_status, rerun=rerun, can_rerun=can_rerun)
    if factored:
        # a rank-m memory is certified by itself; unstorable only through the full-rank certificate
        status = np.where(
            (status == STORABLE) & (solver_status == STORABLE),
            STORABLE,
            np.where(
                solver_status == UNSTORABLE, np.where(status == UNSTORABLE, UNSTORABLE, UNDECIDED), UNDECIDED
            ),
        )
    return decision(status, margin, bound, iterations, W, config.tol)


def decision(status, margin, bound, iterations, W, tol: float) -> Decision:
    """The `Decision` of a batch, its memories in float64 whether or not a near-tie was redone
    in float64."""
    return Decision(
        status=status.astype(np.int32),
        storable=status == STORABLE,
        margin=margin,
        margin_bound=bound,
        iterations=iterations,
        weight=np.asarray(W, np.float64),
        tol=float(tol),
    )


@eqx.filter_jit
def resize_states(st: _State, P: int) -> _State:
    """States of a batch re-padded to `P` rows, for instances whose `p <= P`: the constraints
    that enter or leave involve rows or columns `>= p`, so they are masked (margin 2, never a
    residual); nothing else in a state depends on `P`."""
    M = st.opt.M
    if M.ndim < 3:  # streamed: the margins are never held
        return st
    M = M[:, :P, :P]
    pad = P - M.shape[-1]
    M = jnp.pad(M, ((0, 0), (0, pad), (0, pad)), constant_values=2.0)
    return eqx.tree_at(lambda s: s.opt.M, st, M)
