"""What a result was computed with: the one home of the version and device info that every
result file records."""

from __future__ import annotations

import os
import platform
import socket


# the package's version (pyproject.toml says the same; a test checks it)
VERSION = "0.1.0"


def versions() -> dict:
    """The versions of jaxmem, its numerical dependencies and Python."""
    import equinox
    import jax
    import numpy as np
    import optax
    import optimistix

    return dict(
        jaxmem=VERSION,
        jax=jax.__version__,
        optax=optax.__version__,
        equinox=equinox.__version__,
        optimistix=optimistix.__version__,
        numpy=np.__version__,
        python=platform.python_version(),
    )


def device_info() -> dict:
    """The default backend's device and the host."""
    import jax

    dev = jax.devices()[0]
    return dict(
        platform=dev.platform,
        kind=dev.device_kind,
        count=jax.device_count(),
        cpus=os.cpu_count(),
        host=platform.platform(),
        hostname=socket.gethostname(),
    )
