"""Nichani, Lee and Bietti's linear associative-memory experiment (ICLR 2025, "Understanding
factual recall in transformers via associative memories"), on jaxmem's code path, beside the
all-stored capacity of the same embeddings.

Their protocol: inputs and targets are Gaussian rows normalised to unit norm (`embedding="unit"`);
the memory is a bias-free `d x d` linear map trained by Adam on the softmax cross-entropy over
all `N` targets (jaxmem's OP, with a stable log-softmax), stopped when the training accuracy
reaches 0.99 (`TrainConfig(accuracy=0.99)`); a per-seed search on `N` up to `d^2 / 2`. Their
figure draws `N` against `d^2` with the guide line `d^2 = 1.3 N ln N`.

Beside it, on the same nested tasks: the certified all-stored capacity (every association, no
optimiser budget) and Adam with the all-stored criterion. Each row is a median over seeds with
its binomial 95% CI. Their notebook uses five seeds ({0, 1, 11, 111, 42}); five cannot give a 95%
interval for a median (the widest, from the least to the largest, covers it with probability
1 - 2/2^5 = 0.94), so the default is 8 (jaxmem's seeds 0..7, its own nested tasks, not their
draws). Note that an accuracy of 0.99 over `N < 100` associations means all of them.

    python scripts/peer_protocol.py [--d 8 11 16 22 32 45 64] [--lr 0.5 5] [--out runs/peer]

The records go to `--out` (resumable); the table goes to stdout and `OUT/peer_protocol.json`,
the figure to `OUT/peer_protocol.png`.
"""

import argparse
import json
import math
import os
import sys
import time

import jaxmem as jm
from jaxmem.study import atomic_write, save_figure, versions


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, nargs="+", default=[8, 11, 16, 22, 32])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--lr", type=float, nargs="+", default=[0.5, 5.0])
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--out", default="runs/peer")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for d in a.d:
        runs = [("certified, all stored", "certified", jm.TrainConfig())]
        for lr in a.lr:
            for acc, crit in ((0.99, "accuracy 0.99"), (1.0, "all stored")):
                cfg = jm.TrainConfig(steps=a.steps, lr=lr, accuracy=acc)
                runs.append((f"Adam lr {lr:g}, {crit}", "adam", cfg))
        for label, solver, cfg in runs:
            t = time.perf_counter()
            est = jm.capacity(
                d=d, problem="op", seeds=a.seeds, solver=solver, adam_config=cfg, out=a.out, embedding="unit"
            )
            rows.append(
                dict(
                    d=d,
                    run=label,
                    solver=solver,
                    lr=cfg.lr if solver == "adam" else None,
                    accuracy=cfg.accuracy,
                    N=est.p_c,
                    alpha=est.alpha_c,
                    ci=[est.ci_low, est.ci_high],
                    guide_N=_guide(d),
                    seconds=time.perf_counter() - t,
                )
            )
            r = rows[-1]
            print(
                f"d={d:3d} {label:32s} N={r['N']:7.1f} alpha={r['alpha']:.3f} "
                f"[{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]  guide d^2=1.3 N ln N: N={r['guide_N']:.0f}  "
                f"({r['seconds']:.0f} s)",
                flush=True,
            )
    atomic_write(
        os.path.join(a.out, "peer_protocol.json"),
        json.dumps(dict(rows=rows, argv=sys.argv, versions=versions()), indent=1) + "\n",
    )
    _figure(rows, os.path.join(a.out, "peer_protocol.png"))
    print(f"written {a.out}/peer_protocol.json and {a.out}/peer_protocol.png")


def _guide(d: int) -> float:
    """`N` with `d^2 = 1.3 N ln N` (their guide line)."""
    return float(jm.p_from_alpha(d, 1 / 1.3))


def _figure(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for label in dict.fromkeys(r["run"] for r in rows):
        rs = [r for r in rows if r["run"] == label and math.isfinite(r["N"])]
        x = [r["d"] ** 2 for r in rs]
        ax.plot(x, [r["N"] for r in rs], "o-", label=label, ms=4)
    ds = sorted({r["d"] for r in rows})
    ax.plot([d * d for d in ds], [_guide(d) for d in ds], "k.--", lw=1, label=r"guide $d^2 = 1.3\,N\ln N$")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"$d^2$")
    ax.set_ylabel(r"capacity $N$ (median over seeds)")
    ax.set_title("Unit-norm embeddings: accuracy 0.99 against all stored")
    ax.legend(fontsize=7)
    save_figure(fig, os.path.dirname(path), os.path.splitext(os.path.basename(path))[0])


if __name__ == "__main__":
    main()
