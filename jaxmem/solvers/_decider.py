"""The certified deciders as one protocol (`AbstractDecider`), their registry `DECIDERS`, and
`auto` (`choose_decider`, `decider_for`): which one runs.

Both decide the same question with certificates that are recomputed in float64, so they differ
only where the best normalised margin lies in `(0, tol)`: there both answers are true (storable
with a tiny margin, and no margin above `tol`). The dense decider's iteration costs `O(p^2 d)`,
the working set's `O(p d^2 + p k d)` plus an `O(p^2 d)` outer pass every `outer_every`
iterations, so the working set wins once `p / d` is large, which at the capacity means large
`d`; `choose_decider`'s thresholds are measured (docs/decisions.md, "The decider auto").
"""

from __future__ import annotations

import abc
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp

from .._models import resolve_kappa
from .._tasks import Task
from .._validate import check_shape, InvalidArgument
from ._constraints import batch_constraints, compaction, task_prefixes
from ._decide import conclude, DecideConfig, DECIDERS, Decision, decision_instances, resize_states
from ._runner import run_ensemble
from ._tail import conclude_tail, resize_tail, SMOOTH, tail_instances
from ._working_set import (
    conclude_working_set,
    drop_candidates,
    hold_candidates,
    resize_working_set,
    working_set_instances,
)


# The smallest d at which the working-set decider is chosen for the OP and for the DP (measured).
WORKING_SET_FROM = {"op": 128, "dp": 64}


class AbstractDecider(eqx.Module):
    """A certified decider, as a search drives it: it *is* its settings (`config`, and `rank`
    for a factored memory), builds the ensemble solver and its batch, and certifies finished
    instances in float64.

    - `instances(tasks, ps, P, W0=None, hold=True)`: the solver and its batch (prefixes `ps`
      padded to `P` rows; `hold`: candidates may be held in memory);
    - `conclude(solver, inst, state)`: the `Decision` of finished instances (certificates
      recomputed in float64);
    - `resize(state, P)`: re-pad running states;
    - `holds(inst)`, `drop(inst)`: whether a batch holds its DP candidates in memory (then the
      search runs it whole until its running instances fit a quarter of it, and certifies a few
      at a time), and free them before the batch is built again at another padding.

    Class attributes: `name` (the registry key, `DecideConfig.decider`) and `full_rank_only`.
    A new decider is one subclass and one `register_decider` line."""

    config: DecideConfig
    rank: int | None = None
    name: ClassVar[str]
    full_rank_only: ClassVar[bool] = False

    @property
    def chunk(self) -> int:
        """The runner's most steps per chunk (a chunk also ends where an instance finishes)."""
        return self.config.chunk

    @abc.abstractmethod
    def instances(self, tasks, ps, P, W0=None, hold=True):
        """The ensemble solver and its batch."""

    @abc.abstractmethod
    def conclude(self, solver, inst, state) -> Decision:
        """The certified `Decision` of finished instances."""

    @abc.abstractmethod
    def resize(self, state, P):
        """Running states re-padded to `P` rows."""

    def holds(self, inst) -> bool:
        return False

    def drop(self, inst) -> None:
        return None


class Dense(AbstractDecider):
    """The dense decider (`Decider`): every iteration touches all `p (p - 1)` margins; full rank,
    or rank `m` by its rank phases."""

    name: ClassVar[str] = "dense"

    def instances(self, tasks, ps, P, W0=None, hold=True):
        cons = batch_constraints(tasks, ps, P, stream=self.config.stream, block=self.config.block)
        return decision_instances(cons, rank=self.rank, W0=W0, config=self.config)

    def conclude(self, solver, inst, state) -> Decision:
        return conclude(solver, inst, state)

    def resize(self, state, P):
        return resize_states(state, P)


class WorkingSet(AbstractDecider):
    """The working-set decider (`WorkingSetDecider`): inner iterations on `k` competitors per
    input, outer passes over all of them; full rank only. A DP batch may hold its candidates."""

    name: ClassVar[str] = "working-set"
    full_rank_only: ClassVar[bool] = True

    def instances(self, tasks, ps, P, W0=None, hold=True):
        cons = batch_constraints(tasks, ps, P, stream=True, block=self.config.block)
        return working_set_instances(hold_candidates(cons) if hold else cons, W0=W0, config=self.config)

    def conclude(self, solver, inst, state) -> Decision:
        return conclude_working_set(solver, inst, state)

    def resize(self, state, P):
        return resize_working_set(state, P)

    def holds(self, inst) -> bool:
        return inst.cons.held

    def drop(self, inst) -> None:
        drop_candidates(inst.cons)


