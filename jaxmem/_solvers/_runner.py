"""Ensemble solvers and the one compacting runner they share.

A solver is an `eqx.Module` with `init(instance) -> state`, `step(instance, state) -> state` and
`done(state) -> bool`, written for one instance and vmapped by the runner. The runner drives
jitted chunks of `chunk` steps; inside a chunk a finished instance is frozen (its state no
longer changes), and between chunks the finished instances leave the batch, the rest being
re-batched into a power-of-two bucket. An instance's trajectory therefore depends neither on
the chunk size nor on the rest of the ensemble, and compiles stay bounded (one per bucket).
"""

from __future__ import annotations

import abc
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool

from .._validate import check_int


class AbstractEnsembleSolver(eqx.Module):
    """One instance's iterative solver; `run_ensemble` vmaps, chunks and compacts it."""

    @abc.abstractmethod
    def init(self, instance) -> Any:
        """The starting state of one instance."""

    @abc.abstractmethod
    def step(self, instance, state) -> Any:
        """One iteration (called only while `done(state)` is false)."""

    @abc.abstractmethod
    def done(self, state) -> Bool[Array, ""]:
        """Whether the instance has finished (solved, failed or out of budget)."""


def bucket(n: int, cap: int) -> int:
    """The smallest power of two `>= n`, at most `cap`."""
    return min(cap, 1 << max(0, (n - 1).bit_length()))


@eqx.filter_jit
def _init(solver, instances):
    return jax.vmap(solver.init)(instances)


@eqx.filter_jit
def _chunk(solver, instances, state, idx, chunk: int):
    """`chunk` steps of the instances `idx` (gathered, run, scattered back) and their `done`."""
    take = lambda tree: jax.tree.map(lambda x: x[idx], tree)

    def one(inst, st):
        def body(st, _):
            new = solver.step(inst, st)
            fin = solver.done(st)
            return jax.tree.map(lambda a, b: jnp.where(fin, b, a), new, st), None

        return jax.lax.scan(body, st, None, length=chunk)[0]

    part = jax.vmap(one)(take(instances), take(state))
    state = jax.tree.map(lambda a, b: a.at[idx].set(b), state, part)
    return state, jax.vmap(solver.done)(part)


def run_ensemble(
    solver: AbstractEnsembleSolver, instances, *, chunk: int = 50, state=None, progress=None
) -> Any:
    """Run `solver` on every instance (leading axis) until each is `done`.

    **Arguments:**

    - `solver`: an `AbstractEnsembleSolver`; its `done` must become true within a finite budget.
    - `instances`: a pytree of arrays with a leading ensemble axis.
    - `chunk`: steps per jitted chunk between compactions.
    - `state`: a starting state (default `vmap(solver.init)(instances)`).
    - `progress`: optional callable `(n_active, n_total)` called after each chunk.

    **Returns:** the final state, stacked over the ensemble axis in the input order.
    """
    chunk = check_int("chunk", chunk, 1)
    n = jax.tree.leaves(instances)[0].shape[0]
    state = _init(solver, instances) if state is None else state
    active = np.flatnonzero(~np.asarray(jax.vmap(solver.done)(state)))
    while active.size:
        size = bucket(active.size, n)
        idx = np.concatenate([active, np.full(size - active.size, active[-1])])
        state, fin = _chunk(solver, instances, state, jnp.asarray(idx), chunk)
        active = active[~np.asarray(fin)[: active.size]]
        if progress is not None:
            progress(active.size, n)
    return state
