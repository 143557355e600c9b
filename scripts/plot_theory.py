"""Figure for the README: alpha_c(p) (finite p, with the asymptote 1/2) and alpha_c(kappa)
(asymptotic F(kappa)/2 and at p = 1e3, 1e6). Writes docs/theory.png.

    python scripts/plot_theory.py
"""

import os

import matplotlib


matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from jaxmem import theory as th  # noqa: E402


def main(out="docs/theory.png"):
    ps = np.logspace(1, 12, 40)
    caps = [th.capacity(float(p)) for p in ps]
    a = np.array([float(c.alpha_c) for c in caps])
    se = np.array([float(c.alpha_c_se) for c in caps])
    kap = np.linspace(0.02, 1.0, 40)
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    ax[0].errorbar(ps, a, yerr=se, fmt=".-", label=r"$\alpha_c(p) = \ln p\,/\,E\,\mathrm{dist}^2$")
    ax[0].axhline(0.5, color="k", ls="--", label="asymptote 1/2")
    ax[0].axhline(1 / 8, color="C3", ls=":", label="Hebbian asymptote 1/8")
    ax[0].set_xscale("log")
    ax[0].set_xlabel("number of associations p")
    ax[0].set_ylabel(r"capacity $\alpha_c = p\ln p/d^2$")
    ax[0].set_title("Full-rank memory: slow approach to 1/2")
    ax[0].legend()
    ax[1].plot(
        kap, [float(th.alpha_c_asymptotic(k)) for k in kap], "k-", label=r"$F(\kappa)/2$ ($p\to\infty$)"
    )
    for p in (1e3, 1e6):
        ax[1].plot(kap, [float(th.alpha_c(p, kappa=float(k))) for k in kap], ".-", label=f"p = {p:.0e}")
    ax[1].set_xlabel(r"rank fraction $\kappa = m/d$")
    ax[1].set_ylabel(r"$\alpha_c(p, \kappa)$")
    ax[1].set_title(r"Two-layer memory $W = QR^T$ (Gordon width)")
    ax[1].legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(out), exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
