"""Retrieval metrics, evaluated at `Precision.HIGHEST` (ties count as failures)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from ._loss import scores
from ._tasks import Task


HIGHEST = lax.Precision.HIGHEST


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


def scores_of(model, task: Task, *, block: int = 256):
    """The projections `V = E W^T` and the `Scores` per input, at `Precision.HIGHEST`."""
    V = model.project(task.inputs, precision=HIGHEST)
    return V, scores(V, task, precision=HIGHEST, block=block)


def metrics(model, task: Task) -> Metrics:
    """All metrics of one memory on one task (vmap it for an ensemble).

    **Arguments:** `model`: one memory; `task`: one task.

    **Returns:** `Metrics`.
    """
    V, sc = scores_of(model, task)
    sigma = jnp.linalg.norm(V, axis=1)
    ok = jnp.isfinite(sc.target) & jnp.isfinite(sc.best)
    stored = sc.stored & ok
    return Metrics(
        accuracy=stored.sum() / stored.shape[0],
        all_stored=stored.all(),
        stored=stored,
        margin=sc.target - sc.best,
        target=sc.target / sigma,
        best=sc.best / sigma,
        singular_values=jnp.linalg.svd(model.weight(), compute_uv=False),
    )


def ensemble_metrics(models, tasks: Task, *, batch_size: int = 8) -> Metrics:
    """`metrics` over a leading ensemble axis, `batch_size` instances at a time (bounds the
    memory of the streaming evaluation of large DP tasks).

    **Arguments:** `models`: a batch of memories (leading axis `n`); `tasks`: the matching batch of
    tasks; `batch_size`: instances evaluated at once.

    **Returns:** `Metrics` with a leading axis `n`.
    """
    return jax.lax.map(lambda mt: metrics(*mt), (models, tasks), batch_size=batch_size)
