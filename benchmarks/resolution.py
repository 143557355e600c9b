"""What a coarser search resolution would skip, replayed on a folder of exact certified records.

A search at resolution `r` stops a seed once `hi - lo <= r`; its bisection proposes the same `p`
as the exact search until then, so the decisions it would skip are the recorded ones made after
that point. Per point and `r`: the share of the recorded iterations it would keep, and the
median's 95% CI from the brackets it would have left (each end from its own side).

    python benchmarks/resolution.py docs/scaling --r 1 2 4 8 --d 48 64 96 128
"""

import argparse

import numpy as np
from jaxmem import alpha_of, median_capacity
from jaxmem.study import Store


def replay(rec: dict, r: int) -> tuple[int, int, int]:
    """`(lo, hi, iterations kept)` of a seed's recorded decisions, stopped at resolution `r`."""
    lo, hi, kept = 1, rec["p_max"] + 1, 0
    for x in rec["decisions"]:
        if hi - lo <= r:
            break
        kept += x["iterations"]
        if x["status"] == "storable":
            lo = x["p"]
        else:
            hi = x["p"]
    return lo, hi, kept


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--r", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--d", type=int, nargs="+", default=None)
    a = ap.parse_args(argv)
    recs = [
        x
        for x in Store(a.dir).records()
        if x.get("kind") == "threshold"
        and x["config"]["solver"] == "certified"
        and x["config"]["model"] == "full"
        and x["exact"]
        and (a.d is None or x["config"]["d"] in a.d)
    ]
    points = sorted({(x["config"]["d"], x["config"]["problem"]) for x in recs})
    for d, problem in points:
        seeds = [x for x in recs if (x["config"]["d"], x["config"]["problem"]) == (d, problem)]
        total = sum(y["iterations"] for x in seeds for y in x["decisions"])
        for r in a.r:
            lo, hi, kept = np.array([replay(x, r) for x in seeds]).T
            est = median_capacity(lo, hi, d)
            step = alpha_of(d, est["p_c"] + 1) - alpha_of(d, est["p_c"])
            print(
                f"d={d} {problem} ({len(seeds)} seeds) r={r} (bracket span {r * step:.4f} in alpha): "
                f"iterations kept {kept.sum() / total:.2f}, CI [{est['ci_low']:.4f}, {est['ci_high']:.4f}] "
                f"width {est['ci_high'] - est['ci_low']:.4f}"
            )


if __name__ == "__main__":
    main()
