"""A persistent compilation cache: compiled programs kept on disk, so that a later process
(another command, another shard) skips XLA's compile of a program it has seen before.

The command line turns it on by default (`--no-cache` or `JAXMEM_NO_CACHE=1` turn it off);
library users call `enable_compilation_cache()` once. It never changes a result: a program is
found by the hash of its whole computation, compiler options and versions, and JAX writes each
entry by an atomic rename, so processes may share one folder."""

from __future__ import annotations

import os


def cache_dir() -> str:
    """The cache folder: `JAXMEM_CACHE_DIR`, else `$XDG_CACHE_HOME/jaxmem/xla`, else
    `~/.cache/jaxmem/xla`."""
    if os.environ.get("JAXMEM_CACHE_DIR"):
        return os.path.abspath(os.path.expanduser(os.environ["JAXMEM_CACHE_DIR"]))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jaxmem", "xla")


def enable_compilation_cache(path: str | None = None, *, min_compile_seconds: float = 0.1) -> str:
    """Keep compiled programs in `path` (default `cache_dir()`) for later processes.

    Programs whose compile took less than `min_compile_seconds` are not kept (reading one back
    would cost about as much). Call it before the first computation; it applies to the whole
    process.

    **Arguments:** `path`: the folder (made if missing); `min_compile_seconds`: the least compile
    time worth keeping.

    **Returns:** the folder.
    """
    import jax

    path = os.path.abspath(os.path.expanduser(path or cache_dir()))
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_seconds))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path
