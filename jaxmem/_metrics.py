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


def scores_of(model, task: Task, *, block: int = 256):
    """The projections `V = E W^T` and the `Scores` per input, at `Precision.HIGHEST`."""
    V = model.project(task.inputs, precision=HIGHEST)
    return V, scores(V, task, precision=HIGHEST, block=block)


def metrics(model, task: Task, tie_rtol=TIE_RTOL) -> Metrics:
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
        near_tie=jnp.any(ok & (jnp.abs(sc.target - sc.best) <= tie_rtol * sigma * math.sqrt(V.shape[-1]))),
    )


def ensemble_metrics(
    models, tasks: Task, *, batch_size: int = 8, recheck: bool = True, tie_rtol: float = TIE_RTOL
) -> Metrics:
    """`metrics` over a leading ensemble axis, `batch_size` instances at a time (bounds the
    memory of the streaming evaluation of large DP tasks). Instances with a near-tie
    (`Metrics.near_tie`) are evaluated again in float64, and their float64 metrics replace them.

    **Arguments:** `models`: a batch of memories (leading axis `n`); `tasks`: the matching batch of
    tasks; `batch_size`: instances evaluated at once; `recheck`: the float64 recheck of the
    instances with a margin within `tie_rtol` of the score scale of zero.

    **Returns:** `Metrics` with a leading axis `n`.
    """
    met = _ensemble_metrics(models, tasks, batch_size, tie_rtol)
    if not recheck or tasks.inputs.dtype == jnp.float64:
        return met
    idx = np.flatnonzero(np.asarray(met.near_tie))
    if idx.size == 0:
        return met
    to64 = lambda x: x.astype(jnp.float64) if jnp.issubdtype(x.dtype, jnp.floating) else x
    with jax.enable_x64(True):
        sub = jax.tree.map(lambda x: to64(jnp.asarray(x)[idx]), (models, tasks))
        met64 = jax.tree.map(np.asarray, _ensemble_metrics(*sub, batch_size, tie_rtol))
    out = jax.tree.map(np.array, met)
    for name in out.__dataclass_fields__:
        getattr(out, name)[idx] = getattr(met64, name)
    return out


@eqx.filter_jit
def _ensemble_metrics(models, tasks, batch_size: int, tie_rtol):
    return jax.lax.map(lambda mt: metrics(*mt, tie_rtol), (models, tasks), batch_size=batch_size)
