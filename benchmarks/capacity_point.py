"""Certified capacity points and the Adam protocol on the same nested tasks, timed in one run.

For each point: the search time (compilation included, as a user sees it; summed from the
records, so a resumed run still reports the time of the run that measured it), decisions and
solver iterations, and the floor set by FLOPs: one decider iteration costs what one cross-entropy
gradient costs (`4 p^2 d + 4 p d^2` FLOPs for the margins and their adjoint), so the time
those iterations would take at this machine's measured float32 matmul peak is a lower bound.
Records go to `--out` (resumable, so a killed run continues); the table is rebuilt from them
by `jaxmem capacity OUT`.

    python benchmarks/capacity_point.py --d 16 24 32 48 --seeds 64 --adam-d 16 24 32 --adam-seeds 32
"""

import argparse
import sys
import time

from _common import decision_flops, matmul_peak, write
from jaxmem import DecideConfig
from jaxmem.study import (
    adam_vs_certified,
    compare,
    measure,
    normal_config,
    point_configs,
    Store,
    threshold_rows,
)


def run_point(store, **kw):
    units = point_configs(**kw)
    t = time.perf_counter()
    recs = measure(units, store=store, log=sys.stderr)
    wall = time.perf_counter() - t
    row = threshold_rows(recs)[0]
    d = kw["d"]
    dec = [x for r in recs for x in r["decisions"]]
    iters = sum(x["iterations"] for x in dec)
    flops = decision_flops(d, dec, units[0]) if units[0]["solver"] == "certified" else 0
    return recs, dict(
        row,
        wall_s=wall,
        decisions=len(dec),
        iterations=iters,
        iterations_per_decision=iters / max(1, len(dec)),
        flops=flops,
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, nargs="+", default=[16, 24, 32, 48])
    ap.add_argument("--problem", nargs="+", default=["op", "dp"])
    ap.add_argument("--seeds", type=int, default=64)
    ap.add_argument("--adam-d", type=int, nargs="*", default=[16, 24, 32])
    ap.add_argument("--adam-problem", nargs="+", default=["op"])
    ap.add_argument("--adam-seeds", type=int, default=32)
    ap.add_argument("--out", default="runs/capacity_point")
    ap.add_argument("--decider", default="auto", choices=["auto", "dense", "working-set"])
    ap.add_argument("--name", default="capacity_point", help="the result file benchmarks/results/NAME.json")
    a = ap.parse_args()
    store = Store(a.out)
    peak = matmul_peak(2048)
    rows, recs = [], []
    for d in a.d:
        for problem in a.problem:
            r, row = run_point(
                store, d=d, problem=problem, seeds=a.seeds, decide_config=DecideConfig(decider=a.decider)
            )
            row["decider"] = normal_config(r[0]["config"])["decide"]["decider"]
            recs += r
            row["floor_s"] = row["flops"] / peak
            rows.append(row)
            print(
                f"certified d={d} {problem} ({row['decider']}): alpha_c {row['alpha_c']:.4f} "
                f"[{row['ci_low']:.4f}, {row['ci_high']:.4f}] "
                f"(width {row['ci_high'] - row['ci_low']:.4f}), undecided {row['undecided']}, "
                f"searched in {row['seconds']:.0f} s ({row['wall_s']:.0f} s in this run); "
                f"{row['decisions']} decisions, {row['iterations_per_decision']:.0f} iterations each; "
                f"FLOP floor {row['floor_s']:.1f} s at {peak / 1e9:.0f} GFLOP/s "
                f"({row['seconds'] / row['floor_s']:.0f}x the floor); theory alpha_c(p_c) "
                f"{row['theory_alpha_c']:.4f}",
                flush=True,
            )
    for d in a.adam_d:
        for problem in a.adam_problem:
            r, row = run_point(store, d=d, problem=problem, seeds=a.adam_seeds, solver="adam")
            recs += r
            row["floor_s"] = None
            rows.append(row)
            print(
                f"adam d={d} {problem}: alpha_c {row['alpha_c']:.4f} [{row['ci_low']:.4f}, "
                f"{row['ci_high']:.4f}], "
                f"searched in {row['seconds']:.0f} s; {row['decisions']} runs, "
                f"{row['iterations_per_decision']:.0f} steps each",
                flush=True,
            )
    everything = store.records(warn=False)
    avc = adam_vs_certified(everything)
    for c in avc:
        print(
            f"adam vs certified d={c['d']} {c['problem']} ({c['seeds']} seeds): Adam below certified for "
            f"{c['fraction_below']:.2f} of seeds, capacity lost {c['lost']:+.4f} "
            f"({c['alpha_certified']:.4f} -> {c['alpha_adam']:.4f})"
        )
    opdp = compare(everything, dict(problem="op", solver="certified"), dict(problem="dp", solver="certified"))
    for c in opdp:
        print(
            f"OP - DP d={c['d']}: {c['diff']:+.4f} [{c['ci_low']:+.4f}, {c['ci_high']:+.4f}] {c['verdict']}"
        )
    path = write(
        a.name,
        dict(matmul_peak=peak, rows=rows, adam_vs_certified=avc, op_vs_dp=opdp, argv=sys.argv, out=a.out),
    )
    print(f"written {path}")


if __name__ == "__main__":
    main()
