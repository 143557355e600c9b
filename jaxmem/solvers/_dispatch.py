"""The two certified deciders behind one seam: which one runs, and the parts a search needs.

Both decide the same question with certificates that are recomputed in float64, so they differ
only where the best normalised margin lies in `(0, tol)`: there both answers are true (storable
with a tiny margin, and no margin above `tol`). The dense decider's iteration costs `O(p^2 d)`,
the working set's `O(p d^2 + p k d)` plus an `O(p^2 d)` outer pass every `outer_every`
iterations, so the working set wins once `p / d` is large, which at the capacity means large
`d`; `choose_decider`'s thresholds are measured (docs/decisions.md, "The decider auto").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax.numpy as jnp

from .._models import resolve_kappa
from .._tasks import Task
from .._validate import check_shape, InvalidArgument
from ._constraints import batch_constraints, compaction, task_prefixes
from ._decide import conclude, DecideConfig, Decision, decision_instances, resize_states
from ._runner import run_ensemble
from ._working_set import (
    conclude_working_set,
    drop_candidates,
    hold_candidates,
    resize_working_set,
    working_set_instances,
)


# The smallest d at which the working-set decider is chosen for the OP and for the DP (measured).
WORKING_SET_FROM = {"op": 128, "dp": 64}


def choose_decider(config: DecideConfig, *, d: int, problem: str, factored: bool = False) -> str:
    """The decider that runs for `config.decider`: `"dense"` or `"working-set"`. `"auto"` picks
    the working set from `WORKING_SET_FROM[problem]` on; a factored memory is always decided
    densely (its rank phases need the dense operator).

    **Arguments:** `config`: a `DecideConfig`; `d`: the dimension; `problem`: `"op"` or `"dp"`;
    `factored`: whether the memory is `Q R^T`.

    **Returns:** `"dense"` or `"working-set"`.
    """
    if factored:
        if config.decider == "working-set":
            raise InvalidArgument(
                "decider 'working-set' decides full-rank memories only; use 'dense' or 'auto'"
            )
        return "dense"
    if config.decider != "auto":
        return config.decider
    return "working-set" if d >= WORKING_SET_FROM.get(problem, 64) else "dense"


class DeciderParts(eqx.Module):
    """What a search needs of a decider: `instances(tasks, ps, P, W0=None, hold=True)` gives the
    solver and its batch (prefixes `ps` padded to `P` rows; `hold`: candidates may be held),
    `conclude(solver, inst, state)` certifies finished instances, `resize(state, P)` re-pads
    running states, `chunk` is the runner's most steps per chunk (`config.chunk`; a chunk also
    ends where an instance finishes: `run_ensemble(early=True)`), and `name` says which one it is.

    A working-set batch may hold its DP candidates in memory (`hold_candidates`); then
    `holds(inst)` is true, the batch is run whole until its running instances fit a quarter of
    it, and its finished instances are certified a few at a time (a gather copies the candidates
    of the instances it takes), and
    `drop(inst)` frees them before the batch is built again at another padding."""

    name: str
    chunk: int
    instances: Callable[..., Any]
    conclude: Callable[..., Decision]
    resize: Callable[..., Any]
    holds: Callable[[Any], bool] = lambda inst: False
    drop: Callable[[Any], None] = lambda inst: None


def decider_parts(config: DecideConfig, *, d: int, problem: str, rank: int | None = None) -> DeciderParts:
    """The `DeciderParts` of the decider `choose_decider` picks."""
    name = choose_decider(config, d=d, problem=problem, factored=rank is not None)
    if name == "working-set":

        def instances(tasks, ps, P, W0=None, hold=True):
            cons = batch_constraints(tasks, ps, P, stream=True, block=config.block)
            return working_set_instances(hold_candidates(cons) if hold else cons, W0=W0, config=config)

        return DeciderParts(
            name,
            config.chunk,
            instances,
            conclude_working_set,
            resize_working_set,
            lambda inst: inst.cons.held,
            lambda inst: drop_candidates(inst.cons),
        )

    def instances(tasks, ps, P, W0=None, hold=True):
        cons = batch_constraints(tasks, ps, P, stream=config.stream, block=config.block)
        return decision_instances(cons, rank=rank, W0=W0, config=config)

    return DeciderParts(name, config.chunk, instances, conclude, resize_states)


def decide(
    tasks: Task,
    *,
    model: str = "full",
    kappa: float | None = None,
    p=None,
    config: DecideConfig = DecideConfig(),
    W0=None,
) -> Decision:
    """Decide, for each task of a batch, whether some memory stores all its associations.

    **Arguments:**

    - `tasks`: a batch from `make_tasks` (leading ensemble axis), OP or DP.
    - `model`: `"full"` (`W` in `R^{d x d}`) or `"factored"` (`W = Q R^T` of rank `m`).
    - `kappa`: the rank fraction `m / d` of a factored memory (rounded as `rank_of`).
    - `p`: decide the prefix of the first `p` associations of each task (an int, or one per
      task; default all of them). Nested tasks make this the task at `p`.
    - `config`: a `DecideConfig`; its `decider` picks the dense or the working-set decider.
    - `W0`: optional warm starts, `(n, d, d)`: each decision starts from the best multiple of
      its `W0` (`best_multiple`).

    **Returns:** a `Decision` with one entry per task.
    """
    ps = task_prefixes(tasks, p, model)
    d = tasks.inputs.shape[-1]
    if model == "factored" and config.stream:
        raise InvalidArgument(
            "config.stream: a factored memory is decided on dense constraints only (stream=True streams them)"
        )
    m, _ = resolve_kappa(model, d, kappa)
    if W0 is not None:
        check_shape("W0", W0, (ps.shape[0], d, d), "n tasks, d, d")
    parts = decider_parts(config, d=d, problem=tasks.problem, rank=m if model == "factored" else None)
    solver, inst = parts.instances(tasks, jnp.asarray(ps), int(ps.max()), W0=W0)
    how = compaction(inst.cons, factored=model == "factored")
    st, _ = run_ensemble(solver, inst, chunk=parts.chunk, early=True, **how)
    return parts.conclude(solver, inst, st)
