"""How tight the certified rank-`m` lower bound is: the same threshold searches (seeds `0..n-1`
of the study's nested tasks, its search plan) with the default stopping rule of the rank phase
and with larger budgets, seed by seed. A budget is `window:progress` (the phase stops once its
squared hinge fell by less than `progress` of itself over `window` iterations), with `+warm` for
a second start of the rank phase from the seed's last rank-`m` memory (continuation in `p`);
`default` is `DecideConfig()` as it stands (so the script also runs on an earlier commit, with
`PYTHONPATH` pointing at its checkout, and `--tag` naming the result file).
A larger budget that finds a higher threshold at some seed shows that the default is not tight
there; the report gives those seeds, the change of the median, and each search's time.

    python benchmarks/rank_budget.py --d 32 --kappa 0.25 0.5 0.75 --problem op dp --seeds 8 \\
        --budget 100:0.01 1000:0.0005+warm
"""

import argparse
import time

import jax
import numpy as np
from _common import write
from jaxmem import alpha_of, DecideConfig, make_tasks, rank_of, search_thresholds, SearchPlan
from jaxmem.study import point_configs


def budget(text: str) -> DecideConfig:
    if text == "default":  # also what a commit without these settings runs
        return DecideConfig()
    rule, _, warm = text.partition("+")
    window, progress = rule.split(":")
    return DecideConfig(rank_window=int(window), rank_progress=float(progress), warm_start=warm == "warm")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=32)
    ap.add_argument("--kappa", type=float, nargs="+", default=[0.25, 0.5, 0.75])
    ap.add_argument("--problem", nargs="+", default=["op", "dp"])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--budget", nargs="+", default=["default", "1000:0.0005+warm"])
    ap.add_argument("--tag", default="", help="appended to the result file's name")
    a = ap.parse_args()
    rows = []
    for kappa in a.kappa:
        for problem in a.problem:
            cfg = point_configs(d=a.d, problem=problem, model="factored", kappa=kappa, seeds=a.seeds)[0]
            plan = SearchPlan(**cfg["plan"])
            tasks = make_tasks(jax.random.key(cfg["seed0"]), n=a.seeds, d=a.d, p=plan.p_max, problem=problem)
            found = {}
            for b in a.budget:
                t = time.perf_counter()
                th = search_thresholds(
                    tasks, plan=plan, rank=rank_of(a.d, kappa=kappa), decide_config=budget(b)
                )
                found[b] = dict(
                    p_star=th.lo.tolist(),
                    seconds=round(time.perf_counter() - t, 1),
                    iterations=int(sum(x[4] for ds in th.decisions for x in ds)),
                    median_alpha=float(alpha_of(a.d, np.median(th.lo))),
                )
            base = np.array(found[a.budget[0]]["p_star"])
            for b in a.budget[1:]:
                other = np.array(found[b]["p_star"])
                found[b]["higher"] = [int(s) for s in np.flatnonzero(other > base)]
                found[b]["lower"] = [int(s) for s in np.flatnonzero(other < base)]
            print(f"d={a.d} kappa={kappa} {problem}:")
            for b, f in found.items():
                extra = f" higher at seeds {f['higher']}, lower at {f['lower']}" if "higher" in f else ""
                print(
                    f"  {b:>18}: p* {f['p_star']}  median alpha {f['median_alpha']:.4f}  "
                    f"{f['seconds']:.0f} s, {f['iterations']} iterations{extra}",
                    flush=True,
                )
            rows.append(dict(d=a.d, kappa=kappa, problem=problem, budgets=found))
    print("written:", write(f"rank_budget_{a.d}{a.tag}", dict(command=vars(a), rows=rows)))


if __name__ == "__main__":
    main()
