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

from ._tasks import dp_candidates, Task


class Scores(eqx.Module):
    """Per-input outcome of one pass: target score, best competitor score, stored flag."""

    target: jax.Array
    best: jax.Array
    stored: jax.Array


def dense_scores(V, task: Task, *, precision=lax.Precision.HIGHEST):
    """The `p x p` score matrix `s[mu, rho]` (materialises DP candidates if needed)."""
    if task.problem == "op":
        return jnp.matmul(V, task.targets.T, precision=precision)
    cands = task.candidates
    if cands is None:
        idx = jnp.arange(task.p)
        cands = dp_candidates(task, idx[:, None], idx[None, :])
    return jnp.einsum("md,mrd->mr", V, cands, precision=precision)


def _outcome(s):
    p = s.shape[-1]
    eye = jnp.eye(p, dtype=bool)
    target = jnp.diagonal(s)
    best = jnp.max(jnp.where(eye, -jnp.inf, s), axis=-1)
    return Scores(target, best, target > best)


def dense_ce(V, task: Task, *, precision=lax.Precision.DEFAULT):
    """Mean softmax cross-entropy from the dense score matrix, and the per-input `Scores`."""
    import optax

    s = dense_scores(V, task, precision=precision)
    loss = optax.softmax_cross_entropy_with_integer_labels(s, jnp.arange(task.p)).mean()
    return loss, _outcome(lax.stop_gradient(s))


def _stream_pass(V, task: Task, block: int, precision, row_block: int | None = None):
    """One pass over candidate blocks of `block` columns, for row blocks of `row_block` inputs
    (OP: all rows at once; DP: sized so a generated `(rows, block, d)` candidate block stays
    near 2^22 floats)."""
    p, d = V.shape
    if row_block is None:
        row_block = p if task.problem == "op" else max(1, min(p, 2**22 // (block * d)))
    R = int(row_block)
    nr, nb = -(-p // R), -(-p // block)
    Vp = jnp.pad(V, ((0, nr * R - p), (0, 0)))

    def row_pass(r):
        rows = r * R + jnp.arange(R)
        Vr = lax.dynamic_slice_in_dim(Vp, r * R, R)

        def body(carry, b):
            m, l, acc, best = carry
            cols = b * block + jnp.arange(block)
            valid = cols < p
            colc = jnp.minimum(cols, p - 1)
            if task.problem == "op":
                C = task.targets[colc]  # (B, d)
                s = jnp.matmul(Vr, C.T, precision=precision)
            else:
                C = dp_candidates(task, jnp.minimum(rows, p - 1)[:, None], colc[None, :])  # (R, B, d)
                s = jnp.einsum("md,mbd->mb", Vr, C, precision=precision)
            s = jnp.where(valid[None, :], s, -jnp.inf)
            m_new = jnp.maximum(m, s.max(axis=1))
            scale = jnp.exp(m - m_new)
            e = jnp.exp(s - m_new[:, None])
            l = l * scale + e.sum(axis=1)
            if task.problem == "op":
                acc = acc * scale[:, None] + jnp.matmul(e, C, precision=precision)
            else:
                acc = acc * scale[:, None] + jnp.einsum("mb,mbd->md", e, C, precision=precision)
            is_target = cols[None, :] == rows[:, None]
            best = jnp.maximum(best, jnp.where(is_target, -jnp.inf, s).max(axis=1))
            return (m_new, l, acc, best), None

        init = (
            jnp.full((R,), -jnp.inf, V.dtype),
            jnp.zeros((R,), V.dtype),
            jnp.zeros((R, d), V.dtype),
            jnp.full((R,), -jnp.inf, V.dtype),
        )
        return lax.scan(body, init, jnp.arange(nb))[0]

    out = lax.map(row_pass, jnp.arange(nr))
    m, l, acc, best = (x.reshape((nr * R,) + x.shape[2:])[:p] for x in out)
    target = jnp.sum(V * task.targets, axis=1)
    loss = jnp.mean(m + jnp.log(l) - target)
    grad = (acc / l[:, None] - task.targets) / p
    return loss, grad, Scores(target, best, target > best)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _stream(V, task, block, precision, row_block):
    loss, _, out = _stream_pass(V, task, block, precision, row_block)
    return loss, out


def _stream_fwd(V, task, block, precision, row_block):
    loss, grad, out = _stream_pass(V, task, block, precision, row_block)
    return (loss, out), grad


def _stream_bwd(block, precision, row_block, grad, ct):
    ct_loss, _ = ct
    return ct_loss * grad, None


_stream.defvjp(_stream_fwd, _stream_bwd)


def stream_ce(
    V, task: Task, *, block: int = 256, row_block: int | None = None, precision=lax.Precision.DEFAULT
):
    """Same value, gradient and `Scores` as `dense_ce`, without the `p x p` matrix.

    The forward pass accumulates `dL/dV` with the loss (running-max softmax), so the backward
    pass only scales it: each DP candidate is generated once per step. Memory: `O(p d)` plus a
    `(p, block)` score block (OP) or a `(row_block, block, d)` candidate block (DP).
    """
    block = int(min(block, task.p))
    return _stream(V, task, block, precision, row_block)


# Above this many scores per task the trainer uses the streaming kernel.
STREAM_THRESHOLD = 2**24


def cross_entropy(V, task: Task, *, stream: bool | None = None, block: int = 256):
    """Dispatch: dense below `STREAM_THRESHOLD` scores (or DP candidates not materialised)."""
    if stream is None:
        stream = task.p * task.p > STREAM_THRESHOLD or (task.problem == "dp" and task.candidates is None)
    if stream:
        return stream_ce(V, task, block=block)
    return dense_ce(V, task)
