"""The storage constraints of a task as a linear operator on the memory (docs/science.md, 2.7).

Storing all of the first `p` associations is the system `<W, A_{mu rho}> > 0` for `mu != rho`,
`mu, rho < p`, with `A_{mu rho} = (c^(mu)_mu - c^(mu)_rho) e_mu^T` (`c^(mu) = u` in the OP). Both
maps of the solvers cost one cross-entropy gradient, `O(P^2 d)`, and never form the constraint
matrix:

    margins(W)[mu, rho] = v_mu . (c^(mu)_mu - c^(mu)_rho),      v_mu = W e_mu,
    adjoint(R)          = sum_{mu, rho} R[mu, rho] A_{mu rho}.

A task may hold more rows than `p` (a padded prefix of a nested task): constraints that involve
a row or column `>= p` are masked out exactly, so a padded task decides as its `p`-prefix.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Bool, Float, Int

from .._loss import use_stream
from .._tasks import Task
from .._validate import InvalidArgument
from ._lbfgs import HIGHEST, Linear, Streamed, tmatmul
from ._runner import BUCKET_BASE, worth_compacting


class Constraints(eqx.Module):
    """The constraints of the first `p` associations of one task, padded to `P` rows.

    **Arguments:**

    - `inputs`: `(P, d)` inputs `e_mu`.
    - `candidates`: `(P, d)` shared targets (OP) or `(P, P, d)` per-input candidates (DP).
    - `p`: the number of real associations (scalar integer array, `2 <= p <= P`).
    """

    inputs: Float[Array, "P d"]
    candidates: Float[Array, "P d"] | Float[Array, "P P d"]
    p: Int[Array, ""]

    @property
    def decoupled(self) -> bool:
        return self.candidates.ndim == 3

    @property
    def mask(self) -> Bool[Array, "P P"]:
        P = self.inputs.shape[0]
        idx = jnp.arange(P)
        real = idx < self.p
        return real[:, None] & real[None, :] & (idx[:, None] != idx[None, :])

    def scores(self, W: Float[Array, "d d"], precision=HIGHEST) -> Float[Array, "P P"]:
        """`s[mu, rho] = c^(mu)_rho . W e_mu`."""
        V = jnp.matmul(self.inputs, W.T, precision=precision)
        if self.decoupled:
            return jnp.einsum("md,mrd->mr", V, self.candidates, precision=precision)
        return jnp.matmul(V, self.candidates.T, precision=precision)

    def operator(self) -> Linear:
        """The margins of `W` for L-BFGS: this map, its adjoint and its mask."""
        return Linear(self.margins, self.adjoint, self.mask)

    def margins(self, W: Float[Array, "d d"], precision=HIGHEST) -> Float[Array, "P P"]:
        """`<W, A_{mu rho}> = s[mu, mu] - s[mu, rho]` (zero on masked entries)."""
        s = self.scores(W, precision)
        return jnp.where(self.mask, jnp.diagonal(s)[:, None] - s, 0.0)

    def adjoint(self, R: Float[Array, "P P"], precision=HIGHEST) -> Float[Array, "d d"]:
        """`sum_{mu rho} R[mu, rho] A_{mu rho}` for `R` zero off the mask."""
        rs = R.sum(axis=1)
        if self.decoupled:
            target = jnp.diagonal(self.candidates, axis1=0, axis2=1).T  # (P, d): c^(mu)_mu
            X = rs[:, None] * target - jnp.einsum("mr,mrd->md", R, self.candidates, precision=precision)
            return tmatmul(X, self.inputs, precision)
        X = rs[:, None] * self.inputs - tmatmul(R, self.inputs, precision)
        return tmatmul(self.candidates, X, precision)

    def rms_norm(self) -> Float[Array, ""]:
        """`a`: the root-mean-square `|A_{mu rho}|_F` over the real constraints."""
        e2 = jnp.sum(self.inputs**2, axis=1)
        if self.decoupled:
            target = jnp.diagonal(self.candidates, axis1=0, axis2=1).T
            diff2 = jnp.sum((target[:, None, :] - self.candidates) ** 2, axis=-1)
        else:
            c2 = jnp.sum(self.candidates**2, axis=1)
            gram = jnp.matmul(self.candidates, self.candidates.T, precision=HIGHEST)
            diff2 = c2[:, None] + c2[None, :] - 2 * gram
        total = jnp.sum(jnp.where(self.mask, diff2 * e2[:, None], 0.0))
        return jnp.sqrt(total / (self.p * (self.p - 1)))


def constraints(task: Task, p, P: int | None = None) -> Constraints:
    """The constraints of the first `p` associations of `task`, padded to `P` rows (default `p`,
    which must then be concrete). DP candidates are taken from the task when materialised and
    generated from its key otherwise."""
    P = int(p) if P is None else int(P)
    if P > task.p:
        raise InvalidArgument(f"P must be <= task.p = {task.p}, got {P}")
    return Constraints(task.inputs[:P], task.table(P), jnp.asarray(p, jnp.int32))


def task_prefixes(tasks: Task, p, model: str = "full") -> np.ndarray:
    """The prefix size `p` of each task of a batch (`p`: one integer, one per task, or `None` for
    all of them), checked with the batch and the model name: the solvers' one argument check."""
    if tasks.inputs.ndim != 3:
        raise InvalidArgument("tasks must be a batch from make_tasks (leading ensemble axis)")
    n, P, _ = tasks.inputs.shape
    if model not in ("full", "factored"):
        raise InvalidArgument(f"model must be 'full' or 'factored', got {model!r}")
    if p is not None and np.ndim(p) and np.shape(p) != (n,):
        raise InvalidArgument(f"p must be one integer or one per task ({n}), got shape {np.shape(p)}")
    ps = np.broadcast_to(np.asarray(P if p is None else p), (n,))
    if not (np.issubdtype(ps.dtype, np.integer) and np.all((ps >= 2) & (ps <= P))):
        raise InvalidArgument(f"p must be integers in [2, {P}], got {ps.tolist()}")
    return ps


