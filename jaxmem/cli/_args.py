"""What every subcommand shares: the parser class, argument types that name their argument,
strict JSON output, and `ArgumentError`, the one path to exit 2."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import threading
from collections.abc import Mapping


class ArgumentError(Exception):
    """A bad command line: printed as one line, `jaxmem CMD: error: MESSAGE`, exit status 2."""


class Parser(argparse.ArgumentParser):
    """An `ArgumentParser` whose errors are `ArgumentError`s, and whose help shows every
    option's default and keeps the examples' line breaks."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise ArgumentError(f"{self.prog}: error: {message}")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogues as written (the examples), and each option's default."""

    def _get_help_string(self, action):
        h = action.help or ""
        d = action.default
        if "default" in h or d is None or d is False or d is argparse.SUPPRESS or not action.option_strings:
            return h
        shown = (
            " ".join(map(str, d)) if isinstance(d, list | tuple) else f"{d:g}" if isinstance(d, float) else d
        )
        return h + f" (default: {shown})".replace("%", "%%")


def one_line(message: str, prog: str) -> str:
    """An error as the one line every subcommand prints: `PROG: error: MESSAGE`."""
    first = str(message).splitlines()[0] if str(message) else ""
    m = re.match(r"^(jaxmem(?: [a-z]+)*): (?:error: )?(.*)$", first)
    if m:
        prog, first = m.groups()
    return f"{prog}: error: {first}"


@contextlib.contextmanager
def working(a, line: str, after: float = 2.0):
    """`line` on stderr once the work inside has taken `after` seconds (unless `--quiet`): a long
    first call says that it is working, while a quick answer, or a refused argument, prints
    nothing more than its own line."""
    log = progress(a)
    timer = threading.Timer(after, lambda: print(line, file=log, flush=True)) if log else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()


def progress(a):
    """Where a command's progress goes: stderr, unless `--quiet` (with `--json` too: stdout
    holds only the one JSON object)."""
    import sys

    return None if getattr(a, "quiet", False) else sys.stderr


# Work that no 2-core machine or single accelerator finishes: refused, not started.
MAX_GRID = 10_000


def integer(low: int, high: int | None = None):
    """An argparse type: a decimal integer in `[low, high]` (no `2.7`, `inf` or `1e300`)."""

    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            v = None
        if v is None or v < low or (high is not None and v > high):
            rng = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise argparse.ArgumentTypeError(f"must be an integer {rng}, got {s!r}")
        return v

    parse.__name__ = "integer"
    return parse


def real(low: float | None = None, high: float | None = None, *, low_open=False, allow_inf=False):
    """An argparse type: a real number, finite unless `allow_inf`, in the given bounds."""

    def parse(s: str) -> float:
        try:
            v = float(s)
        except ValueError:
            v = math.nan
        ok = not math.isnan(v) and (allow_inf or math.isfinite(v))
        ok = ok and (low is None or v > low or (v == low and not low_open))
        ok = ok and (high is None or v <= high)
        if not ok:
            want = ["finite" if not allow_inf else "a number"]
            if low is not None:
                want.append(f"{'>' if low_open else '>='} {low:g}")
            if high is not None:
                want.append(f"<= {high:g}")
            raise argparse.ArgumentTypeError(f"must be {' and '.join(want)}, got {s!r}")
        return v

    parse.__name__ = "real"
    return parse


def grid(flag: str, spec: list[str], *, integral: bool, low: float) -> list[float]:
    """`["START:STOP:N"]` (N evenly spaced points) or a list of numbers, checked as `flag`."""
    conv = integer(int(low)) if integral else real(low, low_open=True)

    def convert(x, parse=conv, what=""):
        try:
            return parse(x)
        except argparse.ArgumentTypeError as e:
            raise ArgumentError(f"argument {flag}: {what}{e}") from None

    if len(spec) == 1 and ":" in spec[0]:
        parts = spec[0].split(":")
        if len(parts) != 3:
            raise ArgumentError(f"argument {flag}: a grid is START:STOP:N, got {spec[0]!r}")
        a, b = (float(convert(x)) for x in parts[:2])
        n = convert(parts[2], integer(1, MAX_GRID), "grid size N ")
        import numpy as np

        vals = list(np.linspace(a, b, n)) if n > 1 else [a]
        return [float(round(v)) for v in vals] if integral else [float(v) for v in vals]
    if len(spec) > MAX_GRID:
        raise ArgumentError(f"argument {flag}: at most {MAX_GRID} values, got {len(spec)}")
    return [convert(x) for x in spec]


def parse_shard(spec: str | None) -> tuple[int, int]:
    """`--shard i/n`: this process runs every n-th unit of work from the i-th."""
    if not spec:
        return 0, 1
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ArgumentError(f"argument --shard: must be i/n, got {spec!r}") from None
    if not (n >= 1 and 0 <= i < n):
        raise ArgumentError(f"argument --shard: must be i/n with 0 <= i < n, got {spec!r}")
    return i, n


def writable_folder(flag: str, path: str) -> str:
    """An output folder: absent (created on the first write), or a folder whose `records`,
    `commands` and `meta.json` are of the right kind and which this process may write."""
    import os

    if os.path.exists(path) and not os.path.isdir(path):
        raise ArgumentError(f"argument {flag}: {path!r} is a file, not a folder")
    for name, want_dir in (("records", True), ("commands", True), ("meta.json", False)):
        p = os.path.join(path, name)
        if os.path.exists(p) and os.path.isdir(p) != want_dir:
            raise ArgumentError(f"argument {flag}: {p!r} should be a {'folder' if want_dir else 'file'}")
    if os.path.isdir(path) and not os.access(path, os.W_OK | os.X_OK):
        raise ArgumentError(f"argument {flag}: {path!r} is not writable")
    return path


def finite(obj):
    """`obj` with every non-finite float replaced by None (JSON has no NaN or infinity); a dict
    that had any gets a `nonfinite` list naming those keys, saying why they are null."""
    import numpy as np

    if isinstance(obj, Mapping):
        out = {k: finite(v) for k, v in obj.items()}
        bad = [k for k, v in obj.items() if isinstance(v, (float, np.floating)) and not math.isfinite(v)]
        if bad:
            out["nonfinite"] = bad
        return out
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.ndarray):
        return finite(obj.tolist())
    return obj


def _default(x):
    import numpy as np

    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x)}")


def print_json(obj) -> None:
    print(json.dumps(finite(obj), allow_nan=False, default=_default))


def table(rows, cols) -> str:
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(str(r[c]).rjust(w) for c, w in zip(cols, widths)) for r in rows]
    return "\n".join(lines)


def criterion_arg(s: str) -> float | str:
    """An argparse type for `--criterion`: `all` -> 1.0, `accuracy:X` -> X (Adam's fraction),
    `tail:r` -> `"tail:r"` (the tail average)."""
    if s == "all":
        return 1.0
    head, _, x = s.partition(":")
    if head not in ("accuracy", "tail") or not x:
        raise argparse.ArgumentTypeError(f"must be 'all', 'accuracy:X' or 'tail:r', got {s!r}")
    if head == "tail":
        return f"tail:{real(0.0, 1.0, low_open=True)(x):g}"
    return real(0.0, 1.0, low_open=True)(x)
