"""The rank study: certified lower bounds on the capacity of two-layer memories `W = Q R^T` of
rank `m = kappa d`, against the theory's `alpha_c(p, kappa)`, with Adam on the same model and the
full-rank thresholds that bound each seed's uncertified gap.

    python scripts/rank.py --out runs/rank            # jaxmem.study.RANK (26 min, --jobs 2, 2 cores)
    python scripts/rank.py --out runs/rank --large    # then RANK_LARGE: d = 48 at kappa = 0.5
    python scripts/rank.py --quick --out /tmp/rank    # the same path in under a minute
    python scripts/rank.py --out runs/rank --plan     # its units of work, for a SLURM array
    python scripts/rank.py --out runs/rank --shard 3/8   # one task of such an array

Resumable: rerun the same command after an interruption; finished units are read, not rerun.
Once every unit is done it writes `rank.md`, `rank.json` and `rank.png` in `--out`
(`jaxmem capacity DIR` reads the same records).
"""

from jaxmem.study import RANK, RANK_LARGE, rank_points, RANK_QUICK, write_rank
from study_preset import run_preset


def main(argv=None):
    run_preset(
        __doc__,
        rank_points(RANK),
        rank_points(RANK_QUICK),
        write_rank,
        argv,
        more=dict(large=(rank_points(RANK_LARGE), "RANK_LARGE: d = 48 at kappa = 0.5, into the same folder")),
    )


if __name__ == "__main__":
    main()
