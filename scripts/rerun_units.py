"""Run again some units of a results folder, into another folder: does this code (or this
machine) give a folder's records? Compare the two with `scripts/compare_records.py`, whose
"differ" counts the units rerun (the others are in one folder only).

    python scripts/rerun_units.py DIR OUT ID [ID ...]    # ID: a record file's name, less .jsonl
"""

import argparse
import sys

from jaxmem.study import run_one, Store


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", metavar="DIR", help="the folder whose units are rerun")
    ap.add_argument("out", metavar="OUT", help="the folder the new records go to")
    ap.add_argument("ids", metavar="ID", nargs="+", help="units, by their record file's name")
    args = ap.parse_args(argv)
    source, out = Store(args.folder), Store(args.out)
    for i in args.ids:
        recs = source.unit(i)
        if recs is None:
            print(f"rerun_units.py: no valid record file {i}.jsonl under {args.folder}", file=sys.stderr)
            return 2
        out.write(recs[0].config, run_one(recs[0].config))
        print(f"{i}: {len(recs)} records written", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
