"""The paper's training protocol as an ensemble solver, on padded (masked) constraints.

Adam on the mean softmax cross-entropy over the `p` real candidates, full batch, from a small
random initialisation; at every step the instance first evaluates its loss and stored flags at
the current weights and stops once it stores all `p` (or its loss or gradient is not finite), so
it follows the same trajectory as `jaxmem.train` on the unpadded task. Padded rows and columns
never enter the softmax: their logits are `-inf` for the real rows and their rows are dropped
from the mean.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jaxtyping import Array, Bool

from .._models import Factored, FullRank
from .._train import TrainConfig
from ._constraints import Constraints
from ._runner import AbstractEnsembleSolver


class _Instance(eqx.Module):
    cons: Constraints
    init_key: Array


class _State(eqx.Module):
    params: eqx.Module
    opt_state: optax.OptState
    t: Array
    done_step: Array
    diverged: Array
    loss: Array


def _finite(tree):
    leaves = jax.tree.leaves(eqx.filter(tree, eqx.is_inexact_array))
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


def masked_ce(cons: Constraints, W, precision=lax.Precision.DEFAULT):
    """Mean softmax cross-entropy over the real rows and columns, and whether all are stored."""
    s = cons.scores(W, precision)
    P = s.shape[0]
    idx = jnp.arange(P)
    real = idx < cons.p
    logits = jnp.where(real[None, :] | ~real[:, None], s, -jnp.inf)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, idx)
    loss = jnp.sum(jnp.where(real, ce, 0.0)) / cons.p
    sg = lax.stop_gradient(s)
    best = jnp.max(jnp.where(cons.mask, sg, -jnp.inf), axis=1)
    stored = jnp.all(jnp.where(real, jnp.diagonal(sg) > best, True))
    return loss, stored


class AdamProtocol(AbstractEnsembleSolver):
    """Adam on the cross-entropy until all are stored or the budget is spent."""

    config: TrainConfig
    rank: int | None = eqx.field(static=True, default=None)

    def _opt(self):
        return optax.inject_hyperparams(self.config.optimizer)(learning_rate=self.config.lr)

    def init(self, inst: _Instance) -> _State:
        d = inst.cons.inputs.shape[-1]
        dtype = inst.cons.inputs.dtype
        if self.rank is None:
            params = FullRank.init(inst.init_key, d, init_scale=self.config.init_scale, dtype=dtype)
        else:
            params = Factored.init(
                inst.init_key, d, m=self.rank, init_scale=self.config.init_scale, dtype=dtype
            )
        z = jnp.array(0, jnp.int32)
        return _State(
            params,
            self._opt().init(params),
            z,
            jnp.array(-1, jnp.int32),
            jnp.array(False),
            jnp.array(jnp.inf, dtype),
        )

    def step(self, inst: _Instance, st: _State) -> _State:
        steps = self.config.steps

        def loss_fn(params):
            return masked_ce(inst.cons, params.weight())

        (loss, stored), grads = jax.value_and_grad(loss_fn, has_aux=True)(st.params)
        bad = ~(jnp.isfinite(loss) & _finite(grads))
        stored = stored & ~bad
        update = ~stored & ~bad & (st.t < steps)
        updates, opt_state = self._opt().update(grads, st.opt_state, st.params)
        params = eqx.apply_updates(st.params, updates)
        keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(update, a, b), new, old)
        return _State(
            keep(params, st.params),
            keep(opt_state, st.opt_state),
            st.t + 1,
            jnp.where(stored, st.t, st.done_step),
            st.diverged | bad,
            loss,
        )

    def done(self, st: _State) -> Bool[Array, ""]:
        return (st.done_step >= 0) | st.diverged | (st.t > self.config.steps)
