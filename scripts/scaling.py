"""The scaling study: certified capacities of the OP and the DP against `d`, and whether their
difference (and each one's difference from the theory) shrinks as `d` grows.

    python scripts/scaling.py --out runs/scaling            # jaxmem.study.SCALING (under 3 hours, 2 cores)
    python scripts/scaling.py --out runs/scaling --more     # then SCALING_MORE: 32 seeds at d = 128 to 256
    python scripts/scaling.py --out runs/scaling --accelerator  # SCALING_ACCELERATOR: d = 512, 1024, one GPU
    python scripts/scaling.py --quick --out /tmp/scaling    # the same path in about a minute
    python scripts/scaling.py --out runs/scaling --plan     # its units of work, for a SLURM array
    python scripts/scaling.py --out runs/scaling --shard 3/8   # one task of such an array
    python scripts/scaling.py --out runs/scaling --report DIR  # SCALING's report alone, in DIR

Resumable: rerun the same command after an interruption; finished units are read, not rerun.
Once every unit of the preset is done it writes `scaling.md`, `scaling.json` and `scaling.png` in `--out`
(`jaxmem capacity DIR` reads the same records).
"""

from jaxmem.study import (
    SCALING,
    SCALING_ACCELERATOR,
    SCALING_MORE,
    scaling_points,
    SCALING_QUICK,
    write_scaling,
)
from study_preset import run_preset


def main(argv=None):
    run_preset(
        __doc__,
        scaling_points(SCALING),
        scaling_points(SCALING_QUICK),
        write_scaling,
        argv,
        more=dict(
            more=(
                scaling_points(SCALING_MORE),
                "SCALING_MORE: 32 seeds at d = 128 (OP, DP), 192 and 256 (OP), into the same folder",
            ),
            accelerator=(
                scaling_points(SCALING_ACCELERATOR),
                "SCALING_ACCELERATOR: the OP at d = 512 and 1024, on one GPU",
            ),
        ),
    )


if __name__ == "__main__":
    main()
