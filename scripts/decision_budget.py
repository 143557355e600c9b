"""The iterations of a folder's certified full-rank decisions against their budget: per point,
the most iterations any decision took and how many reached the budget (`max_iter`), where a
decision stops undecided unless its float64 recheck certifies it. Reads records; writes nothing.

    python scripts/decision_budget.py docs/scaling
"""

import argparse
import collections
import sys

from jaxmem.study import Store


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    a = ap.parse_args()
    most, at_budget, count = collections.Counter(), collections.Counter(), collections.Counter()
    for r in Store(a.dir).records():
        c = r["config"]
        # a rank-m decision's budget is per phase (`rank_max_iter`), not `max_iter`
        if r.get("kind") != "threshold" or c.get("solver") != "certified" or c["model"] != "full":
            continue
        point = (c["d"], c["problem"], c["model"], c["kappa"])
        budget = c["decide"]["max_iter"]
        for x in r["decisions"]:
            most[point] = max(most[point], x["iterations"])
            at_budget[point] += x["iterations"] >= budget
            count[point] += 1
    for point in sorted(most):
        d, problem, model, kappa = point
        print(
            f"d={d} {problem} {model} kappa={kappa:.2f}: {count[point]} decisions, at most "
            f"{most[point]} iterations, {at_budget[point]} at the budget"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