class Tail(AbstractDecider):
    """The tail-average decider (`TailDecider`) of the criterion `tail:r`: full rank, on dense
    constraints; chosen by the criterion, not by `DecideConfig.decider`. `smooth`: the smoothed
    ReLU's half-width `delta` (`SMOOTH`; docs/decisions.md)."""

    r: float = 0.1
    smooth: float = SMOOTH
    name: ClassVar[str] = "tail"
    full_rank_only: ClassVar[bool] = True

    def instances(self, tasks, ps, P, W0=None, hold=True):
        cons = batch_constraints(tasks, ps, P, stream=False, block=self.config.block)
        return tail_instances(cons, self.r, W0=W0, config=self.config, smooth=self.smooth)

    def conclude(self, solver, inst, state) -> Decision:
        return conclude_tail(solver, inst, state)

    def resize(self, state, P):
        return resize_tail(state, P)


def register_decider(cls: type[AbstractDecider]) -> type[AbstractDecider]:
    """Add a decider class to `DECIDERS` under its `name` (what `DecideConfig.decider` and the
    command line's `--decider` accept). **Returns:** `cls`."""
    if not (isinstance(cls, type) and issubclass(cls, AbstractDecider)):
        raise InvalidArgument(f"decider must be an AbstractDecider subclass, got {cls!r}")
    if cls.name == "auto":
        raise InvalidArgument("decider name 'auto' is reserved for choose_decider")
    DECIDERS[cls.name] = cls
    return cls


register_decider(Dense)
register_decider(WorkingSet)

# The smallest d at which the working-set decider is chosen for the OP and for the DP (measured).
WORKING_SET_FROM = {"op": 128, "dp": 64}


def choose_decider(config: DecideConfig, *, d: int, problem: str, factored: bool = False) -> str:
    """The name of the decider that runs for `config.decider`: that decider, or for `"auto"` the
    working set from `WORKING_SET_FROM[problem]` on and the dense one below; a factored memory is
    always decided densely with `"auto"` (its rank phases need the dense operator), and a
    full-rank-only decider is refused for it.

    **Arguments:** `config`: a `DecideConfig`; `d`: the dimension; `problem`: `"op"` or `"dp"`;
    `factored`: whether the memory is `Q R^T`.

    **Returns:** a key of `DECIDERS`.
    """
    if config.decider != "auto":
        if factored and DECIDERS[config.decider].full_rank_only:
            raise InvalidArgument(
                f"decider {config.decider!r} decides full-rank memories only; use 'dense' or 'auto'"
            )
        return config.decider
    if factored:
        return "dense"
    return "working-set" if d >= WORKING_SET_FROM.get(problem, 64) else "dense"


def decider_for(config: DecideConfig, *, d: int, problem: str, rank: int | None = None) -> AbstractDecider:
    """The decider that decides these instances (`choose_decider`), with its settings."""
    name = choose_decider(config, d=d, problem=problem, factored=rank is not None)
    return DECIDERS[name](config=config, rank=rank)


def criterion_decider(criterion, config: DecideConfig, *, d: int, problem: str, rank=None) -> AbstractDecider:
    """The decider of a criterion's storability: for `None` or `"all"` (top-1) `decider_for`,
    for `"tail:r"` the `Tail` decider, for an `AbstractCriterion` its own `decider`. An accuracy
    criterion has no certified decider (it is Adam's)."""
    if criterion is None or criterion == "all":
        return decider_for(config, d=d, problem=problem, rank=rank)
    if not isinstance(criterion, str):
        return criterion.decider(config, d=d, problem=problem, rank=rank)
    head, _, x = criterion.partition(":")
    if head != "tail":
        raise InvalidArgument(
            f"criterion must be 'all' or 'tail:r' for a certified decision, got {criterion!r}"
        )
    try:
        r = float(x)
    except ValueError:
        raise InvalidArgument(f"criterion {criterion!r}: {x!r} is not a number") from None
    if not 0.0 < r <= 1.0:
        raise InvalidArgument(f"criterion {criterion!r}: r must be in (0, 1]")
    if rank is not None:
        raise InvalidArgument("criterion: the tail average is decided for full-rank memories only")
    return Tail(config=config, r=r)


def decide(
    tasks: Task,
    *,
    model: str = "full",
    kappa: float | None = None,
    p=None,
    config: DecideConfig = DecideConfig(),
    W0=None,
    criterion=None,
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
    - `criterion`: what counts as stored, a text (`"all"`, the default, or `"tail:r"`: the
      target above the mean of its `ceil(r (p - 1))` best competitors) or an `AbstractCriterion`;
      its `decider` decides.

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
    rank = m if model == "factored" else None
    decider = criterion_decider(criterion, config, d=d, problem=tasks.problem, rank=rank)
    solver, inst = decider.instances(tasks, jnp.asarray(ps), int(ps.max()), W0=W0)
    how = compaction(inst.cons, factored=model == "factored")
    st, _ = run_ensemble(solver, inst, chunk=decider.chunk, early=True, **how)
    return decider.conclude(solver, inst, st)
