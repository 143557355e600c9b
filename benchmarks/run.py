"""The regression benchmarks behind one entry point. Each prints its ratios (against the
alternative, against this machine's measured matmul peak, or against the floor) and writes
`benchmarks/results/NAME.json` with the machine and versions.

    python benchmarks/run.py                 # the list
    python benchmarks/run.py NAME [ARGS...]  # one benchmark (ARGS: its own options, see --help)
"""

import importlib
import os
import sys


# name -> (module, what it measures)
BENCHMARKS = {
    "throughput": ("throughput", "vmapped Adam against loops of single runs; FLOP/s against the matmul peak"),
    "deciders": (
        "deciders",
        "the dense against the working-set decider, seed by seed; FLOPs against the peak",
    ),
    "side_by_side": (
        "side_by_side",
        "jaxmem's certified threshold against an exact LP (HiGHS) and Adam, per seed",
    ),
    "latency": ("latency", "time to first answer, each item in a fresh process, cold and warm cache"),
    "theory": ("theory_timing", "alpha_c over 50 values of p and a 20-point saddle-point continuation"),
    "gpu": ("gpu", "the accelerator script: training steps and decisions at d = 256 to 1024"),
    "tail": ("tail", "the tail-average decider against the top-1 decider per seed, and its smoothing"),
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in BENCHMARKS:
        if argv and argv[0] not in ("-h", "--help"):
            print(f"run.py: error: no benchmark {argv[0]!r}", file=sys.stderr)
        print(__doc__.strip() + "\n\nbenchmarks:")
        for name, (_, what) in BENCHMARKS.items():
            print(f"  {name:13s} {what}")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    module = importlib.import_module(BENCHMARKS[argv[0]][0])
    sys.argv = [f"run.py {argv[0]}", *argv[1:]]
    module.main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
