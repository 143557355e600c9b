"""The scaling study: certified capacities of the OP and the DP against `d`, and whether their
difference (and each one's difference from the theory) shrinks as `d` grows.

    python scripts/scaling.py --out runs/scaling            # jaxmem.study.SCALING (about 95 min, 2 cores)
    python scripts/scaling.py --quick --out /tmp/scaling    # the same path in about a minute
    python scripts/scaling.py --out runs/scaling --plan     # its units of work, for a SLURM array
    python scripts/scaling.py --out runs/scaling --shard 3/8   # one task of such an array

Resumable: rerun the same command after an interruption; finished units are read, not rerun.
Once every unit is done it writes `scaling.md`, `scaling.json` and `scaling.png` in `--out`
(`jaxmem capacity DIR` reads the same records).
"""

import argparse
import json
import sys
import time

from jaxmem.study import (
    measure,
    SCALING,
    scaling_points,
    SCALING_QUICK,
    Store,
    write_scaling,
)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="the minute-long check of the same path")
    ap.add_argument("--plan", action="store_true", help="print the units of work and stop")
    ap.add_argument("--shard", default="0/1", help="i/n: run every n-th unit from the i-th")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    a = ap.parse_args(argv)
    try:
        i, n = (int(x) for x in a.shard.split("/"))
        if not 0 <= i < n:
            raise ValueError
    except ValueError:
        ap.error(f"argument --shard: want i/n with 0 <= i < n, got {a.shard!r}")
    if a.jobs < 1:
        ap.error(f"argument --jobs: want at least 1, got {a.jobs}")
    units = scaling_points(SCALING_QUICK if a.quick else SCALING)
    if a.plan:
        for u in units:
            print(json.dumps(dict(d=u["d"], problem=u["problem"], seeds=u["seeds"])))
        print(f"{len(units)} units of work")
        return
    t0 = time.perf_counter()
    store = Store(a.out)
    store.note_command(sys.argv)
    measure(units, store=store, shard=(i, n), log=sys.stderr, jobs=a.jobs)
    left = sum(not store.done(u) for u in units)
    if left:
        print(f"{left} of {len(units)} units left (other shards); the report is written once all are done")
        return
    path, _ = write_scaling(a.out)
    print(f"report: {path}   ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
