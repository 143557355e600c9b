"""Where a certified threshold search spends its time: one seed group's search under cProfile
(no store), the wall time and the functions of largest cumulative time. Device work shows as
the time of the jitted calls that wait for it.

    python benchmarks/profile_search.py --d 128 --problem op --seeds 4 --decider working-set
"""

import argparse
import cProfile
import pstats
import sys
import time

import jaxmem as jm
from jaxmem.study import measure, point_configs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--problem", default="op")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--decider", default="working-set", choices=["auto", "dense", "working-set"])
    ap.add_argument("--top", type=int, default=45)
    a = ap.parse_args()
    units = point_configs(
        d=a.d, problem=a.problem, seeds=a.seeds, decide_config=jm.DecideConfig(decider=a.decider)
    )
    t = time.perf_counter()
    prof = cProfile.Profile()
    prof.enable()
    measure(units, store=None, log=sys.stderr)
    prof.disable()
    print(f"wall {time.perf_counter() - t:.1f} s")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(a.top)


if __name__ == "__main__":
    main()
