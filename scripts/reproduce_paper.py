"""The paper's study at accelerator sizes, on the same code path as `jaxmem demo`.

    python scripts/reproduce_paper.py --out runs/paper            # GPU sizes (jaxmem.study.PAPER)
    python scripts/reproduce_paper.py --quick --out runs/quick    # CPU check (jaxmem.study.QUICK)

Certified capacities of the OP and the DP up to d = 256 with 64+ seeds, Adam on the same
nested tasks, the Hebbian rule, rank-constrained memories at seven kappa, the max-margin memories
of the spectra and scores, and Nichani, Lee and Bietti's protocol on their grid of d; then
`report.md` and its figures. Resumable: rerun the same command after an interruption.
"""

import argparse
import sys
import time

from jaxmem.study import default_jobs, PAPER, QUICK, run_study, Store, write_report


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="the CPU-sized check of the same path")
    ap.add_argument("--jobs", type=int, default=0, help="worker processes (0: as jaxmem demo)")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    Store(a.out).note_command(sys.argv)
    run_study(QUICK if a.quick else PAPER, a.out, log=sys.stderr, jobs=a.jobs or default_jobs())
    path, _ = write_report(a.out)
    print(f"report: {path}   ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
