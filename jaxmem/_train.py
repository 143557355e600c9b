"""Full-batch training of an ensemble of memories, vmapped over instances.

A host loop drives jitted `lax.scan` chunks. At every step each instance first evaluates its
loss and stored flags at the current weights; an instance that stores all `p` (or whose loss
is not finite) is frozen from then on, so an instance's trajectory does not depend on the
chunk size or on the other members of the ensemble, and the host stops as soon as every
instance is frozen.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ._loss import cross_entropy
from ._metrics import ensemble_metrics, Metrics
from ._models import Factored, FullRank, memory_class, rank_of
from ._parallel import ensemble_mesh, pad_to, shard_ensemble, unpad
from ._tasks import Task
from ._validate import check_int, check_memory, check_positive, InvalidArgument


# Defaults chosen by the measurements in README "Training defaults".
DEFAULT_STEPS = 5000
DEFAULT_LR = 3e-2
DEFAULT_INIT_SCALE = 1e-3


class TrainState(eqx.Module):
    params: eqx.Module
    opt_state: optax.OptState
    done_step: jax.Array  # first step at which all were stored, -1 if not (yet)
    diverged: jax.Array
    loss: jax.Array


class TrainConfig(eqx.Module):
    """What a training run does, as one validated value (docs/science.md, 2.6: the paper's
    protocol is Adam on the mean softmax cross-entropy, full batch, stopped at the first step
    at which every association is stored).

    **Arguments:**

    - `steps`: the update budget; each instance is evaluated at most `steps + 1` times.
    - `lr`: the learning rate (`train(..., lr=)` may give one per instance).
    - `init_scale`: `W` starts with entries `N(0, init_scale^2 / d)`.
    - `optimizer`: an optax `GradientTransformation` factory taking `learning_rate`.
    - `chunk`: steps per jitted `lax.scan` between host checks (the last chunk is trimmed).
    - `stream`, `block`: force the dense or streaming loss (`None`: `use_stream`'s rule), and
      the streaming column block.
    - `early_stop`: stop once every instance is stored or diverged.

    The record identity of a run is `identity()`: the knobs that change its numbers.
    """

    steps: int = DEFAULT_STEPS
    lr: float = DEFAULT_LR
    init_scale: float = DEFAULT_INIT_SCALE
    optimizer: Callable[..., optax.GradientTransformation] = eqx.field(static=True, default=optax.adam)
    chunk: int = 100
    stream: bool | None = None
    block: int = 256
    early_stop: bool = True

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
        if self.stream not in (None, True, False):
            raise InvalidArgument(f"stream must be None, True or False, got {self.stream!r}")

    def identity(self) -> dict:
        """The knobs a record stores (and its id hashes): those that change the numbers."""
        out = dict(steps=int(self.steps), lr=float(self.lr), init_scale=float(self.init_scale))
        if self.optimizer is not optax.adam:
            out["optimizer"] = getattr(self.optimizer, "__name__", repr(self.optimizer))
        return out


# The training knobs a Hebbian record stores: the closed-form rule has none.
NO_TRAINING = dict(steps=0, lr=0.0, init_scale=0.0)


class _Config(eqx.Module):
    model: type = eqx.field(static=True)
    d: int = eqx.field(static=True)
    m: int = eqx.field(static=True)
    init_scale: float = eqx.field(static=True)
    optimizer: Callable = eqx.field(static=True)
    stream: bool | None = eqx.field(static=True)
    block: int = eqx.field(static=True)

    def init_model(self, key, dtype):
        return self.model.init(key, self.d, m=self.m, init_scale=self.init_scale, dtype=dtype)

    def opt(self, lr):
        return optax.inject_hyperparams(self.optimizer)(learning_rate=lr)


def _finite(tree):
    leaves = jax.tree.leaves(eqx.filter(tree, eqx.is_inexact_array))
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


def _step(cfg: _Config, task: Task, state: TrainState, t, steps):
    def loss_fn(params):
        V = params.project(task.inputs)
        return cross_entropy(V, task, stream=cfg.stream, block=cfg.block)

    (loss, sc), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    live = (state.done_step < 0) & ~state.diverged & (t <= steps)
    bad = ~(jnp.isfinite(loss) & _finite(grads))
    stored = sc.stored.all() & ~bad
    done_step = jnp.where(live & stored, t, state.done_step)
    diverged = state.diverged | (live & bad)
    update = live & ~stored & ~bad & (t < steps)
    updates, opt_state = cfg.opt(0.0).update(grads, state.opt_state, state.params)
    params = eqx.apply_updates(state.params, updates)
    keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(update, a, b), new, old)
    return TrainState(
        keep(params, state.params),
        keep(opt_state, state.opt_state),
        done_step,
        diverged,
        jnp.where(live, loss, state.loss),
    )


@eqx.filter_jit
def _chunk(cfg: _Config, mesh, tasks: Task, state: TrainState, t0, steps, length: int):
    def ensemble(tasks, state, t0, steps):
        def one(task, st):
            def body(st, t):
                return _step(cfg, task, st, t, steps), None

            return jax.lax.scan(body, st, t0 + jnp.arange(length))[0]

        return jax.vmap(one)(tasks, state)

    return shard_ensemble(ensemble, mesh, 2)(tasks, state, t0, steps)


@eqx.filter_jit
def _init(cfg: _Config, tasks: Task, lr):
    def one(task, lr):
        params = cfg.init_model(task.init_key, task.inputs.dtype)
        return TrainState(
            params,
            cfg.opt(lr).init(params),
            jnp.array(-1),
            jnp.array(False),
            jnp.array(jnp.inf, task.inputs.dtype),
        )

    return jax.vmap(one)(tasks, lr)


def _finite_list(x) -> list:
    return [float(v) if math.isfinite(v) else None for v in np.asarray(x, np.float64).ravel()]


class Outcome(eqx.Module):
    """What one instance ended with (host side): the result type of one memory on one task.

    Scores are normalised by `|W e_mu|` (docs/science.md 2.4); a non-finite number is `None`
    in `to_json`."""

    accuracy: float
    all_stored: bool
    steps_to_store: int | None  # the first step at which all were stored; None if never
    diverged: bool
    final_loss: float | None
    target_score: np.ndarray
    best_score: np.ndarray
    singular_values: np.ndarray

    def to_json(self, detail: bool = True) -> dict:
        """The record fields; `detail` adds the per-input scores and the singular values."""
        out = dict(
            accuracy=float(self.accuracy),
            all_stored=bool(self.all_stored),
            steps_to_store=self.steps_to_store,
            diverged=bool(self.diverged),
            final_loss=self.final_loss,
        )
        if detail:
            out.update(
                target_score=_finite_list(self.target_score),
                best_score=_finite_list(self.best_score),
                singular_values=_finite_list(self.singular_values),
            )
        return out


def outcomes(met: Metrics, *, accuracy, all_stored, steps_to_store, diverged, final_loss) -> list[Outcome]:
    """One `Outcome` per instance from ensemble metrics and the per-instance results."""
    loss = [float(x) if x is not None and math.isfinite(x) else None for x in final_loss]
    return [
        Outcome(
            accuracy=float(accuracy[i]),
            all_stored=bool(all_stored[i]),
            steps_to_store=steps_to_store[i],
            diverged=bool(diverged[i]),
            final_loss=loss[i],
            target_score=np.asarray(met.target[i]),
            best_score=np.asarray(met.best[i]),
            singular_values=np.asarray(met.singular_values[i]),
        )
        for i in range(len(accuracy))
    ]


class Run(eqx.Module):
    """Outcome of `train`, one entry per instance (numpy arrays, host side): the result type
    of an ensemble run; `outcomes()` splits it into one `Outcome` per instance."""

    model: eqx.Module
    metrics: Metrics
    accuracy: np.ndarray
    all_stored: np.ndarray
    steps_to_store: list  # int, or None if never stored
    final_loss: np.ndarray
    diverged: np.ndarray
    lr: np.ndarray
    steps_run: int
    evaluations: int  # loss evaluations per instance (at most steps + 1)
    seconds: float

    def outcomes(self) -> list[Outcome]:
        return outcomes(
            self.metrics,
            accuracy=self.accuracy,
            all_stored=self.all_stored,
            steps_to_store=self.steps_to_store,
            diverged=self.diverged,
            final_loss=self.final_loss,
        )

    def to_json(self, detail: bool = False) -> dict:
        """Per-instance lists of the outcome fields, and the run's totals."""
        outs = [o.to_json(detail) for o in self.outcomes()]
        per = {k: [o[k] for o in outs] for k in outs[0]} if outs else {}
        return dict(per, steps_run=self.steps_run, evaluations=self.evaluations, seconds=self.seconds)


def _learning_rates(lr, n: int) -> np.ndarray:
    """`lr` as `n` finite positive learning rates: one scalar for all, or one per instance."""
    if lr is None:
        raise InvalidArgument("lr must be a number or one per instance, got None")
    try:
        arr = np.asarray(lr, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidArgument(f"lr must be a number or one per instance, got {lr!r}") from None
    if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] != n):
        raise InvalidArgument(f"lr must be a scalar or {n} values (one per instance), got shape {arr.shape}")
    arr = np.broadcast_to(arr, (n,)).copy()
    if not np.all(np.isfinite(arr) & (arr > 0)):
        raise InvalidArgument(f"lr must be finite and > 0, got {arr.tolist()}")
    return arr


