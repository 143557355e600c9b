"""The storage mechanism of a memory (docs/science.md, 2.3 and 2.4): its spectrum and its scores
per instance, and comparisons over seeds with Student-t intervals. Pure functions of numpy
arrays (float64), shared by the study's max-margin units and the mechanism study.

Scores of input `mu` are `h_rho = c^(mu)_rho . W e_mu`, in two units:

- `|W e_mu|` (the law of 2.4: Gaussian competitors are then `N(0, 1)` for a `W` independent of
  them);
- the competitors' own spread, `(h - mean_rho h_rho) / std_rho h_rho` over `rho != mu`, which
  does not assume that independence.
"""

from __future__ import annotations

import math

import numpy as np


# two-sided 95% quantiles of Student's t with 1..30 degrees of freedom
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t975(df: int) -> float:
    """The two-sided 95% quantile of Student's t with `df >= 1` degrees of freedom: tabulated to
    30, then linear in `1/df` through 1.980 at 120 and 1.960 at infinity (within 0.001)."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if df <= 30:
        return _T975[df - 1]
    if df <= 120:
        w = (1 / df - 1 / 120) / (1 / 30 - 1 / 120)
        return 1.980 + w * (2.042 - 1.980)
    return 1.960 + (120 / df) * (1.980 - 1.960)


def mean_ci(x) -> tuple[float, float, float]:
    """`(mean, low, high)`: the mean of `x` with its 95% Student-t interval (`nan` bounds for fewer
    than two values)."""
    x = np.asarray(x, float)
    m = float(x.mean())
    if x.size < 2:
        return m, math.nan, math.nan
    half = t975(x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return m, m - half, m + half


def ci_verdict(low: float, high: float, value: float = 0.0) -> str:
    """What a 95% interval decides about `value`: "above", "below", or "undecided" (inside)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "undecided (no CI)"
    if low > value:
        return "above"
    if high < value:
        return "below"
    return "undecided"


def ks_distance(x, y) -> float:
    """Two-sample Kolmogorov-Smirnov statistic `sup |F_x - F_y|`."""
    x, y = np.sort(x), np.sort(y)
    grid = np.concatenate([x, y])
    return float(
        np.max(
            np.abs(np.searchsorted(x, grid, "right") / x.size - np.searchsorted(y, grid, "right") / y.size)
        )
    )


def normalised_spectrum(W, m: int, F: float = 1.0) -> np.ndarray:
    """The `m` largest singular values of `W`, scaled to `sum s^2 = d^2 F` and divided by
    `sqrt d` (so the full-rank mean of `s^2` is 1, the quarter circle's)."""
    d = W.shape[0]
    s = np.linalg.svd(np.asarray(W, float), compute_uv=False)[:m]
    return s * math.sqrt(d * d * F / np.sum(s * s)) / math.sqrt(d)


def score_table(W, E, C, p: int) -> dict:
    """Per input of the first `p`: the target and best-competitor scores in units of `|W e_mu|`
    (`target`, `best`) and of the competitors' spread (`target_z`, `best_z`).

    **Arguments:** `W` `(d, d)`; `E` `(P, d)` inputs; `C` `(P, d)` shared targets (OP) or
    `(P, P, d)` per-input candidates (DP); `p`.

    **Returns:** a dict of `(p,)` arrays."""
    E = np.asarray(E, float)[:p]
    C = np.asarray(C, float)
    V = E @ np.asarray(W, float).T
    S = np.einsum("md,mrd->mr", V, C[:p, :p]) if C.ndim == 3 else V @ C[:p].T
    target = np.diagonal(S).copy()
    comp = S.copy()
    np.fill_diagonal(comp, np.nan)
    mean, std = np.nanmean(comp, axis=1), np.nanstd(comp, axis=1, ddof=1)
    best = np.nanmax(comp, axis=1)
    norm = np.linalg.norm(V, axis=1)
    return dict(
        target=target / norm, best=best / norm, target_z=(target - mean) / std, best_z=(best - mean) / std
    )


SPECTRUM_STATS = ("sv_mean", "sv_m4", "sv_max", "ks_law", "ks_finite")
SCORE_STATS = ("target", "best", "gap", "target_sd", "target_z", "best_z", "gap_z")


def memory_summary(W, E, C, p: int, *, m: int, F: float, law, finite) -> dict:
    """One memory's spectrum and scores in a few numbers: the mean, fourth moment and largest of
    its normalised singular values (`normalised_spectrum`), their KS distances to samples of the
    limiting law (`law`) and of the finite-`p/d` law (`finite`); the per-input means of the target,
    the best competitor and their gap in units of `|W e_mu|`, the spread of the targets over
    inputs, and the same means in units of the competitors' spread (`_z`).

    **Returns:** a dict of floats, `SPECTRUM_STATS + SCORE_STATS`."""
    sv = normalised_spectrum(W, m, F)
    sc = score_table(W, E, C, p)
    return dict(
        sv_mean=float(sv.mean()),
        sv_m4=float(np.mean(sv**4)),
        sv_max=float(sv.max()),
        ks_law=ks_distance(sv, law),
        ks_finite=ks_distance(sv, finite),
        target=float(sc["target"].mean()),
        best=float(sc["best"].mean()),
        gap=float(np.mean(sc["target"] - sc["best"])),
        target_sd=float(sc["target"].std(ddof=1)),
        target_z=float(sc["target_z"].mean()),
        best_z=float(sc["best_z"].mean()),
        gap_z=float(np.mean(sc["target_z"] - sc["best_z"])),
    )


def paired_rows(a: list[dict], b: list[dict], keys) -> list[dict]:
    """Per statistic in `keys`: the mean of `a - b` over paired instances (same seeds), its 95%
    Student-t interval and what the interval decides about 0 ("above": `a` larger)."""
    out = []
    for k in keys:
        diff = np.array([x[k] - y[k] for x, y in zip(a, b, strict=True)])
        m, lo, hi = mean_ci(diff)
        out.append(
            dict(
                stat=k,
                a=float(np.mean([x[k] for x in a])),
                b=float(np.mean([y[k] for y in b])),
                diff=m,
                low=lo,
                high=hi,
                verdict=ci_verdict(lo, hi),
            )
        )
    return out
