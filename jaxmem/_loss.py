"""Scores and the softmax cross-entropy over the `p` candidates.

Everything is a function of the projected inputs `V = E W^T` (row `v_mu = W e_mu`): the score
of candidate `rho` for input `mu` is `s[mu, rho] = c^(mu)_rho . v_mu`, and

    L = (1/p) sum_mu [ logsumexp_rho s[mu, rho] - s[mu, mu] ],
    dL/dv_mu = (1/p) [ sum_rho softmax_rho(s[mu]) c^(mu)_rho - c^(mu)_mu ].

`dense_ce` forms the `p x p` score matrix (reference, and fastest at small sizes).
`stream_ce` never does: one pass over candidate blocks with a running-max softmax accumulates
the loss, `dL/dV`, the best competitor score and the stored flags together (`custom_vjp`
that saves only `dL/dV`), and DP candidates are regenerated inside the block loop.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Float

from ._tasks import Task
from ._validate import check_shape


class Scores(eqx.Module):
    """Per-input outcome of one pass: target score, best competitor score, stored flag."""

    target: Float[Array, " p"]
    best: Float[Array, " p"]
    stored: Bool[Array, " p"]


def _check_V(V, task: Task) -> None:
    check_shape("V", V, (task.p, task.inputs.shape[-1]), "p, d: the projections E W^T")


def dense_scores(
    V: Float[Array, "p d"], task: Task, *, precision=lax.Precision.HIGHEST
) -> Float[Array, "p p"]:
    """The `p x p` score matrix `s[mu, rho]` (materialises DP candidates if needed).

    **Arguments:** `V`: the projections `(p, d)`; `task`: one task; `precision`: of the matmul.

    **Returns:** the `(p, p)` matrix `s[mu, rho] = c^(mu)_rho . v_mu`.
    """
    _check_V(V, task)
    return task.score_matrix(V, precision)


def outcome(s, n=None) -> Scores:
    """Target, best competitor and stored flag per input from a `P x P` score matrix, over its
    first `n` rows and columns (default all); a padded row (`>= n`) counts as stored."""
    P = s.shape[-1]
    idx = jnp.arange(P)
    n = P if n is None else n
    target = jnp.diagonal(s)
    best = jnp.max(jnp.where((idx[None, :] == idx[:, None]) | (idx[None, :] >= n), -jnp.inf, s), axis=-1)
    return Scores(target, best, (target > best) | (idx >= n))


def dense_ce(V: Float[Array, "P d"], task: Task, *, n=None, precision=lax.Precision.DEFAULT):
    """Mean softmax cross-entropy over the first `n` associations (default all) from the dense
    score matrix, and the per-input `Scores`. Rows and columns `>= n` (a padded prefix) are
    masked exactly: a padded candidate never enters a softmax, a padded row not the mean.

    **Arguments:** `V`: the projections `(P, d)`; `task`: one task; `n`: the real associations
    (may be traced); `precision`: of the score matmul.

    **Returns:** `(loss, Scores)`.
    """
    import optax

    s = dense_scores(V, task, precision=precision)
    P = task.p
    if n is None:
        loss = optax.softmax_cross_entropy_with_integer_labels(s, jnp.arange(P)).mean()
        return loss, outcome(lax.stop_gradient(s))
    real = jnp.arange(P) < n
    logits = jnp.where(real[None, :] | ~real[:, None], s, -jnp.inf)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.arange(P))
    return jnp.sum(jnp.where(real, ce, 0.0)) / n, outcome(lax.stop_gradient(s), n)


def stream_pass(V, task: Task, block: int, precision, row_block: int | None = None, n=None):
    """One pass over candidate blocks of `block` columns, for row blocks of `row_block` inputs
    (default `task.row_block(block)`), over the first `n` associations (default all, masked as in
    `dense_ce`). **Returns:** the loss, `dL/dV` and the `Scores`."""
    p, d = V.shape
    n = p if n is None else n
    R = int(task.row_block(block) if row_block is None else row_block)
    nr = -(-p // R)

    def tile(carry, rc, r, rows, cols, scores, C):
        m, l, acc, best = rc
        s = jnp.where((cols < n)[None, :], scores[0], -jnp.inf)
        m_new = jnp.maximum(m, s.max(axis=1))
        scale = jnp.exp(m - m_new)
        e = jnp.exp(s - m_new[:, None])
        l = l * scale + e.sum(axis=1)
        acc = acc * scale[:, None] + task.block_sum(e, C, precision)
        is_target = cols[None, :] == rows[:, None]
        best = jnp.maximum(best, jnp.where(is_target, -jnp.inf, s).max(axis=1))
        return carry, (m_new, l, acc, best)

    def row_init(R):
        return (
            jnp.full((R,), -jnp.inf, V.dtype),
            jnp.zeros((R,), V.dtype),
            jnp.zeros((R, d), V.dtype),
            jnp.full((R,), -jnp.inf, V.dtype),
        )

    def row_done(carry, rc, r, rows):
        return tuple(lax.dynamic_update_slice_in_dim(x, y, r * R, 0) for x, y in zip(carry, rc))

    buffers = tuple(jnp.concatenate([x] * nr) for x in row_init(R))
    out = task.fold_tiles(
        [V],
        block=block,
        row_block=R,
        precision=precision,
        fn=tile,
        init=buffers,
        row_init=row_init,
        row_done=row_done,
    )
    m, l, acc, best = (x[:p] for x in out)
    real = jnp.arange(p) < n
    target = jnp.sum(V * task.targets, axis=1)
    loss = jnp.sum(jnp.where(real, m + jnp.log(l) - target, 0.0)) / n
    grad = jnp.where(real[:, None], acc / l[:, None] - task.targets, 0.0) / n
    return loss, grad, Scores(target, best, (target > best) | ~real)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _stream(V, task, n, block, precision, row_block):
    loss, _, out = stream_pass(V, task, block, precision, row_block, n)
    return loss, out


def _stream_fwd(V, task, n, block, precision, row_block):
    loss, grad, out = stream_pass(V, task, block, precision, row_block, n)
    return (loss, out), grad


def _stream_bwd(block, precision, row_block, grad, ct):
    ct_loss, _ = ct
    return ct_loss * grad, None, None


_stream.defvjp(_stream_fwd, _stream_bwd)


def stream_ce(
    V: Float[Array, "P d"],
    task: Task,
    *,
    n=None,
    block: int = 256,
    row_block: int | None = None,
    precision=lax.Precision.DEFAULT,
):
    """Same value, gradient and `Scores` as `dense_ce`, without the `p x p` matrix.

    The forward pass accumulates `dL/dV` with the loss (running-max softmax), so the backward
    pass only scales it: each DP candidate is generated once per step. Memory: `O(p d)` plus a
    `(p, block)` score block (OP) or a `(row_block, block, d)` candidate block (DP).

    **Arguments:** `V`: the projections `(P, d)`; `task`: one task; `n`: the real associations
    (default all); `block`: candidate columns per pass; `row_block`: inputs per pass (default
    `task.row_block(block)`); `precision`: of the matmuls.

    **Returns:** `(loss, Scores)`, as `dense_ce`.
    """
    _check_V(V, task)
    block = int(min(block, task.p))
    n = jnp.asarray(task.p if n is None else n, jnp.int32)
    return _stream(V, task, n, block, precision, row_block)


# Above this many scores per task the streaming kernel is used.
STREAM_THRESHOLD = 2**24


def use_stream(task: Task, stream: bool | None = None) -> bool:
    """The one rule for dense against streaming: stream above `STREAM_THRESHOLD` scores, or
    when the candidates exist only block by block; `stream` forces either."""
    if stream is not None:
        return bool(stream)
    return task.p * task.p > STREAM_THRESHOLD or task.streams_only


def cross_entropy(
    V: Float[Array, "P d"],
    task: Task,
    *,
    n=None,
    stream: bool | None = None,
    block: int = 256,
    precision=lax.Precision.DEFAULT,
):
    """The mean softmax cross-entropy and the `Scores`, dense or streaming by `use_stream`.

    **Arguments:** `V`: the projections `E W^T`, `(P, d)`; `task`: one task; `n`: train on its first
    `n` associations only (a padded prefix, masked exactly; default all); `stream`: force the
    dense (`False`) or streaming (`True`) kernel; `block`: the streaming column block;
    `precision`: of the matmuls (a `lax.Precision`, or a name in `PRECISIONS`).

    **Returns:** `(loss, Scores)`: the mean cross-entropy (differentiable in `V`) and the per-input
    outcome.
    """
    if use_stream(task, stream):  # both check V (`_check_V`)
        return stream_ce(V, task, n=n, block=block, precision=precision)
    return dense_ce(V, task, n=n, precision=precision)


def scores(
    V: Float[Array, "p d"], task: Task, *, precision=lax.Precision.HIGHEST, block: int = 256, n=None
) -> Scores:
    """The `Scores` of the projections `V` (no gradient), dense or streaming by `use_stream`,
    over the first `n` associations (default all; a padded row counts as stored)."""
    if use_stream(task):
        return stream_pass(V, task, min(block, task.p), precision, n=n)[2]
    return outcome(dense_scores(V, task, precision=precision), n)
