"""Float64 evaluation independent of the global JAX setting."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


def float64(fn):
    """Run `fn` with 64-bit types enabled (inside jit/grad/vmap too); arguments are cast to
    float64 by the functions themselves. The global `jax_enable_x64` flag is left as it is."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with jax.enable_x64(True):
            return fn(*args, **kwargs)

    return wrapper


def f64(x):
    return jnp.asarray(x, jnp.float64)


def default_key(key, seed: int = 0):
    return jax.random.key(seed) if key is None else key
