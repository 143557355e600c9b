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
from jax import lax
from jaxtyping import Array, Bool, Float, Int

from .._tasks import Task
from .._validate import InvalidArgument


HIGHEST = lax.Precision.HIGHEST


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
            return jnp.matmul(X.T, self.inputs, precision=precision)
        X = rs[:, None] * self.inputs - jnp.matmul(R.T, self.inputs, precision=precision)
        return jnp.matmul(self.candidates.T, X, precision=precision)

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


def batch_constraints(tasks: Task, ps, P: int) -> Constraints:
    """`constraints` over a leading ensemble axis, each instance with its own `p`."""
    return _batch(tasks, jnp.asarray(ps, jnp.int32), int(P))


@eqx.filter_jit
def _batch(tasks, ps, P):
    return jax.vmap(lambda t, p: constraints(t, p, P))(tasks, ps)