def batch_constraints(
    tasks: Task, ps, P: int, *, stream: bool | None = None, block: int = 256
) -> Constraints | StreamedConstraints:
    """`constraints` over a leading ensemble axis, each instance with its own `p`: dense, or
    `StreamedConstraints` where `use_stream` says so for the `P`-prefix (the training kernels'
    rule: above `STREAM_THRESHOLD` scores, or candidates that exist only block by block);
    `stream` forces either."""
    P = int(P)
    ps = jnp.asarray(ps, jnp.int32)
    one = jax.tree.map(lambda x: x[0], tasks)
    if use_stream(one.prefix(P) if P < one.p else one, stream):
        return StreamedConstraints(tasks.prefix(P) if P < tasks.p else tasks, ps, int(block))
    return _batch(tasks, ps, P)


@eqx.filter_jit
def _batch(tasks, ps, P):
    return jax.vmap(lambda t, p: constraints(t, p, P))(tasks, ps)


class StreamedConstraints(eqx.Module):
    """The constraints of the first `p` associations of a task padded to `P` rows, never formed:
    every quantity the decision solver needs is one pass over `(row block, column block)` tiles
    of scores, `O(P d)` memory plus one tile (`(R, block)` scores, and for the DP the generated
    `(R, block, d)` candidates). For tasks whose `P x P` margins do not fit.

    **Arguments:** `task`: one task with `P` rows; `p`: the real associations; `block`: the
    columns of a tile (a multiple of 128 suits the accelerators' matrix units); `held`: the DP
    task's candidates were generated into memory for a search (`hold_candidates`), not by
    `make_task`.
    """

    task: Task
    p: Int[Array, ""]
    block: int = eqx.field(static=True, default=256)
    held: bool = eqx.field(static=True, default=False)

    @property
    def inputs(self):
        return self.task.inputs

    def operator(self) -> Streamed:
        """The margins of `W` for L-BFGS, never formed."""
        return Streamed(self)

    def tiling(self) -> tuple[int, int, int, int]:
        """`(B, R, nr, nb)`: columns and rows of a tile, and the numbers of row and column blocks."""
        P = self.task.p
        B = int(min(self.block, P))
        R = int(self.task.row_block(B))
        return B, R, -(-P // R), -(-P // B)

    def fold(self, Vs, fn, init, row_init, row_done, rows: int | None = None):
        """`task.fold_tiles` at HIGHEST with this instance's tiling, `fn(carry, row_carry, r,
        rows, cols, valid, scores, C)` also given `valid`: the tile's real constraints (both
        indices below `p`, off the diagonal); `rows` caps the inputs of a row block."""
        B, R, _, _ = self.tiling()
        R = R if rows is None else max(1, min(R, int(rows)))

        def tile(carry, rc, r, rows, cols, scores, C):
            valid = (rows < self.p)[:, None] & (cols < self.p)[None, :] & (rows[:, None] != cols[None, :])
            return fn(carry, rc, r, rows, cols, valid, scores, C)

        return self.task.fold_tiles(
            Vs,
            block=B,
            row_block=R,
            precision=HIGHEST,
            fn=tile,
            init=init,
            row_init=row_init,
            row_done=row_done,
        )

    def _project(self, W):
        return jnp.matmul(self.task.inputs, W.T, precision=HIGHEST)

    def _targets(self, V, rows):
        """`s[mu, mu] = u_mu . v_mu` for the (padded) row block `rows`."""
        P = self.task.p
        Vp = jnp.pad(V, ((0, rows.shape[0]), (0, 0)))
        U = jnp.pad(self.task.targets, ((0, rows.shape[0]), (0, 0)))
        return jnp.sum(Vp[rows] * U[rows], axis=1) * (rows < P)

    def hinge(self, W):
        """One pass at `W`: the squared hinge's gradient `-2 adjoint((1 - M)_+)`, the residual
        sum `sum_i (1 - M_i)_+` and the least margin `min_i M_i`."""
        task = self.task
        V = self._project(W)
        d = W.shape[0]
        dtype = W.dtype
        Ep = jnp.pad(task.inputs, ((0, task.p), (0, 0)))
        Up = jnp.pad(task.targets, ((0, task.p), (0, 0)))

        def fn(carry, rc, r, rows, cols, valid, scores, C):
            rsum, mmin = carry
            acc, rs = rc
            M = self._targets(V, rows)[:, None] - scores[0]
            Res = jnp.where(valid, jnp.maximum(1.0 - M, 0.0), 0.0)
            mmin = jnp.minimum(mmin, jnp.min(jnp.where(valid, M, jnp.inf)))
            return (rsum + Res.sum(), mmin), (acc + task.block_sum(Res, C, HIGHEST), rs + Res.sum(axis=1))

        def row_init(R):
            return jnp.zeros((R, d), dtype), jnp.zeros((R,), dtype)

        def row_done(carry, rc, r, rows):
            (rsum, mmin), G = carry
            acc, rs = rc
            X = rs[:, None] * Up[rows] - acc
            return (rsum, mmin), G + tmatmul(X, Ep[rows])

        def fn2(carry, rc, r, rows, cols, valid, scores, C):
            head, G = carry
            head, rc = fn(head, rc, r, rows, cols, valid, scores, C)
            return (head, G), rc

        init = ((jnp.zeros((), dtype), jnp.asarray(jnp.inf, dtype)), jnp.zeros((d, d), dtype))
        (rsum, mmin), G = self.fold([V], fn2, init, row_init, row_done)
        return -2.0 * G, rsum, mmin

    def least_margin(self, W):
        """`min_i M_i(W)` over every real constraint: one pass that keeps only the minimum (the
        storable certificate; `outer_pass` also selects each input's lowest margins, several
        times slower in float64)."""
        V = self._project(W)

        def fn(carry, rc, r, rows, cols, valid, scores, C):
            M = self._targets(V, rows)[:, None] - scores[0]
            return jnp.minimum(carry, jnp.min(jnp.where(valid, M, jnp.inf))), rc

        init = jnp.asarray(jnp.inf, W.dtype)
        return self.fold([V], fn, init, lambda R: (), lambda carry, rc, r, rows: carry)

    def line_slopes(self, W, D, ts):
        """One pass: `phi'(t)` and `phi''(t)` of `phi(t) = sum_i (1 - M_i(W) - t M_i(D))_+^2` at
        each of the steps `ts`."""
        VW, VD = self._project(W), self._project(D)
        dtype = W.dtype

        def fn(carry, rc, r, rows, cols, valid, scores, C):
            M = self._targets(VW, rows)[:, None] - scores[0]
            dM = self._targets(VD, rows)[:, None] - scores[1]

            def at(t):
                res = jnp.where(valid, jnp.maximum(1.0 - M - t * dM, 0.0), 0.0)
                return -2.0 * jnp.sum(dM * res), 2.0 * jnp.sum(jnp.where(res > 0, dM * dM, 0.0))

            g, h = lax.map(at, ts)
            return (carry[0] + g, carry[1] + h), rc

        init = (jnp.zeros(ts.shape, dtype), jnp.zeros(ts.shape, dtype))
        return self.fold([VW, VD], fn, init, lambda R: (), lambda carry, rc, r, rows: carry)

    def rms_norm(self):
        """`a`: the root-mean-square `|A_{mu rho}|_F = |e_mu| |u_mu - c^(mu)_rho|` over the real
        constraints: a closed form in `O(p d)` for shared candidates (OP), one pass otherwise."""
        task = self.task
        U = task.targets
        if task.shared:
            # over the real rows, sum_{rho != mu} |u_mu - u_rho|^2
            #   = p |u_mu|^2 + sum_rho |u_rho|^2 - 2 u_mu . sum_rho u_rho
            real = (jnp.arange(task.p) < self.p).astype(U.dtype)
            Ur = U * real[:, None]
            u2 = jnp.sum(Ur**2, axis=1)
            per_row = self.p * u2 + jnp.sum(u2) - 2.0 * jnp.matmul(Ur, jnp.sum(Ur, axis=0), precision=HIGHEST)
            total = jnp.sum(real * jnp.sum(task.inputs**2, axis=1) * per_row)
            return jnp.sqrt(total / (self.p * (self.p - 1)))
        e2 = jnp.pad(jnp.sum(task.inputs**2, axis=1), (0, task.p))
        u2 = jnp.pad(jnp.sum(U**2, axis=1), (0, task.p))

        def fn(carry, rc, r, rows, cols, valid, scores, C):
            c2 = jnp.sum(C**2, axis=-1)
            c2 = c2[None, :] if c2.ndim == 1 else c2
            diff2 = u2[rows][:, None] + c2 - 2 * scores[0]
            return carry + jnp.sum(jnp.where(valid, diff2 * e2[rows][:, None], 0.0)), rc

        total = self.fold([U], fn, jnp.zeros((), U.dtype), lambda R: (), lambda carry, rc, r, rows: carry)
        return jnp.sqrt(total / (self.p * (self.p - 1)))


def compaction(cons: Constraints | StreamedConstraints, *, factored: bool = False) -> dict:
    """`run_ensemble`'s `compact` and `base` for a batch of decisions on `cons` (leading ensemble
    axis): a batch worth compacting (`worth_compacting`) drops its finished instances into
    buckets of powers of `BUCKET_BASE`; one whose DP candidates are held runs whole, as a
    compacting runner would copy them at every chunk.

    **Returns:** `dict(compact=..., base=...)`."""
    _, P, d = cons.inputs.shape
    if isinstance(cons, StreamedConstraints):
        shared, held = cons.task.shared, cons.held
    else:  # batched: OP candidates (n, P, d), DP candidates (n, P, P, d)
        shared, held = cons.candidates.ndim == cons.inputs.ndim, False
    worth = worth_compacting(P, d, shared=shared, factored=factored)
    return dict(compact=worth and not held, base=BUCKET_BASE)
