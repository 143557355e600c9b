"""Retrieval metrics, evaluated at `Precision.HIGHEST` (ties count as failures)."""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._loss import scores
from ._tasks import Task
from ._validate import check_shape
from .solvers import to64


HIGHEST = lax.Precision.HIGHEST
# A float32 margin within this fraction of the score scale `|W e_mu| sqrt(d)` of zero is a
# near-tie: its instance is re-evaluated in float64 (the float32 rounding error of a length-d
# dot product is at most about `d 2^-24` of that scale, 6e-5 at d = 1024, and typically far less).
TIE_RTOL = 1e-4


class Metrics(eqx.Module):
    """Per-input and per-memory outcome. Scores are in units of the competitor spread
    `sigma_mu = |W e_mu|` (competitor scores are `N(0, sigma_mu^2)` for fresh candidates)."""

    accuracy: jax.Array
    all_stored: jax.Array
    stored: jax.Array  # (p,)
    margin: jax.Array  # target minus best competitor, raw units
    target: jax.Array  # normalised target score
    best: jax.Array  # normalised best competitor score
    singular_values: jax.Array
    near_tie: jax.Array  # some finite margin within TIE_RTOL of the score scale of zero


def scores_of(model, task: Task, *, block: int = 256, n=None):
    """The projections `V = E W^T` and the `Scores` per input, at `Precision.HIGHEST`, over
    the first `n` associations (default all)."""
    V = model.project(task.inputs, precision=HIGHEST)
    return V, scores(V, task, precision=HIGHEST, block=block, n=n)


def metrics(model, task: Task, tie_rtol=TIE_RTOL, n=None) -> Metrics:
    """All metrics of one memory on one task (vmap it for an ensemble), over its first `n`
    associations (default all). A padded task (`n < p`, `n` perhaps traced) gives per-input
    arrays of length `p` whose entries `>= n` mean nothing: one program serves every `n`.

    **Arguments:** `model`: one memory; `task`: one task; `tie_rtol`: the near-tie band; `n`:
    the real associations.

    **Returns:** `Metrics`.
    """
    d = task.inputs.shape[-1]
    check_shape("model", jax.eval_shape(model.weight), (d, d), "its weight W: d x d, as the task's d")
    V, sc = scores_of(model, task, n=n)
    real = jnp.arange(task.p) < (task.p if n is None else n)
    sigma = jnp.linalg.norm(V, axis=1)
    ok = jnp.isfinite(sc.target) & jnp.isfinite(sc.best)
    stored = sc.stored & ok & real
    return Metrics(
        accuracy=stored.sum() / real.sum(),
        all_stored=jnp.all(stored | ~real),
        stored=stored,
        margin=sc.target - sc.best,
        target=sc.target / sigma,
        best=sc.best / sigma,
        singular_values=jnp.linalg.svd(model.weight(), compute_uv=False),
        near_tie=jnp.any(
            real & ok & (jnp.abs(sc.target - sc.best) <= tie_rtol * sigma * math.sqrt(V.shape[-1]))
        ),
    )


def ensemble_metrics(
    models,
    tasks: Task,
    *,
    batch_size: int = 8,
    recheck: bool = True,
    tie_rtol: float = TIE_RTOL,
    n: int | None = None,
) -> Metrics:
    """`metrics` over a leading ensemble axis, `batch_size` instances at a time (bounds the
    memory of the streaming evaluation of large DP tasks). Instances with a near-tie
    (`Metrics.near_tie`) are evaluated again in float64, and their float64 metrics replace them.

    **Arguments:** `models`: a batch of memories (leading axis `n`); `tasks`: the matching batch of
    tasks; `batch_size`: instances evaluated at once; `recheck`: the float64 recheck of the
    instances with a margin within `tie_rtol` of the score scale of zero; `n`: evaluate the first
    `n` associations of tasks padded to more (one compiled program for every `n`).

    **Returns:** `Metrics` with a leading ensemble axis, per-input fields of length `n` (numpy
    arrays).
    """
    P = tasks.inputs.shape[-2]
    shape = (tasks.inputs.shape[0], tasks.inputs.shape[-1], tasks.inputs.shape[-1])
    weights = jax.eval_shape(lambda: jax.vmap(lambda m: m.weight())(models))
    check_shape("models", weights, shape, "their weights: n tasks, d, d")
    n = P if n is None else n
    real = jnp.asarray(n, jnp.int32)
    met = jax.tree.map(np.array, _ensemble_metrics(models, tasks, batch_size, tie_rtol, real))
    if recheck and tasks.inputs.dtype != jnp.float64:
        idx = np.flatnonzero(met.near_tie)
        if idx.size:
            with jax.enable_x64(True):
                sub = jax.tree.map(lambda x: to64(jnp.asarray(x)[idx]), (models, tasks))
                met64 = jax.tree.map(np.asarray, _ensemble_metrics(*sub, batch_size, tie_rtol, real))
            for name in met.__dataclass_fields__:
                getattr(met, name)[idx] = getattr(met64, name)
    per_input = ("stored", "margin", "target", "best")
    return eqx.tree_at(
        lambda m: [getattr(m, k) for k in per_input], met, [getattr(met, k)[:, :n] for k in per_input]
    )


@eqx.filter_jit
def _ensemble_metrics(models, tasks, batch_size: int, tie_rtol, n):
    return jax.lax.map(lambda mt: metrics(*mt, tie_rtol, n), (models, tasks), batch_size=batch_size)
