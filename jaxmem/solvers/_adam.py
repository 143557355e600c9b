"""The paper's training protocol as an ensemble solver (docs/science.md, 2.6): full-batch Adam
(or any `optax` optimizer) on the cross-entropy of each memory, with its settings `TrainConfig`.

At every step each instance first evaluates its loss and stored flags at the current weights;
an instance that stores all its associations (or whose loss is not finite) is frozen from then
on. `run_ensemble` drives jitted chunks and drops finished instances between them, so an
instance's trajectory depends neither on the chunk size nor on the rest of the ensemble, and
an ensemble costs the sum of its members' steps, not `n` times its slowest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Bool, Float, Int

from .._criteria import AbstractCriterion, criterion_of, TailAverage
from .._loss import cross_entropy
from .._metrics import HIGHEST
from .._names import DEFAULT_INIT_SCALE, DEFAULT_LR, DEFAULT_STEPS, PRECISIONS
from .._tasks import Task
from .._validate import check_choice, check_int, check_positive, check_real, InvalidArgument
from ._runner import AbstractEnsembleSolver


class TrainConfig(eqx.Module):
    """What a training run does, as one validated value (docs/science.md, 2.6: the paper's
    protocol is Adam on the mean softmax cross-entropy, full batch, stopped at the first step
    at which every association is stored).

    **Arguments:**

    - `steps`: the update budget; each instance is evaluated at most `steps + 1` times.
    - `lr`: the learning rate (`train(..., lr=)` may give one per instance).
    - `init_scale`: `W` starts with entries `N(0, init_scale^2 / d)`.
    - `optimizer`: an optax `GradientTransformation` factory taking `learning_rate`.
    - `chunk`: the most steps per jitted loop between host checks (the last one is trimmed to
      the budget).
    - `stream`, `block`: force the dense or streaming loss (`None`: `use_stream`'s rule), and
      the streaming column block.
    - `precision`: of the optimisation's matmuls, a name in `PRECISIONS` (`"highest"`, `"tf32"`,
      `"bf16"`); stored flags and every decision are evaluated at HIGHEST whatever it is.
    - `early_stop`: an instance stops once it stores all or diverges (`False`: every instance
      runs the whole budget, frozen once stored; for throughput benchmarks).
    - `compact`: finished instances leave the batch between chunks (`False`: for benchmarks).
    - `accuracy`: the success criterion, the fraction of the `n` associations that must be
      stored (1: all of them, the paper's; 0.99: Nichani, Lee and Bietti's early stop); the
      criterion itself is `criterion_of(accuracy)` (`AllStored` or `Accuracy`).
    - `tail`: where given, `r` of the tail-average criterion (`TailAverage(r)`: every target
      above the mean of its `ceil(r (n - 1))` best competitors), in place of `accuracy`'s.

    A record stores `identity()`: every field.
    """

    steps: int = DEFAULT_STEPS
    lr: float = DEFAULT_LR
    init_scale: float = DEFAULT_INIT_SCALE
    optimizer: Callable[..., optax.GradientTransformation] = eqx.field(static=True, default=optax.adam)
    chunk: int = 100
    stream: bool | None = None
    block: int = 256
    precision: str = "highest"
    early_stop: bool = True
    compact: bool = True
    accuracy: float = 1.0
    tail: float | None = None

    def __check_init__(self):
        check_int("steps", self.steps, 0)
        check_positive("lr", self.lr)
        check_positive("init_scale", self.init_scale)
        check_int("chunk", self.chunk, 1)
        check_int("block", self.block, 1)
        if not callable(self.optimizer):
            raise InvalidArgument(
                f"optimizer must be an optax factory such as optax.adam, got {self.optimizer!r}"
            )
        try:
            made = self.optimizer(learning_rate=self.lr)
        except TypeError as e:
            raise InvalidArgument(f"optimizer must take learning_rate, as optax.adam does: {e}") from None
        if not isinstance(made, optax.GradientTransformation):
            raise InvalidArgument(
                f"optimizer must return an optax GradientTransformation, got {type(made).__name__}"
            )
        check_choice("precision", self.precision, PRECISIONS)
        check_real("accuracy", self.accuracy, low=0.0, low_open=True, high=1.0)
        if self.tail is not None:
            check_real("tail", self.tail, low=0.0, low_open=True, high=1.0)
            if self.accuracy != 1.0:
                raise InvalidArgument("tail: give either an accuracy or a tail criterion, not both")
        if self.stream not in (None, True, False):
            raise InvalidArgument(f"stream must be None, True or False, got {self.stream!r}")

    def criterion(self) -> AbstractCriterion:
        """What counts as stored for these settings (`criterion_of`): the one place a new
        criterion's setting is read."""
        if self.tail is not None:
            return TailAverage(float(self.tail))
        return criterion_of(self.accuracy)

    def identity(self) -> dict:
        """Every field, as a record stores it (the optimizer by its name; `tail` only where
        given, so the settings of a top-1 run keep the identity they had before it existed)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if out["tail"] is None:
            del out["tail"]
        out["optimizer"] = getattr(self.optimizer, "__name__", repr(self.optimizer))
        return {k: v.item() if isinstance(v, np.generic) else v for k, v in out.items()}


@eqx.filter_jit
def criterion_hits(crit, params, tasks, n):
    """Whether each memory meets a criterion that is not top-1, from its score matrix."""

    def one(prm, task):
        S = task.score_matrix(prm.project(task.inputs, precision=HIGHEST), HIGHEST)
        return crit.met(crit.hits(S, n), n)

    return jax.lax.map(lambda x: one(*x), (params, tasks))


def finite_tree(tree):
    leaves = jax.tree.leaves(eqx.filter(tree, eqx.is_inexact_array))
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


class TrainInstance(eqx.Module):
    """One instance of the protocol: a task, how many of its associations to store (`n`, a
    prefix: the rest is padding, masked exactly), and its learning rate."""

    task: Task
    n: Int[Array, ""]
    lr: Float[Array, ""]


class TrainState(eqx.Module):
    params: eqx.Module
    opt_state: optax.OptState
    t: Int[Array, ""]  # evaluations so far
    done_step: Int[Array, ""]  # first step at which all were stored, -1 if not (yet)
    diverged: Bool[Array, ""]
    loss: Float[Array, ""]


class AdamProtocol(AbstractEnsembleSolver):
    """The paper's protocol (docs/science.md, 2.6) as an ensemble solver: at every step the
    instance evaluates its loss and stored flags at the current weights, stops once it stores
    all `n` (or its loss or gradient is not finite), and otherwise takes one optimizer step,
    for at most `config.steps` updates (`steps + 1` evaluations).

    **Arguments:** `config`: a `TrainConfig`; `memory`: an `AbstractMemory` class; `rank`: `m`
    (`d` for `FullRank`).

    The budget is held as an array, so runs with other budgets share the compiled chunks.
    """

    steps: Int[Array, ""]
    config: TrainConfig = eqx.field(static=True)
    memory: type = eqx.field(static=True)
    rank: int = eqx.field(static=True)

    def __init__(self, config: TrainConfig, memory: type, rank: int):
        self.steps = jnp.asarray(config.steps, jnp.int32)
        # the knobs the step does not read are normalised away, so they share compiles too
        self.config = dataclasses.replace(config, steps=0, chunk=1, compact=True)
        self.memory = memory
        self.rank = rank

    def _opt(self, lr):
        return optax.inject_hyperparams(self.config.optimizer)(learning_rate=lr)

    def init(self, inst: TrainInstance) -> TrainState:
        task = inst.task
        params = self.memory.init(
            task.init_key, task.d, m=self.rank, init_scale=self.config.init_scale, dtype=task.inputs.dtype
        )
        return TrainState(
            params,
            self._opt(inst.lr).init(params),
            jnp.array(0, jnp.int32),
            jnp.array(-1, jnp.int32),
            jnp.array(False),
            jnp.array(jnp.inf, task.inputs.dtype),
        )

    def step(self, inst: TrainInstance, st: TrainState) -> TrainState:
        cfg = self.config

        def loss_fn(params):
            V = params.project(inst.task.inputs, precision=cfg.precision)
            return cross_entropy(
                V, inst.task, n=inst.n, stream=cfg.stream, block=cfg.block, precision=cfg.precision
            )

        (loss, sc), grads = jax.value_and_grad(loss_fn, has_aux=True)(st.params)
        live = (st.done_step < 0) & ~st.diverged
        bad = ~(jnp.isfinite(loss) & finite_tree(grads))
        # padded rows count as stored: the criterion is over the first n
        crit = cfg.criterion()
        if crit.top1:
            hits = jnp.sum(sc.stored) - (sc.stored.shape[0] - inst.n)
        else:
            V = st.params.project(inst.task.inputs, precision=HIGHEST)
            hits = crit.hits(inst.task.score_matrix(V, HIGHEST), inst.n)
        stored = crit.met(hits, inst.n) & ~bad
        update = live & ~stored & ~bad & (st.t < self.steps)
        # the learning rate lives in the injected hyperparameters of opt_state
        updates, opt_state = self._opt(0.0).update(grads, st.opt_state, st.params)
        params = eqx.apply_updates(st.params, updates)
        keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(update, a, b), new, old)
        return TrainState(
            keep(params, st.params),
            keep(opt_state, st.opt_state),
            st.t + 1,
            jnp.where(live & stored, st.t, st.done_step),
            st.diverged | (live & bad),
            jnp.where(live, loss, st.loss),
        )

    def done(self, st: TrainState) -> Bool[Array, ""]:
        over = st.t > self.steps
        if not self.config.early_stop:
            return over
        return over | (st.done_step >= 0) | st.diverged

    def remaining(self, st: TrainState) -> Int[Array, ""]:
        return self.steps + 1 - st.t
