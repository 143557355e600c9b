"""Compare the records of two folders seed by seed, timings aside: does a change of code give
the same measurements? Records are matched by unit kind, memory, solver, embedding, `seed0`
and seed (settings in either record form); a threshold record must agree in `p_star`, `p_hi`,
`undecided` and every decision's `p`, status and iterations, a max-margin record in `p` and its
margin to 6 digits, a sweep record in every outcome field but `seconds`. With `--statuses` a
decision's iterations are left out: another batch size (compaction) changes float32 rounding,
hence iteration counts, but must not change a `p` or a status.

    python scripts/compare_records.py DIR_A DIR_B [--statuses]
"""

import argparse
import json
import sys

from jaxmem.study import criterion, Store


def _key(r):
    c = r["config"]
    point = (c.get("kind"), c["d"], json.dumps(c.get("p")), c["problem"], c["model"], round(c["kappa"], 6))
    return point + (c.get("solver"), c.get("embedding"), c.get("seed0"), criterion(c), r["seed"])


def _value(r, iterations=True):
    if r.get("kind") == "threshold":
        decisions = [
            (x["p"], x["status"]) + ((x["iterations"],) if iterations else ()) for x in r["decisions"]
        ]
        return (r["p_star"], r["p_hi"], r["undecided"], decisions)
    if r.get("kind") == "maxmargin":
        return (r["p"], round(r["margin"], 6))
    return json.dumps(
        {k: v for k, v in r.items() if k not in ("seconds", "config", "id", "v")}, sort_keys=True
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--statuses", action="store_true", help="leave the decisions' iterations out")
    args = ap.parse_args()
    a = {_key(r): _value(r, not args.statuses) for r in Store(args.a).records()}
    b = {_key(r): _value(r, not args.statuses) for r in Store(args.b).records()}
    only = len(set(a) ^ set(b))
    differ = sorted(str(k) for k in set(a) & set(b) if a[k] != b[k])
    print(f"{len(a)} and {len(b)} records; {only} in one folder only; {len(differ)} differ")
    for k in differ[:10]:
        print("  differs:", k)
    return 0 if not only and not differ else 1


if __name__ == "__main__":
    sys.exit(main())
