"""Full-batch training of an ensemble of memories, vmapped over instances.

A host loop drives jitted `lax.scan` chunks. At every step each instance first evaluates its
loss and stored flags at the current weights; an instance that stores all `p` (or whose loss
is not finite) is frozen from then on, so an instance's trajectory does not depend on the
chunk size or on the other members of the ensemble, and the host stops as soon as every
instance is frozen.
"""

from __future__ import annotations

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
from ._models import Factored, FullRank, rank_of
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


class _Config(eqx.Module):
    model: type = eqx.field(static=True)
    d: int = eqx.field(static=True)
    m: int = eqx.field(static=True)
    init_scale: float = eqx.field(static=True)
    optimizer: Callable = eqx.field(static=True)
    chunk: int = eqx.field(static=True)
    stream: bool | None = eqx.field(static=True)
    block: int = eqx.field(static=True)

    def init_model(self, key, dtype):
        if self.model is Factored:
            return Factored.init(key, self.d, m=self.m, init_scale=self.init_scale, dtype=dtype)
        return FullRank.init(key, self.d, init_scale=self.init_scale, dtype=dtype)

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
def _chunk(cfg: _Config, mesh, tasks: Task, state: TrainState, t0, steps):
    def ensemble(tasks, state, t0, steps):
        def one(task, st):
            def body(st, t):
                return _step(cfg, task, st, t, steps), None

            return jax.lax.scan(body, st, t0 + jnp.arange(cfg.chunk))[0]

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


class Run(eqx.Module):
    """Outcome of `train`, one entry per instance (numpy arrays, host side)."""

    model: eqx.Module
    metrics: Metrics
    accuracy: np.ndarray
    all_stored: np.ndarray
    steps_to_store: list  # int, or None if never stored
    final_loss: np.ndarray
    diverged: np.ndarray
    lr: np.ndarray
    steps_run: int
    seconds: float


def _model_class(model):
    if model is FullRank or model == "full":
        return FullRank
    if model is Factored or model == "factored":
        return Factored
    raise InvalidArgument(f"model must be FullRank, Factored, 'full' or 'factored', got {model!r}")


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
    *,
    steps: int = DEFAULT_STEPS,
    lr=DEFAULT_LR,
    optimizer: Callable = optax.adam,
    init_scale: float = DEFAULT_INIT_SCALE,
    m: int | None = None,
    kappa: float | None = None,
    chunk: int = 100,
    stream: bool | None = None,
    block: int = 256,
    progress: bool = True,
    early_stop: bool = True,
    devices=None,
) -> Run:
    """Train one memory per task in the batch `tasks` (leading axis `n`) with `optimizer`
    (an optax constructor taking `learning_rate`, Adam by default) on the mean softmax
    cross-entropy, full batch, until each instance stores all `p` or `steps` updates are spent.

    `lr` is a scalar or one learning rate per instance. `model` is `FullRank` or `Factored`
    (rank from `m` or `kappa`); the initialisation is drawn from each task's `init_key`.
    The ensemble is spread over `devices` (default: all local accelerators, see
    `ensemble_mesh`; padded to a multiple of their number). `early_stop=False` runs the whole
    budget even when every instance is done
    (for benchmarks: frozen instances still compute their step).
    """
    steps = check_int("steps", steps, 0)
    chunk = check_int("chunk", chunk, 1)
    check_positive("init_scale", init_scale)
    if tasks.inputs.ndim != 3:
        raise InvalidArgument("tasks must be a batch from make_tasks (leading ensemble axis)")
    n, p, d = tasks.inputs.shape
    block = check_int("block", block, 1)
    lr = _learning_rates(lr, n)
    cls = _model_class(model)
    if cls is FullRank and (m is not None or kappa is not None):
        raise InvalidArgument(f"m and kappa apply to Factored only, got m={m!r}, kappa={kappa!r}")
    rank = rank_of(d, m=m, kappa=kappa) if cls is Factored else d
    check_memory("d, p and the ensemble size", train_bytes(n, d, p, rank, tasks.candidates is not None))
    cfg = _Config(cls, d, rank, float(init_scale), optimizer, chunk, stream, block)
    t_start = time.perf_counter()
    mesh = ensemble_mesh(devices)
    n_dev = 1 if mesh is None else mesh.size
    run_tasks, _ = pad_to(tasks, n, n_dev)
    state = _init(cfg, run_tasks, jnp.asarray(pad_to(jnp.asarray(lr, jnp.float32), n, n_dev)[0]))
    n_chunks = math.ceil((steps + 1) / chunk)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=n_chunks * chunk, unit="step", desc=f"train d={d} p={p} n={n}", leave=False)
    t0 = 0
    for _ in range(n_chunks):
        state = _chunk(cfg, mesh, run_tasks, state, jnp.asarray(t0), jnp.asarray(steps))
        t0 += chunk
        finished = np.asarray((state.done_step >= 0) | state.diverged)[:n]
        if bar is not None:
            bar.update(chunk)
            bar.set_postfix(stored=f"{int((np.asarray(state.done_step)[:n] >= 0).sum())}/{n}")
        if early_stop and finished.all():
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
        seconds=time.perf_counter() - t_start,
    )
