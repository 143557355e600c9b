"""The dense and the working-set decider on the same seeds, in one run: thresholds seed by seed,
wall time (compilation included), iterations, and FLOPs against the matmul peak.

Each point runs the certified threshold search of `jm.capacity` (the same plan, tasks and
tolerance) once per decider, in this process and without a store, so both are timed alike.
A seed whose thresholds differ is listed with the decisions that differ: both deciders'
certificates are exact, so a difference needs a best margin in `(0, tol)` (one storable with a
normalised margin below `tol`, the other unstorable with a bound below `tol`).

FLOPs are counted from the records by `_common.decision_flops`, and set against the measured
matmul peak.

    python benchmarks/deciders.py --d 48 64 --problem op dp --seeds 16
"""

import argparse
import sys
import time

from _common import decision_flops, matmul_peak, write
from jaxmem import DecideConfig
from jaxmem.study import point_configs, run_unit


def run(d, problem, seeds, decider):
    cfg = DecideConfig(decider=decider)
    unit = point_configs(d=d, problem=problem, seeds=seeds, group=seeds, decide_config=cfg)[0]
    t = time.perf_counter()
    recs = run_unit(unit)
    wall = time.perf_counter() - t
    dec = [x for r in recs for x in r["decisions"]]
    flops = decision_flops(d, dec, unit)
    return recs, dict(
        wall_s=wall,
        decisions=len(dec),
        iterations=sum(x["iterations"] for x in dec),
        flops=flops,
        undecided=sum(r["undecided"] for r in recs),
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, nargs="+", default=[48, 64])
    ap.add_argument("--problem", nargs="+", default=["op", "dp"])
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--name", default="deciders")
    a = ap.parse_args()
    peak = matmul_peak(2048)
    rows = []
    for d in a.d:
        for problem in a.problem:
            (rd, dense), (rw, ws) = (run(d, problem, a.seeds, x) for x in ("dense", "working-set"))
            diffs = [
                dict(
                    seed=x["seed"],
                    dense=x["p_star"],
                    working_set=y["p_star"],
                    dense_decisions=x["decisions"],
                    working_set_decisions=y["decisions"],
                )
                for x, y in zip(rd, rw)
                if x["p_star"] != y["p_star"]
            ]
            row = dict(
                d=d,
                problem=problem,
                seeds=a.seeds,
                dense=dense,
                working_set=ws,
                differ=diffs,
                speedup=dense["wall_s"] / ws["wall_s"],
            )
            rows.append(row)
            print(
                f"d={d} {problem} ({a.seeds} seeds): thresholds equal for {a.seeds - len(diffs)}/{a.seeds}; "
                f"dense {dense['wall_s']:.0f} s ({dense['iterations'] / dense['decisions']:.0f} it/decision, "
                f"{dense['flops'] / peak:.1f} s at peak), working set {ws['wall_s']:.0f} s "
                f"({ws['iterations'] / ws['decisions']:.0f} it/decision, "
                f"{ws['flops'] / peak:.1f} s at peak); "
                f"speed-up {row['speedup']:.2f}x; undecided {dense['undecided']} / {ws['undecided']}",
                flush=True,
            )
            for x in diffs:
                print(
                    f"  seed {x['seed']}: dense p* {x['dense']}, working set p* {x['working_set']}",
                    flush=True,
                )
    path = write(a.name, dict(matmul_peak=peak, rows=rows, argv=sys.argv))
    print(f"written {path}")


if __name__ == "__main__":
    main()
