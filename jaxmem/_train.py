"""Full-batch training of an ensemble of memories: `train` runs the paper's protocol (the
ensemble solver `AdamProtocol`, with its settings `TrainConfig`) on a batch of tasks and returns
a `Run`: per-instance outcomes (stored, when, diverged), metrics and memories.
"""

from __future__ import annotations

import dataclasses
import math
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._metrics import ensemble_metrics, Metrics
from ._models import Factored, FullRank, memory_class, rank_of
from ._tasks import Task
from ._validate import check_int, check_memory, InvalidArgument
from .solvers._adam import AdamProtocol, criterion_hits, finite_tree, TrainConfig, TrainInstance
from .solvers._runner import run_ensemble


# The training knobs a Hebbian record stores: the closed-form rule has none.
NO_TRAINING = dict(steps=0, lr=0.0, init_scale=0.0)


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
    steps_to_store: list  # the first step meeting the criterion (all stored), or None
    final_loss: np.ndarray
    diverged: np.ndarray
    lr: np.ndarray
    steps_run: int
    evaluations: int  # the most loss evaluations of an instance (at most steps + 1)
    instance_steps: int  # loss evaluations summed over the instances (the work needed)
    computed_steps: int  # instance-steps computed (frozen and padded members included)
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
        return dict(
            per,
            steps_run=self.steps_run,
            evaluations=self.evaluations,
            instance_steps=self.instance_steps,
            computed_steps=self.computed_steps,
            seconds=self.seconds,
        )


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


# Below this many multiply-adds per score matrix (P^2 d) a step costs less than a compile.
CHEAP_STEP = 2**26


def padded_size(p: int, d: int) -> int:
    """The size `P >= p` a run at `p` trains at (`train(tasks_at_P, n=p)`), so that runs at many
    `p` of one `d` share their compiled kernels: the next power of two while a step is cheap
    (`P^2 d <= CHEAP_STEP`), else the next multiple of `2^(k - 3)` for `2^k <= p` (at most 1/8
    more rows, 27% more score FLOPs).

    **Arguments:** `p`: the associations; `d`: the dimension. **Returns:** `P`.
    """
    p = check_int("p", p, 2)
    d = check_int("d", d, 1)
    P = 1 << (p - 1).bit_length()
    if P * P * d <= CHEAP_STEP:
        return P
    g = 1 << max(0, p.bit_length() - 4)
    return -(-p // g) * g


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
    n: int | None = None,
    m: int | None = None,
    kappa: float | None = None,
    progress: bool = False,
    devices=None,
    **overrides,
) -> Run:
    """Train one memory per task in the batch `tasks` (leading axis) as `config` says, on the
    mean softmax cross-entropy, full batch, until each instance stores all its associations or
    the budget is spent (`AdamProtocol`, run by the compacting `run_ensemble`). An instance that
    stores all (or whose loss is not finite) is frozen and leaves the batch, so a vmapped
    ensemble equals a loop of single runs.

    **Arguments:**

    - `model`: an `AbstractMemory` subclass (`FullRank`, `Factored`) or its registry name;
      `m` or `kappa` give a factored memory's rank.
    - `tasks`: a batch from `make_tasks`; each instance's initialisation comes from its task.
    - `config`: a `TrainConfig`; `**overrides` replace its fields (`steps=500` is
      `dataclasses.replace(config, steps=500)`, validated the same way).
    - `lr`: one learning rate per instance (default: `config.lr` for all).
    - `n`: store only the first `n` associations of each task (default all). Tasks are nested,
      so this trains on `tasks.prefix(n)`; the rows and columns past `n` are padding, masked
      exactly, and one compiled kernel serves every `n` of a padded size (see `padded_size`).
    - `devices`: spread the ensemble over these (default: all local accelerators, see
      `ensemble_mesh`).

    **Returns:** a `Run` (its metrics are those of the first `n` associations).
    """
    if not isinstance(config, TrainConfig):
        raise InvalidArgument(f"config must be a TrainConfig, got {config!r}")
    unknown = set(overrides) - {f.name for f in dataclasses.fields(TrainConfig)}
    if unknown:
        names = ", ".join(sorted(unknown))
        raise InvalidArgument(f"{names}: not a TrainConfig field (the overrides are its fields)")
    config = dataclasses.replace(config, **overrides) if overrides else config
    if tasks.inputs.ndim != 3:
        raise InvalidArgument("tasks must be a batch from make_tasks (leading ensemble axis)")
    size, P, d = tasks.inputs.shape
    n = P if n is None else check_int("n", n, 2, P)
    lr = _learning_rates(config.lr if lr is None else lr, size)
    cls = memory_class(model)
    if cls is FullRank and (m is not None or kappa is not None):
        raise InvalidArgument(f"m and kappa apply to Factored only, got m={m!r}, kappa={kappa!r}")
    rank = rank_of(d, m=m, kappa=kappa) if cls is Factored else d
    dp_table = getattr(tasks, "materialised", None) is not None
    check_memory("d, p and the ensemble size", train_bytes(size, d, P, rank, dp_table))
    t_start = time.perf_counter()
    protocol = AdamProtocol(config, cls, rank)
    instances = TrainInstance(tasks, jnp.full((size,), n, jnp.int32), jnp.asarray(lr, tasks.inputs.dtype))
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=config.steps + 1, unit="step", desc=f"train d={d} p={n} n={size}", leave=False)

    def report(active, total, steps):
        if bar is not None:
            bar.update(steps)
            bar.set_postfix(active=f"{active}/{total}")

    state, work = run_ensemble(
        protocol, instances, chunk=config.chunk, progress=report, compact=config.compact, devices=devices
    )
    if bar is not None:
        bar.close()
    met = ensemble_metrics(state.params, tasks, n=n)  # at the padded size: one program for all n
    done = np.asarray(state.done_step)
    finite = np.asarray(jax.vmap(finite_tree)(state.params))
    diverged = np.asarray(state.diverged) | ~finite
    all_stored = np.asarray(met.all_stored) & ~diverged
    accuracy = np.where(diverged, 0.0, np.asarray(met.stored).mean(axis=-1))
    crit = config.criterion()
    if crit.top1:
        # `accuracy` is the top-1 stored fraction of the first n (0 where diverged), so the
        # criterion takes it as hits out of 1
        met_criterion = crit.met(accuracy, 1.0) & ~diverged
    else:
        met_criterion = np.asarray(criterion_hits(crit, state.params, tasks, n)) & ~diverged
    evaluations = int(np.asarray(state.t).max())
    return Run(
        model=state.params,
        metrics=met,
        accuracy=accuracy,
        all_stored=all_stored,
        steps_to_store=[int(s) if s >= 0 and ok else None for s, ok in zip(done, met_criterion)],
        final_loss=np.asarray(state.loss),
        diverged=diverged,
        lr=lr,
        steps_run=min(evaluations, config.steps),
        evaluations=evaluations,
        instance_steps=int(np.asarray(state.t).sum()),
        computed_steps=work,
        seconds=time.perf_counter() - t_start,
    )
