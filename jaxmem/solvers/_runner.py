"""Ensemble solvers and the one compacting runner they share.

A solver is an `eqx.Module` with `init(instance) -> state`, `step(instance, state) -> state` and
`done(state) -> bool`, written for one instance and vmapped by the runner. The runner drives
jitted chunks of at most `chunk` steps; inside a chunk a finished instance is frozen (its state
no longer changes), and between chunks the finished instances leave the batch, the rest being
re-batched into a bucket, a power of two (or of `base`). An instance's trajectory therefore
depends neither on the chunk size nor on the rest of the ensemble, up to float rounding: XLA
compiles each batch size on its own, so another bucket can change the last bits of a margin or
an iteration count, never a status.
A chunk ends once all its instances are finished, or (`early`) once one of them is. Its length is
a traced loop bound, so trimming the last chunk to the budget (`remaining`) compiles nothing new:
compiles stay at one per (bucket, instance shape).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int

from .._parallel import ensemble_mesh, shard_ensemble
from .._validate import check_int


class AbstractEnsembleSolver(eqx.Module):
    """One instance's iterative solver; `run_ensemble` vmaps, chunks and compacts it."""

    @abc.abstractmethod
    def init(self, instance) -> Any:
        """The starting state of one instance."""

    @abc.abstractmethod
    def step(self, instance, state) -> Any:
        """One iteration. Under `vmap` it is evaluated on finished instances too, and the runner
        keeps their state (`done` freezes it), so it must not fail on a finished state."""

    @abc.abstractmethod
    def done(self, state) -> Bool[Array, ""]:
        """Whether the instance has finished (solved, failed or out of budget)."""

    def settle(self, instance, state) -> Any:
        """Once per chunk, after its steps: work that a step would otherwise repeat at every
        iteration under `vmap` (where both branches of a `cond` run), e.g. starting a new phase
        (default: nothing)."""
        return state

    def remaining(self, state) -> Int[Array, ""]:
        """An upper bound on the steps the instance still takes (default: none known); the
        runner trims its last chunk to it, so no step is computed past a budget."""
        return jnp.asarray(np.iinfo(np.int32).max, jnp.int32)


# A batch of decisions whose steps cost less than this (P^2 d per instance, 4x for the DP's
# per-input candidates, 4x again for a rank-m decision) compiles one batch size: there a
# compilation costs more than the steps compaction saves (docs/decisions.md, "SMALL_WORK").
SMALL_WORK = 4e6

# Batches worth compacting are compacted into buckets of powers of BUCKET_BASE: each bucket
# compiles its own chunk, start and certificate programs (docs/decisions.md, "BUCKET_BASE").
BUCKET_BASE = 4


def worth_compacting(P: int, d: int, *, shared: bool, factored: bool) -> bool:
    """Whether a batch of decisions on `P` padded rows in dimension `d` should drop its finished
    instances between chunks (`SMALL_WORK`): its steps cost more than the compilations of the
    smaller buckets."""
    return P * P * d * (1 if shared else 4) * (4 if factored else 1) >= SMALL_WORK


def bucket(n: int, cap: int, base: int = 2) -> int:
    """The smallest power of `base` `>= n`, at most `cap`."""
    size = 1
    while size < n:
        size *= base
    return min(cap, size)


@eqx.filter_jit
def init_states(solver, instances):
    """`vmap(solver.init)` over a batch of instances."""
    return jax.vmap(solver.init)(instances)


@eqx.filter_jit
def gather(tree, idx):
    """`tree[idx]` on every leaf, in one compiled program."""
    return jax.tree.map(lambda x: x[idx], tree)


@eqx.filter_jit
def scatter(tree, idx, part):
    """`tree` with `tree[idx] = part` on every leaf, in one compiled program."""
    return jax.tree.map(lambda a, b: a.at[idx].set(b), tree, part)


@eqx.filter_jit
def _status(solver, state):
    return jax.vmap(solver.done)(state), jax.vmap(solver.remaining)(state)


@eqx.filter_jit
def _chunk(solver, mesh, instances, state, idx, length, whole: bool = False, early: bool = False):
    """At most `length` steps of the instances `idx` (gathered, run, scattered back), their `done`
    and `remaining`, and the steps run; `whole`: `idx` is every instance in order, which are run in
    place (a gather would copy every array of the batch at every chunk); `early`: stop after the
    step at which one of them finishes."""
    take = (lambda tree: tree) if whole else (lambda tree: jax.tree.map(lambda x: x[idx], tree))

    def step(inst, st):
        new = solver.step(inst, st)
        return jax.tree.map(lambda a, b: jnp.where(solver.done(st), b, a), new, st)

    def run(insts, sts, length):
        done = jax.vmap(solver.done)
        done0 = done(sts)

        def cond(carry):
            i, st = carry
            go = (i < length) & ~jnp.all(done(st))
            return go & ~jnp.any(done(st) & ~done0) if early else go

        n, st = jax.lax.while_loop(cond, lambda c: (c[0] + 1, jax.vmap(step)(insts, c[1])), (0, sts))
        return jax.vmap(solver.settle)(insts, st), jnp.full(done0.shape, n)

    part, steps = shard_ensemble(run, mesh, 2)(take(instances), take(state), length)
    state = part if whole else jax.tree.map(lambda a, b: a.at[idx].set(b), state, part)
    return state, jax.vmap(solver.done)(part), jax.vmap(solver.remaining)(part), steps.max()


