"""Argument validation: the one home of every check, each raising `ValueError` naming the argument.

Accepts Python and numpy scalars alike (an `np.int64` is an integer, an `np.float32` a real);
a `bool` is never a number.
"""

from __future__ import annotations

import math
import numbers
import os
import sys

import numpy as np


class InvalidArgument(ValueError):
    """A bad argument value, raised by every check here: a `ValueError` (what the library
    promises) that the CLI, and only it, turns into its one exit-2 path. A `ValueError` from
    inside jax is not one, so it cannot pass for a user's mistake."""


def _is_int(value) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, numbers.Integral):
        return True
    return (
        hasattr(value, "dtype")
        and getattr(value, "shape", None) == ()
        and np.issubdtype(value.dtype, np.integer)
    )


def check_int(name: str, value, minimum: int, maximum: int | None = None) -> int:
    """`value` as an `int` in `[minimum, maximum]`."""
    rng = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
    if not _is_int(value):
        raise InvalidArgument(f"{name} must be an integer {rng}, got {value!r}")
    value = int(value)
    if value < minimum or (maximum is not None and value > maximum):
        raise InvalidArgument(f"{name} must be an integer {rng}, got {value}")
    return value


def check_real(
    name: str,
    value,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    finite: bool = True,
) -> float:
    """`value` as a `float`, finite (unless `finite=False`) and within the given bounds."""
    bad = isinstance(value, (bool, np.bool_)) or not (
        isinstance(value, numbers.Real)
        or (
            hasattr(value, "dtype")
            and getattr(value, "shape", None) == ()
            and np.issubdtype(value.dtype, np.number)
        )
    )
    lo = "" if low is None else f"{'>' if low_open else '>='} {low:g}"
    hi = "" if high is None else f"{'<' if high_open else '<='} {high:g}"
    want = " and ".join(x for x in (("finite" if finite else ""), lo, hi) if x) or "a number"
    if bad:
        raise InvalidArgument(f"{name} must be a real number ({want}), got {value!r}")
    v = float(value)
    if (
        math.isnan(v)
        or (finite and math.isinf(v))
        or (low is not None and (v < low or (low_open and v == low)))
        or (high is not None and (v > high or (high_open and v == high)))
    ):
        raise InvalidArgument(f"{name} must be {want}, got {value!r}")
    return v


def check_real_if_scalar(name: str, value, **bounds) -> None:
    """`check_real` for a Python or numpy scalar; a jax array (perhaps traced) passes through
    unchecked, as the theory functions report bad traced values in their outputs instead."""
    import jax

    if not isinstance(value, jax.Array):
        check_real(name, value, **bounds)


def check_shape(name: str, value, shape: tuple, what: str = "") -> tuple:
    """`value`'s shape, which must match `shape` (`None` matches any size): an array (numpy,
    jax, traced) or anything `np.shape` reads; a string or an object is refused. `what` names
    the axes in the message (e.g. "n tasks, d, d").

    **Returns:** the shape."""
    want = (
        "("
        + ", ".join("any" if s is None else str(s) for s in shape)
        + ("," if len(shape) == 1 else "")
        + ")"
    )
    want += f" ({what})" if what else ""
    if isinstance(value, (str, bytes)) or not (hasattr(value, "shape") or isinstance(value, (list, tuple))):
        raise InvalidArgument(f"{name} must be an array of shape {want}, got {type(value).__name__}")
    got = tuple(np.shape(value))
    if len(got) != len(shape) or any(s is not None and s != g for s, g in zip(shape, got)):
        raise InvalidArgument(f"{name} must have shape {want}, got {got}")
    return got


def check_positive(name: str, value) -> float:
    """A finite real number `> 0`."""
    return check_real(name, value, low=0.0, low_open=True)


def check_choice(name: str, value, choices) -> str:
    """One of `choices`."""
    if not isinstance(value, str) or value not in choices:
        raise InvalidArgument(f"{name} must be one of {', '.join(choices)}; got {value!r}")
    return value


def rank_of(d: int, *, m: int | None = None, kappa: float | None = None) -> int:
    """The rank `m` from `m` or `kappa = m / d` (rounded, half to even); validates both. A
    `kappa` whose `kappa d` rounds to 0 (`kappa d <= 1/2`) is refused rather than run at rank 1.

    This is the one place where `round(kappa * d)` is computed.

    **Arguments:** `d`: the dimension; `m`: the rank, or `kappa`: the rank fraction in `(0, 1]`
    (default 1).

    **Returns:** the rank `m`.
    """
    if m is not None and kappa is not None:
        raise InvalidArgument("give the rank as m or as kappa, not both")
    if m is not None:
        return check_int("m", m, 1, d)
    jax = sys.modules.get("jax")  # a traced value needs jax, which is then loaded already
    if kappa is not None and jax is not None and isinstance(kappa, jax.core.Tracer):
        raise InvalidArgument(
            "kappa sets the rank m = round(kappa d), a shape: give it as a concrete number, not a traced one"
        )
    kappa = 1.0 if kappa is None else check_real("kappa", kappa, low=0.0, high=1.0, low_open=True)
    m = round(kappa * d)
    if m < 1:  # refused, never run silently at rank 1
        raise InvalidArgument(
            f"kappa = {kappa:g} gives kappa d = {kappa * d:.3g} at d = {d}, which rounds below rank 1: "
            f"use kappa >= {1 / d:.4g} (rank 1) or more"
        )
    return m


def available_bytes() -> int:
    """Memory of the default device: its allocator's limit on an accelerator, the physical
    memory on the CPU."""
    import jax

    dev = jax.devices()[0]
    try:
        stats = dev.memory_stats() or {}
    except Exception:  # not every backend has memory stats
        stats = {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_memory(names: str, nbytes: float) -> None:
    """Refuse, before allocating, work that needs more than the device has: `nbytes` is the
    estimate, `names` the arguments that set it."""
    have = available_bytes()
    if not nbytes <= have:
        raise InvalidArgument(
            f"{names} need about {nbytes / 2**30:.3g} GiB, more than this device's {have / 2**30:.3g} GiB"
        )
