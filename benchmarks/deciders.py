"""Two settings of the certified decider on the same seeds, in one run: the dense against the
working-set decider (`--compare decider`), or a search whose decisions start from `W = 0`
against one that starts each from the best multiple of the seed's last storable memory
(`--compare warm-start`, with `--decider`). Thresholds seed by seed, wall time (compilation
included), iterations, and FLOPs against the matmul peak.

Each point runs the certified threshold search of `jm.capacity` (the same plan, tasks and
tolerance) once per setting, in this process and without a store, so both are timed alike.
A seed whose thresholds differ is listed: both certificates are exact, so a difference needs
a best margin in `(0, tol)` (one storable with a normalised margin below `tol`, the other
unstorable with a bound below `tol`).

FLOPs are counted from the records by `_common.decision_flops`, and set against the measured
matmul peak.

    python benchmarks/deciders.py --d 48 64 --problem op dp --seeds 16
    python benchmarks/deciders.py --compare warm-start --d 48 64 --problem op dp --seeds 16
"""

import argparse
import sys
import time

from _common import decision_flops, matmul_peak, write
from jaxmem import DecideConfig
from jaxmem.study import point_configs, run_unit


def run(d, problem, seeds, cfg):
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
    ap.add_argument("--compare", default="decider", choices=["decider", "warm-start"])
    ap.add_argument("--decider", default="auto", help="with --compare warm-start")
    ap.add_argument("--name", default=None)
    a = ap.parse_args()
    if a.compare == "decider":
        names = ("dense", "working set")
        cfgs = (DecideConfig(decider="dense"), DecideConfig(decider="working-set"))
    else:
        names = ("cold", "warm")
        cfgs = tuple(DecideConfig(decider=a.decider, warm_start=w) for w in (False, True))
    peak = matmul_peak(2048)
    rows = []
    for d in a.d:
        for problem in a.problem:
            (ra, one), (rb, two) = (run(d, problem, a.seeds, c) for c in cfgs)
            diffs = [
                dict(
                    seed=x["seed"],
                    p_star=[x["p_star"], y["p_star"]],
                    decisions=[x["decisions"], y["decisions"]],
                )
                for x, y in zip(ra, rb)
                if x["p_star"] != y["p_star"]
            ]
            row = dict(
                d=d,
                problem=problem,
                seeds=a.seeds,
                settings=names,
                runs=[one, two],
                differ=diffs,
                speedup=one["wall_s"] / two["wall_s"],
            )
            rows.append(row)
            said = [
                f"{name} {x['wall_s']:.0f} s ({x['iterations'] / x['decisions']:.0f} it/decision, "
                f"{x['decisions']} decisions, {x['flops'] / peak:.1f} s at peak)"
                for name, x in zip(names, (one, two))
            ]
            print(
                f"d={d} {problem} ({a.seeds} seeds): thresholds equal for {a.seeds - len(diffs)}/{a.seeds}; "
                f"{said[0]}, {said[1]}; speed-up {row['speedup']:.2f}x; "
                f"undecided {one['undecided']} / {two['undecided']}",
                flush=True,
            )
            for x in diffs:
                print(
                    f"  seed {x['seed']}: {names[0]} p* {x['p_star'][0]}, {names[1]} p* {x['p_star'][1]}",
                    flush=True,
                )
    name = a.name or ("deciders" if a.compare == "decider" else "warm_start")
    path = write(name, dict(matmul_peak=peak, rows=rows, argv=sys.argv))
    print(f"written {path}")


if __name__ == "__main__":
    main()