def run_ensemble(
    solver: AbstractEnsembleSolver,
    instances,
    *,
    chunk: int = 50,
    state=None,
    progress: Callable[[int, int, int], None] | None = None,
    compact: bool = True,
    devices=None,
    refill: Callable[[np.ndarray, Any, Any], tuple[Any, Any, np.ndarray]] | None = None,
    base: int = 2,
    early: bool = False,
) -> Any:
    """Run `solver` on every instance (leading axis) until each is `done`.

    **Arguments:**

    - `solver`: an `AbstractEnsembleSolver`; its `done` must become true within a finite budget.
    - `instances`: a pytree of arrays with a leading ensemble axis.
    - `chunk`: the most steps per jitted chunk between compactions.
    - `state`: a starting state (default `vmap(solver.init)(instances)`).
    - `progress`: optional callable `(n_active, n_total, steps)` called after each chunk.
    - `compact`: drop finished instances between chunks (`False`: every chunk runs the whole
      ensemble, finished members frozen, as a plain vmapped loop does; for benchmarks).
    - `devices`: split each chunk's batch over these (`ensemble_mesh`; the bucket is rounded up
      to a multiple of their number).
    - `refill`: optional `(finished, instances, state) -> (instances, state, restarted)`, called
      with the indices that finished (at their start or in the last chunk); it may give any of
      them new work (a new instance and its fresh state; shapes may change) and returns those
      indices, which rejoin the batch (and are handed back at once if finished at their start).
      A stream of short problems then keeps the batch full instead of waiting for the
      slowest of a round.
    - `base`: the buckets are powers of `base` (each bucket compiles its own chunk).
    - `early`: a chunk also ends at the step where one of its instances finishes, so that
      instance leaves the batch (or takes new work) at once, and `chunk` can be long: a batch
      whose arrays are large then runs few chunks, each of which copies them.

    **Returns:** `(state, work)`: the final state, stacked over the ensemble axis in the input
    order, and the instance-steps computed (batch size times the steps of each chunk, summed
    over chunks, padding and frozen members included).
    """
    chunk = check_int("chunk", chunk, 1)
    mesh = ensemble_mesh(devices)
    n_dev = 1 if mesh is None else mesh.size
    n = jax.tree.leaves(instances)[0].shape[0]
    state = init_states(solver, instances) if state is None else state
    fin, left = (np.array(x) for x in _status(solver, state))

    def settle(newly, instances, state, fin, left):
        # hand finished instances to `refill`, and again those whose new work is finished at
        # its start, until none is: no instance finishes unseen
        while refill is not None and newly.size:
            instances, state, again = refill(newly, instances, state)
            again = np.asarray(again, int)
            if not again.size:
                break
            fin, left = (np.array(x) for x in _status(solver, state))
            newly = again[fin[again]]
        return instances, state, fin, left

    instances, state, fin, left = settle(np.flatnonzero(fin), instances, state, fin, left)
    active = np.flatnonzero(~fin)
    work = 0
    while active.size:
        size = -(-(bucket(active.size, n, base) if compact else n) // n_dev) * n_dev
        # a bucket as large as the batch runs the batch in place, finished members frozen: a
        # gather would copy every array of the batch at every chunk and save no step
        whole = size == n
        rows = active if compact and not whole else np.arange(n)
        idx = np.concatenate([rows, np.full(size - rows.size, rows[-1])])
        length = int(min(chunk, left[active].max()))
        state, fin_part, left_part, steps = _chunk(
            solver, mesh, instances, state, jnp.asarray(idx), jnp.asarray(length, jnp.int32), whole, early
        )
        newly = rows[np.asarray(fin_part)[: rows.size] & ~fin[rows]]
        fin[rows] = np.asarray(fin_part)[: rows.size]
        left[rows] = np.asarray(left_part)[: rows.size]
        instances, state, fin, left = settle(newly, instances, state, fin, left)
        active = np.flatnonzero(~fin)
        steps = int(steps)
        work += size * steps
        if progress is not None:
            progress(active.size, n, steps)
    return state, work
