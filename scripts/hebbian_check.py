"""Hebbian finite-size theory against simulation (README table).

python scripts/hebbian_check.py
"""

import jax
import jaxmem as jm
import numpy as np
from jaxmem import theory as th


def main(n=64):
    print("| d | alpha | p | problem | sim accuracy | theory | asymptote | sim P(all) | theory P(all) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for d in (32, 64, 128):
        for alpha in (0.1, 0.3):
            p = jm.p_from_alpha(d, alpha)
            for problem in ("op", "dp"):
                tasks = jm.make_tasks(jax.random.key(d), n=n, d=d, p=p, problem=problem)
                st = np.asarray(jm.ensemble_metrics(jm.hebbian(tasks), tasks).stored)
                acc = st.mean(1)
                h = th.hebbian(d, p, problem)
                print(
                    f"| {d} | {alpha} | {p} | {problem} | {acc.mean():.4f} ± {acc.std() / np.sqrt(n):.4f} | "
                    f"{float(h.accuracy):.4f} | {float(th.hebbian_asymptotic(d, p)):.4f} | "
                    f"{st.all(1).mean():.3f} | {float(h.p_all_stored):.3f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
