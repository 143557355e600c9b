"""The mechanism study's pure functions against independent references: Student-t quantiles
(scipy), the score table against a direct loop, and the summaries' definitions."""

import math

import numpy as np
import pytest
from jaxmem.study import mean_ci, normalised_spectrum, paired_rows, score_table, t975
from scipy import stats


@pytest.mark.parametrize("df", [1, 2, 3, 5, 10, 29, 30, 31, 45, 80, 119, 120, 1000])
def test_t_quantiles_match_scipy(df):
    assert abs(t975(df) - stats.t.ppf(0.975, df)) < 1.5e-3


def test_mean_ci_is_the_t_interval():
    x = np.array([0.3, 1.2, -0.4, 0.8, 0.1])
    m, lo, hi = mean_ci(x)
    half = stats.t.ppf(0.975, 4) * x.std(ddof=1) / math.sqrt(5)
    assert (
        m == pytest.approx(x.mean())
        and lo == pytest.approx(m - half, abs=1e-3)
        and hi == pytest.approx(m + half, abs=1e-3)
    )
    a, b = [dict(s=1.0), dict(s=2.0), dict(s=3.5)], [dict(s=0.0), dict(s=1.0), dict(s=2.4)]
    row = paired_rows(a, b, ["s"])[0]
    assert row["diff"] == pytest.approx(31 / 30) and row["verdict"] == "above"
    # a wider spread of a larger mean difference leaves it undecided (t with 2 df is 4.30)
    row = paired_rows(a, [dict(s=0.0), dict(s=0.5), dict(s=1.0)], ["s"])[0]
    assert row["low"] < 0 < row["high"] and row["verdict"] == "undecided"


@pytest.mark.parametrize("shared", [True, False])
def test_score_table_against_a_loop(shared):
    rng = np.random.default_rng(0)
    d, P, p = 5, 9, 7
    W, E = rng.normal(size=(d, d)), rng.normal(size=(P, d))
    C = rng.normal(size=(P, d)) if shared else rng.normal(size=(P, P, d))
    t = score_table(W, E, C, p)
    for mu in range(p):
        v = W @ E[mu]
        h = np.array([(C[r] if shared else C[mu, r]) @ v for r in range(p)])
        comp = np.delete(h, mu)
        assert t["target"][mu] == pytest.approx(h[mu] / np.linalg.norm(v))
        assert t["best"][mu] == pytest.approx(comp.max() / np.linalg.norm(v))
        assert t["target_z"][mu] == pytest.approx((h[mu] - comp.mean()) / comp.std(ddof=1))
    s = normalised_spectrum(W, d)
    assert np.mean(s**2) == pytest.approx(1.0)
