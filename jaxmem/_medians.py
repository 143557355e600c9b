"""The capacity as the median of per-seed thresholds, with the distribution-free
(binomial order-statistic) confidence interval of a median."""

from __future__ import annotations

import math

import numpy as np

from ._tasks import alpha_of
from ._validate import check_int, check_shape


def median_ci(n: int, level: float = 0.95) -> tuple[int, int]:
    """1-based ranks `(j, k)` such that `[x_(j), x_(k)]` covers the median of any continuous law
    with probability at least `level` (binomial order statistics, symmetric).

    **Arguments:** `n`: the number of seeds; `level`: the coverage.

    **Returns:** `(j, k)`, 1-based, `k = n + 1 - j`; `(0, n + 1)` (an unbounded interval) when
    `n` is too small for `level`.
    """
    from math import comb

    check_int("n", n, 1)
    cdf = np.cumsum([comb(n, i) for i in range(n + 1)]) / 2.0**n  # P(Bin(n, 1/2) <= i)
    # coverage of [x_(j), x_(n+1-j)] is 1 - 2 P(Bin <= j - 1)
    j = 0
    for cand in range(1, n // 2 + 1):
        if 1 - 2 * cdf[cand - 1] >= level:
            j = cand
    if j == 0:
        return 0, n + 1  # too few seeds: the interval is unbounded
    return j, n + 1 - j


def median_capacity(lo, hi, d: int, level: float = 0.95, censored=None, load=alpha_of) -> dict:
    """`p_c` (median threshold), `alpha_c`, and the order-statistic CI in `p` and `alpha`.

    A seed whose threshold is only bracketed (`[lo, hi - 1]`) enters the lower end of the CI with
    `lo` and the upper end with `hi - 1`, so the interval stays conservative; the point estimate
    uses `lo` (a lower bound where inexact). A `censored` seed (no `p` failed: its threshold is
    only known to be at least `lo`) enters the upper end as `+inf`, so an upper end that reaches
    it is open (`inf`).
    """
    check_shape("lo", lo, (None,), "one per seed")
    check_shape("hi", hi, np.shape(lo), "as lo")
    lo, hi = np.asarray(lo), np.asarray(hi)
    n = lo.size
    top = np.asarray(hi - 1, float)
    if censored is not None:
        top[np.asarray(censored, bool)] = math.inf
    lower, upper = np.sort(lo), np.sort(top)
    p_c = float(np.median(lo))
    j, k = median_ci(n, level)
    p_lo = float(lower[j - 1]) if j >= 1 else math.nan
    p_hi = float(upper[k - 1]) if k <= n else math.nan
    a = lambda p: math.inf if p == math.inf else load(d, p) if math.isfinite(p) and p >= 2 else math.nan
    return dict(
        p_c=p_c,
        alpha_c=a(p_c),
        p_ci_low=p_lo,
        p_ci_high=p_hi,
        ci_low=a(p_lo),
        ci_high=a(p_hi),
        ci_ranks=[j, k],
    )
