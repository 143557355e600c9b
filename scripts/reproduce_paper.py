"""The paper's study at full scale, on the same code path as `jaxmem demo`.

    python scripts/reproduce_paper.py --out runs/paper            # GPU sizes
    python scripts/reproduce_paper.py --quick --out runs/quick    # CPU check (minutes)

Adaptive capacity searches for OP, DP (full rank) and Hebbian at each d, factored memories at
several kappa, then `report.md` with the six figures. Resumable: rerun the same command after
an interruption. Several hosts: give each `--shard i/n` and the same `--out`; then run
`jaxmem report OUT` once.
"""

import argparse
import sys

from jaxmem._study import prepare_figures, write_report
from jaxmem._sweep import Knobs, search_capacity, Store
from jaxmem._threshold import start_load


FULL = dict(ds=[32, 64, 128, 256, 512], seeds=32, kappas=[0.25, 0.5, 0.75], kappa_d=128)
QUICK = dict(ds=[12, 16], seeds=4, kappas=[0.5], kappa_d=16)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--shard", default="0/1", help="i/n: this host's share of the searches")
    a = ap.parse_args(argv)
    plan = QUICK if a.quick else FULL
    i, n = (int(x) for x in a.shard.split("/"))
    store = Store(a.out)
    store.note_command(sys.argv)
    knobs = Knobs(seeds=plan["seeds"], steps=2000 if a.quick else 20000)
    jobs = []
    for d in plan["ds"]:
        guess = start_load(d)
        jobs += [dict(d=d, problem=pr, model="full", alpha0=guess) for pr in ("op", "dp")]
        jobs += [dict(d=d, problem=pr, model="hebbian", alpha0=0.06) for pr in ("op", "dp")]
    d = plan["kappa_d"]
    for k in plan["kappas"]:
        jobs.append(
            dict(
                d=d,
                problem="op",
                model="factored",
                kappa=k,
                alpha0=start_load(d, k),
            )
        )
    for job in jobs[i::n]:
        search_capacity(store, knobs=knobs, log=sys.stderr, **job)
    if n == 1:
        prepare_figures(store)
        print(f"report: {write_report(a.out)[0]}")


if __name__ == "__main__":
    main()
