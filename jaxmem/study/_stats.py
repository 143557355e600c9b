"""Statistics of seeds, all pure functions of numpy arrays: intervals, bootstrap draws, the
logistic cross-check, and one judgement of what an interval decides (`judge`, a `Verdict`).

Every verdict a table or a page prints is `judge` of a 95% interval; tables and pages only word
it. An interval decides "above" (or "below") a value only where it lies wholly on that side; a
one-sided interval (a lower bound, or an interval left open above by censored seeds) can decide
only "above".
"""

from __future__ import annotations

import enum
import hashlib
import json
import math

import numpy as np


class Verdict(enum.Enum):
    """What a 95% interval decides about a value: `ABOVE` (the interval lies above it), `BELOW`,
    `INSIDE` (the value lies in the interval: they agree, and a difference is undecided),
    `UNDECIDED` (a one-sided interval that does not lie above it), `NO_CI` (no interval or no
    value)."""

    ABOVE = "above"
    BELOW = "below"
    INSIDE = "inside"
    UNDECIDED = "undecided"
    NO_CI = "no CI"

    @property
    def decided(self) -> bool:
        """Whether the interval lies on one side of the value."""
        return self in (Verdict.ABOVE, Verdict.BELOW)


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


def judge(lo, hi, value=0.0, *, lower_bound: bool = False) -> Verdict:
    """What the interval `[lo, hi]` decides about `value`.

    **Arguments:** `lo`, `hi`: the interval's ends (None or infinite where it has none; `hi`
    infinite: open above); `value`: what it is compared with (None: nothing to compare);
    `lower_bound`: the interval bounds the quantity from below only (a certified rank-`m`
    capacity), so only `ABOVE` can be decided.

    **Returns:** a `Verdict`."""
    if value is None or not _finite(lo):
        return Verdict.NO_CI
    if lower_bound or not _finite(hi):
        return Verdict.ABOVE if lo > value else Verdict.UNDECIDED
    if lo > value:
        return Verdict.ABOVE
    if hi < value:
        return Verdict.BELOW
    return Verdict.INSIDE


def seeds_to_decide(diff, lo, hi, n):
    """Seeds per side at which an interval of the same shape, shrinking as `1/sqrt(n)`, would
    exclude 0 (`n` where it already does; None where the estimate is exactly 0)."""
    if judge(lo, hi).decided:
        return n
    half = (hi - lo) / 2
    # the CI does not decide at n, so more than n seeds are needed, whatever the scaling says
    return None if diff == 0 else max(n + 1, int(math.ceil(n * (half / abs(diff)) ** 2)))


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


def ks_distance(x, y) -> float:
    """Two-sample Kolmogorov-Smirnov statistic `sup |F_x - F_y|`."""
    x, y = np.sort(x), np.sort(y)
    grid = np.concatenate([x, y])
    return float(
        np.max(
            np.abs(np.searchsorted(x, grid, "right") / x.size - np.searchsorted(y, grid, "right") / y.size)
        )
    )


def point_rng(seed: int, *what) -> np.random.Generator:
    """The bootstrap generator of one quantity, a pure function of `seed` and `what` (its name
    and point, JSON-able): a row's interval depends on its own records alone, not on how many
    draws the rows before it took."""
    tag = hashlib.sha1(json.dumps(what, sort_keys=True, default=str).encode()).digest()
    return np.random.default_rng([seed, int.from_bytes(tag[:8], "little")])


def bootstrap_median_p(x, rng, n_boot=2000) -> np.ndarray:
    """`(2, n_boot)`: the medians of `n_boot` resamples of the seeds of a `(2, n)` brackets array
    (each seed's least and greatest threshold), at both ends (a seed is drawn with its whole
    bracket, so each resample's median threshold lies between its two medians)."""
    idx = rng.choice(x.shape[1], (n_boot, x.shape[1]))
    return np.median(x[:, idx], axis=2)


# Bootstrap samples of a quantity known only within brackets are `(2, n_boot)` arrays: row 0 its
# least value in each resample, row 1 its greatest. Exact thresholds give two equal rows.
def minus(a, b):
    """The samples of `a - b` (least: `a`'s least minus `b`'s greatest)."""
    return np.stack([a[0] - b[1], a[1] - b[0]])


def signed(s, x):
    """The samples of `s x` for a sign `s`."""
    return x if s >= 0 else -x[::-1]


def percentile_ci(x) -> tuple[float, float]:
    """The 95% percentile interval of bracketed samples: its low end from the least values, its
    high end from the greatest."""
    return float(np.percentile(x[0], 2.5)), float(np.percentile(x[1], 97.5))


def above(x) -> bool:
    """Whether the bracketed samples' one-sided 97.5% interval lies above 0."""
    return judge(float(np.percentile(x[0], 2.5)), math.inf) is Verdict.ABOVE


def logistic_fit(x, y, ridge=1e-2):
    """Penalised MLE of `P(y=1) = sigmoid(c0 + c1 x)`; Newton on a centred x.

    **Returns:** `(c0, c1)`."""
    xm = x.mean()
    X = np.stack([np.ones_like(x), x - xm], 1)
    c = np.zeros(2)
    pen = np.array([0.0, ridge])
    for _ in range(100):
        eta = X @ c
        mu = 1 / (1 + np.exp(-eta))
        g = X.T @ (y - mu) - pen * c
        H = (X * (mu * (1 - mu))[:, None]).T @ X + np.diag(pen) + 1e-12 * np.eye(2)
        step = np.linalg.solve(H, g)
        c = c + step
        if np.abs(step).max() < 1e-10:
            break
    c0, c1 = c[0] - c[1] * xm, c[1]
    return c0, c1


def logistic_crossing(x, y) -> float:
    """`exp(x)` where the logistic fit of `y` against `x` crosses 1/2 (nan where it does not
    fall, or crosses beyond `e^700`)."""
    c0, c1 = logistic_fit(x, y)
    if c1 >= 0 or not np.isfinite(c0 / c1) or -c0 / c1 > 700:
        return math.nan
    return math.exp(-c0 / c1)
