"""The `jaxmem` command. Every subcommand takes `--json` and then prints exactly one JSON
object on stdout. Bad arguments exit 2 with one readable line; other failures exit 1.

The library never imports this package."""

import argparse
import os
import sys

from .._validate import InvalidArgument
from . import study, theory, train
from ._args import ArgumentError, one_line, Parser


__all__ = ["ArgumentError", "main"]

_DESCRIPTION = """How many facts a linear associative memory can store: train memories, decide
storability with certificates, measure capacities, and evaluate the replica theory."""
_EXAMPLES = """which command for which question:
  jaxmem demo                                        the CPU-sized study and its report (minutes)
  jaxmem study scaling --out runs/s                  a registered study (jaxmem study --help)
  jaxmem train --d 32 --alpha 0.5 --seeds 8          does Adam store p facts in d x d?
  jaxmem capacity --d 16 --seeds 8                   the certified capacity, with a 95% CI
  jaxmem capacity DIR [--json | --csv]               the tables of a folder's records
  jaxmem report DIR                                  figures and report.md of a folder
  jaxmem theory capacity --p 1000                    Gardner's alpha_c(p)

Run `jaxmem COMMAND --help` for a command's options and examples."""


def build_parser() -> Parser:
    p = Parser(prog="jaxmem", description=_DESCRIPTION, epilog=_EXAMPLES)
    p.add_argument(
        "--version", action=_Version, help="print the version (and the git commit of a checkout) and exit"
    )
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=Parser)
    for module in (train, study, theory):
        module.add_commands(sub)
    for command in _commands(sub):
        command.add_argument(
            "--json",
            action="store_true",
            help="print exactly one JSON object on stdout (progress stays on stderr)",
        )
        command.add_argument("--quiet", action="store_true", help="print no progress on stderr")
        command.add_argument(
            "--no-cache",
            action="store_true",
            help="do not keep compiled programs on disk for later runs (default: kept in "
            "JAXMEM_CACHE_DIR or ~/.cache/jaxmem/xla; JAXMEM_NO_CACHE=1 also turns it off)",
        )
    return p


def _prog(a) -> str:
    """`jaxmem CMD` (and the theory command) of a parsed command line, or `jaxmem`."""
    words = ["jaxmem", getattr(a, "cmd", None), getattr(a, "theory_cmd", None)]
    return " ".join(w for w in words if w)


def _version() -> str:
    """The version, and the git commit where jaxmem runs from a checkout (`+dirty` if it has
    uncommitted changes)."""
    import subprocess

    from .._provenance import VERSION

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        run = lambda *c: subprocess.run(
            ["git", "-C", root, *c], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        if os.path.isdir(os.path.join(root, ".git")):
            commit = run("rev-parse", "--short=12", "HEAD")
            dirty = "+dirty" if run("status", "--porcelain", "--untracked-files=no") else ""
            return f"jaxmem {VERSION} (git {commit}{dirty})"
    except (OSError, subprocess.SubprocessError):
        pass
    return f"jaxmem {VERSION}"


class _Version(argparse.Action):
    """`--version`: asks git only when given."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(_version())
        parser.exit()


def _commands(sub):
    """Every leaf subcommand's parser (the theory commands sit one level down)."""
    for parser in dict.fromkeys(sub.choices.values()):
        inner = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
        if inner:
            yield from _commands(inner[0])
        else:
            yield parser


def _use_cache(a) -> None:
    """The persistent compilation cache, unless `--no-cache` or `JAXMEM_NO_CACHE` says not to.

    On CPUs for which XLA records LLVM tuning flags among a program's machine features
    (`+prefer-no-gather`), every program read back from the cache logs an error-level line
    although it loads and runs (jax-ml/jax#38445): XLA's log lines below fatal are hidden then,
    unless `TF_CPP_MIN_LOG_LEVEL` is set (read when jax is first imported)."""
    if not getattr(a, "no_cache", False) and os.environ.get("JAXMEM_NO_CACHE", "") in ("", "0"):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        from .._cache import enable_compilation_cache

        enable_compilation_cache()


def _end_on_signals() -> None:
    """SIGINT and SIGTERM end the command at once, with one line and status `128 + signal`.

    A Python signal handler runs only between bytecodes of the main thread, never while it
    waits in a compiled computation (a theory loop can take minutes). So the signal is taken
    from the interpreter's wakeup file descriptor, which its C handler writes at once, by a
    thread that kills the worker processes and exits. Nothing is lost: every file is written
    by an atomic rename, and a writer's stale temp files are removed by the next one."""
    import multiprocessing
    import multiprocessing.resource_tracker
    import os
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    r, w = os.pipe()
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w)
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda *_: None)

    def watch():
        while True:
            got = os.read(r, 1)
            if got and got[0] in (signal.SIGINT, signal.SIGTERM):
                break
        for p in multiprocessing.active_children():
            p.kill()
        # and the semaphore tracker of the spawned workers, which would warn of their leak
        tracker = getattr(getattr(multiprocessing, "resource_tracker", None), "_resource_tracker", None)
        if getattr(tracker, "_pid", None):
            os.kill(tracker._pid, signal.SIGKILL)
        os.write(2, f"jaxmem: interrupted ({signal.Signals(got[0]).name})\n".encode())
        os._exit(128 + got[0])

    threading.Thread(target=watch, daemon=True, name="jaxmem-signals").start()


def main(argv=None) -> int:
    """Run `jaxmem ARGS`: 0 on success, 2 with one line on a bad argument, 1 with one line on
    any other failure (never a traceback). As a program (`argv` None), SIGINT and SIGTERM end it
    at once (`_end_on_signals`)."""
    if argv is None:
        _end_on_signals()
    try:
        parser = build_parser()
        a = parser.parse_args(argv)
        try:
            _use_cache(a)
            a.func(a)
        except InvalidArgument as e:  # a library check of a value the user gave
            raise ArgumentError(str(e)) from None
    except ArgumentError as e:
        print(one_line(str(e), _prog(locals().get("a"))), file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`| head`): nothing more to say
        sys.stdout = open(os.devnull, "w")
        return 1
    except KeyboardInterrupt:
        print("jaxmem: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # one readable line, never a traceback
        print(f"jaxmem: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
        return 1
    return 0
