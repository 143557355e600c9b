"""Linear memories: full-rank `W`, two-layer `W = Q R^T` of rank `m`, and the Hebbian rule."""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from ._tasks import Task
from ._validate import check_int, check_real, InvalidArgument


MODELS = ("full", "factored", "hebbian")


def rank_of(d: int, *, m: int | None = None, kappa: float | None = None) -> int:
    """The rank `m` from `m` or `kappa = m / d` (rounded, at least 1); validates both.

    This is the one place where `round(kappa * d)` is computed."""
    if m is not None and kappa is not None:
        raise InvalidArgument("give the rank as m or as kappa, not both")
    if m is not None:
        return check_int("m", m, 1, d)
    kappa = 1.0 if kappa is None else check_real("kappa", kappa, low=0.0, high=1.0, low_open=True)
    return max(1, round(kappa * d))


def resolve_kappa(model: str, d: int, kappa: float | None) -> tuple[int, float]:
    """`(m, m / d)` for `model` at dimension `d`: the rank fraction `kappa` applies to the
    factored model only (default 1), and any other model refuses one; this is that rule's one
    home.

    **Returns:** the rank `m` and the effective `kappa = m / d` that a record stores."""
    if model == "factored":
        m = rank_of(d, kappa=kappa)
        return m, m / d
    if kappa is not None and not (isinstance(kappa, (int, float)) and kappa == 1.0):
        raise InvalidArgument(f"kappa applies to the factored model only, got kappa={kappa!r}")
    return d, 1.0


class FullRank(eqx.Module):
    """`W in R^{d x d}`; `init` draws entries `N(0, init_scale^2 / d)` (singular values
    `init_scale` times the quarter circle on [0, 2])."""

    W: jax.Array

    @classmethod
    def init(cls, key, d: int, *, init_scale: float = 1e-3, dtype=jnp.float32, **_):
        return cls(init_scale / math.sqrt(d) * jax.random.normal(key, (d, d), dtype))

    def weight(self):
        return self.W

    def project(self, E, *, precision=lax.Precision.DEFAULT):
        """`V = E W^T`: row `mu` is `W e_mu`."""
        return jnp.matmul(E, self.W.T, precision=precision)


class Factored(eqx.Module):
    """`W = Q R^T`, `Q, R in R^{d x m}`; `init` draws both Gaussian with the scale that gives
    `W` entries of variance `init_scale^2 / d`."""

    Q: jax.Array
    R: jax.Array

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
        return jnp.matmul(jnp.matmul(E, self.R, precision=precision), self.Q.T, precision=precision)


def hebbian(task: Task) -> FullRank:
    """The Hebbian memory `W_H = sum_mu u_mu e_mu^T` (closed form, no training). Works on a
    single task or a batch (leading ensemble axis)."""
    W = jnp.einsum("...pi,...pj->...ij", task.targets, task.inputs, precision=lax.Precision.HIGHEST)
    return FullRank(W)