def train_bytes(n: int, d: int, p: int, m: int, dp_materialised: bool) -> float:
    """An estimate of the memory a training run holds: per instance the task (`2 p d`, plus
    the DP's `p^2 d` candidates when materialised), and the parameters with their gradient and
    two Adam moments (`4 * 2 d m`), in float32; the score block of one row block is small."""
    per = 2 * p * d + (p * p * d if dp_materialised else 0) + 8 * d * m + 2 * min(p, 256) * p
    return 4.0 * n * per


def train(
    model,
    tasks: Task,
    config: TrainConfig = TrainConfig(),
    *,
    lr=None,
    m: int | None = None,
    kappa: float | None = None,
    progress: bool = False,
    devices=None,
    **overrides,
) -> Run:
    """Train one memory per task in the batch `tasks` (leading axis `n`) as `config` says, on
    the mean softmax cross-entropy, full batch, until each instance stores all `p` or the
    budget is spent. An instance that stores all (or whose loss is not finite) is frozen, so a
    vmapped ensemble equals a loop of single runs.

    **Arguments:**

    - `model`: an `AbstractMemory` subclass (`FullRank`, `Factored`) or its registry name;
      `m` or `kappa` give a factored memory's rank.
    - `tasks`: a batch from `make_tasks`; each instance's initialisation comes from its task.
    - `config`: a `TrainConfig`; `**overrides` replace its fields (`steps=500` is
      `dataclasses.replace(config, steps=500)`, validated the same way).
    - `lr`: one learning rate per instance (default: `config.lr` for all).
    - `devices`: spread the ensemble over these (default: all local accelerators, see
      `ensemble_mesh`; padded to a multiple of their number).

    **Returns:** a `Run`.
    """
    config = dataclasses.replace(config, **overrides) if overrides else config
    if not isinstance(config, TrainConfig):
        raise InvalidArgument(f"config must be a TrainConfig, got {config!r}")
    if tasks.inputs.ndim != 3:
        raise InvalidArgument("tasks must be a batch from make_tasks (leading ensemble axis)")
    n, p, d = tasks.inputs.shape
    lr = _learning_rates(config.lr if lr is None else lr, n)
    cls = memory_class(model)
    if cls is FullRank and (m is not None or kappa is not None):
        raise InvalidArgument(f"m and kappa apply to Factored only, got m={m!r}, kappa={kappa!r}")
    rank = rank_of(d, m=m, kappa=kappa) if cls is Factored else d
    dp_table = getattr(tasks, "materialised", None) is not None
    check_memory("d, p and the ensemble size", train_bytes(n, d, p, rank, dp_table))
    steps, chunk = config.steps, config.chunk
    cfg = _Config(cls, d, rank, float(config.init_scale), config.optimizer, config.stream, config.block)
    t_start = time.perf_counter()
    mesh = ensemble_mesh(devices)
    n_dev = 1 if mesh is None else mesh.size
    run_tasks, _ = pad_to(tasks, n, n_dev)
    state = _init(cfg, run_tasks, jnp.asarray(pad_to(jnp.asarray(lr, jnp.float32), n, n_dev)[0]))
    # steps + 1 evaluations in all (the last one only checks): whole chunks, then a trimmed one
    lengths = [chunk] * ((steps + 1) // chunk) + ([(steps + 1) % chunk] if (steps + 1) % chunk else [])
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=steps + 1, unit="step", desc=f"train d={d} p={p} n={n}", leave=False)
    t0 = 0
    for length in lengths:
        state = _chunk(cfg, mesh, run_tasks, state, jnp.asarray(t0), jnp.asarray(steps), length)
        t0 += length
        finished = np.asarray((state.done_step >= 0) | state.diverged)[:n]
        if bar is not None:
            bar.update(length)
            bar.set_postfix(stored=f"{int((np.asarray(state.done_step)[:n] >= 0).sum())}/{n}")
        if config.early_stop and finished.all():
            break
    if bar is not None:
        bar.close()
    state = unpad(state, n)
    met = ensemble_metrics(state.params, tasks)
    done = np.asarray(state.done_step)
    diverged = np.asarray(state.diverged)
    finite = np.asarray(jax.vmap(_finite)(state.params))
    diverged = diverged | ~finite
    all_stored = np.asarray(met.all_stored) & ~diverged
    return Run(
        model=state.params,
        metrics=met,
        accuracy=np.where(diverged, 0.0, np.asarray(met.stored).mean(axis=-1)),
        all_stored=all_stored,
        steps_to_store=[int(s) if s >= 0 and ok else None for s, ok in zip(done, all_stored)],
        final_loss=np.asarray(state.loss),
        diverged=diverged,
        lr=lr,
        steps_run=min(t0, steps),
        evaluations=t0,
        seconds=time.perf_counter() - t_start,
    )
