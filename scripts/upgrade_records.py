"""Rewrite results folders' record files in the current record version.

Readers upgrade older records as they read them, so nothing needs this; it makes a committed
folder's files say what they are. Every table of the folder stays the same
(`jaxmem capacity DIR --json` before and after).

    python scripts/upgrade_records.py DIR [DIR ...]
"""

import argparse
import sys

from jaxmem.study import RECORD_VERSION, Store


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", metavar="DIR", help="results folders")
    args = ap.parse_args(argv)
    for folder in args.folders:
        n = Store(folder).rewrite()
        print(f"{folder}: {n} record files written in version {RECORD_VERSION}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
