"""Atomic, group-readable file writes, and the clean-up of writers that died mid-write."""

from __future__ import annotations

import os
import socket
import tempfile
import time


_PREFIX = ".tmp-"
STALE_SECONDS = 24 * 3600  # a temp file of another host is stale after a day


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _tag() -> str:
    return f"{_PREFIX}{socket.gethostname()}-{os.getpid()}-"


def atomic_write(path: str, data: str | bytes) -> None:
    """Write `data` to `path` via a temp file in the same folder and `os.replace`, with the
    permissions a plain `open` would give (0666 less the umask): a reader sees the old file or
    the whole new one, never a part.

    **Arguments:** `path`, and `data` as text or bytes."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=_tag(), suffix=".part")
    try:
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(folder: str) -> list[str]:
    """Remove the temp files that dead writers left in `folder`: those of a process of this host
    that no longer runs, and those of other hosts older than `STALE_SECONDS`.

    **Returns:** the removed paths."""
    if not os.path.isdir(folder):
        return []
    host, removed = socket.gethostname(), []
    for name in os.listdir(folder):
        if not (name.startswith(_PREFIX) and name.endswith(".part")):
            continue
        path = os.path.join(folder, name)
        rest = name[len(_PREFIX) :]
        owner, _, tail = rest.rpartition("-")  # "<host>-<pid>", "<random>.part"
        h, _, pid = owner.rpartition("-")
        try:
            if h == host and pid.isdigit():
                stale = not _alive(int(pid))
            else:
                stale = time.time() - os.path.getmtime(path) > STALE_SECONDS
            if stale:
                os.unlink(path)
                removed.append(path)
        except FileNotFoundError:
            pass
    return removed
