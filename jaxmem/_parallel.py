"""Spread the ensemble axis over local devices: a 1-D mesh, `shard_map`, padding and masking.

Instances are independent, so each device runs the vmapped step on its slice with no
communication. `run_ensemble` pads a batch to a multiple of the device count with copies of an
active instance, which it drops from every result.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P


AXIS = "ensemble"


def ensemble_mesh(devices=None) -> Mesh | None:
    """A 1-D mesh over `devices`; None for a single device.

    Default: all local accelerators. On the CPU backend the default is one device: simulated
    host devices (`--xla_force_host_platform_device_count`) share the same cores, and with large
    per-device batches their concurrent execution was seen to hang (XLA CPU, jax 0.10.1, 2 cores);
    pass `devices=jax.devices()` to shard over them anyway (the tests do, at small sizes).
    """
    if devices is None:
        devices = [] if jax.default_backend() == "cpu" else jax.local_devices()
    devices = list(devices)
    if len(devices) <= 1:
        return None
    return Mesh(np.array(devices), (AXIS,))


def shard_ensemble(fn, mesh: Mesh | None, n_sharded: int):
    """`fn(*args)` with its first `n_sharded` arguments split along the ensemble axis over
    `mesh` and the rest replicated; outputs split the same way."""
    if mesh is None:
        return fn
    specs = tuple([P(AXIS)] * n_sharded)

    def wrapped(*args):
        in_specs = specs + tuple(P() for _ in args[n_sharded:])
        # check_vma=False: no collectives, and inner scans start from unsharded constants.
        return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=P(AXIS), check_vma=False)(*args)

    return wrapped
