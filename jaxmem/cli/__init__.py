"""The `jaxmem` command. Every subcommand takes `--json` and then prints exactly one JSON
object on stdout. Bad arguments exit 2 with one readable line; other failures exit 1.

The library never imports this package."""

from ._common import ArgumentError, main


__all__ = ["ArgumentError", "main"]
