import os


# Two simulated CPU devices for the sharding tests; must precede the first jax import.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
# The command line keeps compiled programs on disk by default; the suite does not (each test sees
# a cold compile, and nothing is written outside its temporary folders). tests/test_cache.py
# turns it on where it tests it.
os.environ.setdefault("JAXMEM_NO_CACHE", "1")

import jax  # noqa: E402
import pytest  # noqa: E402


# Strict dtype promotion is not used: optax's Adam mixes its int32 step count with float32.


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


@pytest.fixture(autouse=True, scope="module")
def _release_compiled():
    """Free each module's compiled programs once it is done (the suite compiles hundreds)."""
    yield
    jax.clear_caches()
