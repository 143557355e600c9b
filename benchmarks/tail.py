"""The tail-average decider against the top-1 decider on the same seeds, and its smoothing.

1. Per `d` and problem, the certified threshold search of `jm.capacity` for `tail:r` and for
   top-1 (the same tasks, plan defaults, no store), each in this process: wall time per seed
   (compilation included), decisions, iterations per decision (each iteration is one gradient
   evaluation of its loss, plus line-search passes over the margins), and FLOPs (a dense
   iteration costs `4 P^2 d`: the direction's margins and the adjoint) against the measured
   matmul peak.
2. The decisions at every seed's `p*` and `p* + 1` (the closest calls) decided again with the
   smoothed ReLU's half-width `delta` at 0.03, 0.1 (the default) and 0.3: statuses (which must
   agree: certificates are exact), iterations and wall time.

    python benchmarks/tail.py --d 16 24 --problem op dp --seeds 8 --r 0.1
"""

import argparse
import sys
import time

import jax
import jaxmem as jm
import numpy as np
from _common import matmul_peak, write
from jaxmem.solvers import DecideConfig, run_ensemble, Tail
from jaxmem.study import point_configs, run_unit


def search(d, problem, seeds, criterion):
    unit = point_configs(d=d, problem=problem, seeds=seeds, group=seeds, criterion=criterion)[0]
    t = time.perf_counter()
    recs = run_unit(unit)
    wall = time.perf_counter() - t
    dec = [x for r in recs for x in r["decisions"]]
    flops = sum(4.0 * x["p"] ** 2 * d * x["iterations"] for x in dec)
    return recs, dict(
        wall_s=wall,
        seconds_per_seed=wall / seeds,
        decisions=len(dec),
        iterations=sum(x["iterations"] for x in dec),
        iterations_per_decision=sum(x["iterations"] for x in dec) / len(dec),
        flops=flops,
    )


def smoothing(d, problem, recs, r, deltas):
    """The decisions at each seed's p* and p* + 1, with each delta."""
    seeds = [x["seed"] for x in recs for _ in (0, 1)]
    ps = np.array([x["p_star"] + j for x in recs for j in (0, 1)])
    tasks = jm.make_tasks(jax.random.key(0), seeds=seeds, d=d, p=int(ps.max()), problem=problem)
    out = {}
    for delta in deltas:
        decider = Tail(config=DecideConfig(), r=r, smooth=delta)
        t = time.perf_counter()
        solver, inst = decider.instances(tasks, ps, int(ps.max()))
        st, _ = run_ensemble(solver, inst, chunk=decider.chunk, early=True)
        dec = decider.conclude(solver, inst, st)
        out[f"{delta:g}"] = dict(
            wall_s=time.perf_counter() - t,
            status=dec.to_json()["status"],
            iterations=int(dec.iterations.sum()),
        )
    return dict(p=ps.tolist(), by_delta=out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, nargs="+", default=[16, 24])
    ap.add_argument("--problem", nargs="+", default=["op", "dp"])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--r", type=float, default=0.1)
    ap.add_argument("--deltas", type=float, nargs="+", default=[0.03, 0.1, 0.3])
    a = ap.parse_args(argv)
    peak = matmul_peak()
    points = []
    for d in a.d:
        for problem in a.problem:
            recs, tail = search(d, problem, a.seeds, f"tail:{a.r:g}")
            _, top1 = search(d, problem, a.seeds, "all")
            smooth = smoothing(d, problem, recs, a.r, a.deltas)
            agree = len({tuple(v["status"]) for v in smooth["by_delta"].values()}) == 1
            points.append(dict(d=d, problem=problem, tail=tail, top1=top1, smoothing=smooth, agree=agree))
            f = lambda x: x["flops"] / x["wall_s"] / peak
            print(
                f"d={d} {problem}: tail:{a.r:g} {tail['seconds_per_seed']:.1f} s/seed, "
                f"{tail['iterations_per_decision']:.0f} it/decision ({tail['decisions']} decisions, "
                f"{f(tail):.2%} of peak); top-1 {top1['seconds_per_seed']:.1f} s/seed, "
                f"{top1['iterations_per_decision']:.0f} it/decision ({f(top1):.2%} of peak); ratio "
                f"{tail['seconds_per_seed'] / top1['seconds_per_seed']:.1f}x time",
                flush=True,
            )
            print(
                "  smoothing at p*, p*+1: "
                + ", ".join(
                    f"delta {k}: {v['iterations']} it, {v['wall_s']:.1f} s"
                    for k, v in smooth["by_delta"].items()
                )
                + f"; statuses {'agree' if agree else 'DIFFER'}",
                flush=True,
            )
    path = write("tail", dict(command=" ".join(sys.argv), r=a.r, peak_flops=peak, points=points))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
