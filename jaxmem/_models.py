"""Linear memories: full-rank `W`, two-layer `W = Q R^T` of rank `m`, and the Hebbian rule."""

from __future__ import annotations

import abc
import math
import numbers
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._precision import einsum
from ._tasks import Task
from ._validate import InvalidArgument, rank_of


def resolve_kappa(model: str, d: int, kappa: float | None) -> tuple[int, float]:
    """`(m, m / d)` for `model` at dimension `d`: the rank fraction `kappa` applies to the
    factored model only (default 1), and any other model refuses one; this is that rule's one
    home.

    **Returns:** the rank `m` and the effective `kappa = m / d` that a record stores."""
    if model == "factored":
        m = rank_of(d, kappa=kappa)
        return m, m / d
    if kappa is not None and not (isinstance(kappa, numbers.Real) and float(kappa) == 1.0):
        raise InvalidArgument(f"kappa applies to the factored model only, got kappa={kappa!r}")
    return d, 1.0


class AbstractMemory(eqx.Module):
    """A linear memory `W` (docs/science.md, 1): the interface the trainer, the metrics and the
    solvers use, so none of them branches on which memory it is.

    A memory is a final subclass with `init` (a fresh memory of rank `m` from a key), `weight`
    (the `d x d` matrix) and `project` (`V = E W^T`, without forming `W` where it need not);
    `name` is its registry key."""

    name: ClassVar[str]

    @classmethod
    @abc.abstractmethod
    def init(cls, key, d: int, *, m: int | None = None, init_scale: float = 1e-3, dtype=jnp.float32):
        """A memory whose `W` has entries of variance `init_scale^2 / d`."""

    @abc.abstractmethod
    def weight(self) -> jax.Array:
        """The `d x d` matrix `W`."""

    @abc.abstractmethod
    def project(self, E, *, precision=lax.Precision.DEFAULT) -> jax.Array:
        """`V = E W^T`: row `mu` is `W e_mu` (`precision`: a `lax.Precision` or a name in
        `PRECISIONS`)."""


class FullRank(AbstractMemory):
    """`W in R^{d x d}`; `init` draws entries `N(0, init_scale^2 / d)` (singular values
    `init_scale` times the quarter circle on [0, 2])."""

    W: jax.Array
    name: ClassVar[str] = "full"

    @classmethod
    def init(cls, key, d: int, *, m: int | None = None, init_scale: float = 1e-3, dtype=jnp.float32):
        if m not in (None, d):
            raise InvalidArgument(f"m applies to Factored only (FullRank has m = d = {d}), got m={m!r}")
        return cls(init_scale / math.sqrt(d) * jax.random.normal(key, (d, d), dtype))

    def weight(self):
        return self.W

    def project(self, E, *, precision=lax.Precision.DEFAULT):
        return einsum("pe,de->pd", E, self.W, precision)


class Factored(AbstractMemory):
    """`W = Q R^T`, `Q, R in R^{d x m}`; `init` draws both Gaussian with the scale that gives
    `W` entries of variance `init_scale^2 / d`."""

    Q: jax.Array
    R: jax.Array
    name: ClassVar[str] = "factored"

    @classmethod
    def init(
        cls,
        key,
        d: int,
        *,
        m: int | None = None,
        kappa: float | None = None,
        init_scale: float = 1e-3,
        dtype=jnp.float32,
    ):
        m = rank_of(d, m=m, kappa=kappa)
        s = math.sqrt(init_scale) / (d * m) ** 0.25
        kq, kr = jax.random.split(key)
        return cls(s * jax.random.normal(kq, (d, m), dtype), s * jax.random.normal(kr, (d, m), dtype))

    @property
    def m(self) -> int:
        return self.Q.shape[-1]

    def weight(self):
        return self.Q @ self.R.T

    def project(self, E, *, precision=lax.Precision.DEFAULT):
        return einsum("pm,dm->pd", einsum("pe,em->pm", E, self.R, precision), self.Q, precision)


# The memory registry: a new memory is a final AbstractMemory and one entry here.
MEMORIES: dict[str, type[AbstractMemory]] = {cls.name: cls for cls in (FullRank, Factored)}
# What a sweep can run: the trained memories, and the closed-form Hebbian rule.
MODELS = (*MEMORIES, "hebbian")


def memory_class(model) -> type[AbstractMemory]:
    """The memory class for `model`: a registry name or an `AbstractMemory` subclass."""
    if isinstance(model, type) and issubclass(model, AbstractMemory):
        return model
    if isinstance(model, str) and model in MEMORIES:
        return MEMORIES[model]
    names = ", ".join(MEMORIES)
    raise InvalidArgument(f"model must be an AbstractMemory subclass or one of {names}; got {model!r}")


def hebbian_weight(inputs, targets):
    """The Hebbian matrix `W_H = sum_mu u_mu e_mu^T = U^T E` of the given rows: numpy arrays in
    their own dtype (float64 for the float64 analyses), jax arrays at `Precision.HIGHEST`.

    **Arguments:** `inputs` `E` and `targets` `U`, `(..., p, d)` each.

    **Returns:** `(..., d, d)`."""
    if isinstance(inputs, np.ndarray) and isinstance(targets, np.ndarray):
        return np.swapaxes(targets, -1, -2) @ inputs
    return jnp.einsum("...pi,...pj->...ij", targets, inputs, precision=lax.Precision.HIGHEST)


def hebbian(task: Task) -> FullRank:
    """The Hebbian memory `W_H = sum_mu u_mu e_mu^T` of a task (closed form, no training). Works
    on a single task or a batch (leading ensemble axis).

    **Arguments:** `task`: one task, or a batch with a leading ensemble axis.

    **Returns:** the `FullRank` memory `W = sum_mu u_mu e_mu^T`.
    """
    return FullRank(hebbian_weight(task.inputs, task.targets))
