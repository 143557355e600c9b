"""Capacity estimates from sweep records, and the finite-size analysis.

For each (d, problem, model, kappa), P(all stored) is fitted against `x = ln p` by a logistic
`P = sigmoid(c0 + c1 x)` (maximum likelihood, a weak ridge on `c1` keeping separable data
finite); `p_c = exp(-c0/c1)` and `alpha_hat_c = p_c ln p_c / d^2`. The confidence interval is a
percentile bootstrap over seeds, resampled within each `p`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from ._tasks import alpha_of


N_BOOT = 400


def _logistic_fit(x, y, ridge=1e-2):
    """Penalised MLE of `P(y=1) = sigmoid(c0 + c1 x)`; Newton on a centred x."""
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


def _p_c(x, y):
    c0, c1 = _logistic_fit(x, y)
    if c1 >= 0 or not np.isfinite(c0 / c1) or -c0 / c1 > 700:
        return math.nan
    return math.exp(-c0 / c1)


def _alpha(p, d):
    return alpha_of(d, float(p))


def _accuracy_crossing(alphas, accs):
    """Load at which the mean accuracy first falls below 1/2 (linear interpolation)."""
    order = np.argsort(alphas)
    a, m = np.asarray(alphas)[order], np.asarray(accs)[order]
    for i in range(len(a) - 1):
        if m[i] >= 0.5 > m[i + 1]:
            return float(a[i] + (m[i] - 0.5) / (m[i] - m[i + 1]) * (a[i + 1] - a[i]))
    return None


class CapacityRow(Mapping):
    """One capacity estimate (a row of `jaxmem capacity`): a read-only mapping of its public
    fields (`d, problem, model, kappa, p_c, alpha_c, ci_low, ci_high, ...`), with the bootstrap
    samples of `alpha_c` beside them as `boot` (not a field: they are never printed).

    **Arguments:** `boot`, and the fields as keywords."""

    def __init__(self, boot=None, **fields):
        self._fields = MappingProxyType(dict(fields))
        self.boot = np.asarray([] if boot is None else boot, float)

    def __getitem__(self, key):
        return self._fields[key]

    def __iter__(self):
        return iter(self._fields)

    def __len__(self):
        return len(self._fields)

    def __repr__(self):
        return f"CapacityRow({dict(self._fields)!r})"

    def to_json(self) -> dict:
        return dict(self._fields)


def group_key(cfg):
    return (cfg["d"], cfg["problem"], cfg["model"], round(cfg["kappa"], 6))


def estimate(records: list[dict], *, seed: int = 0, n_boot: int = N_BOOT, theory: bool = True) -> list[dict]:
    """One row per (d, problem, model, kappa): p_c, alpha_c with bootstrap CI, the load where
    mean accuracy crosses 1/2, theory value, number of runs, and the bootstrap samples."""
    groups = defaultdict(list)
    for r in records:
        groups[group_key(r["config"])].append(r)
    rng = np.random.default_rng(seed)
    rows = []
    for (d, problem, model, kappa), recs in sorted(groups.items()):
        by_p = defaultdict(list)
        for r in recs:
            by_p[r["config"]["p"]].append(r)
        ps = sorted(by_p)
        x = np.concatenate([[math.log(p)] * len(by_p[p]) for p in ps])
        y = np.concatenate([[float(r["all_stored"]) for r in by_p[p]] for p in ps])
        p_c = _p_c(x, y)
        boots = []
        for _ in range(n_boot):
            yb = np.concatenate(
                [rng.choice([float(r["all_stored"]) for r in by_p[p]], len(by_p[p])) for p in ps]
            )
            boots.append(_alpha(_p_c(x, yb), d))
        boots = np.array(boots)
        boots = boots[np.isfinite(boots)]
        fr = [float(np.mean([r["all_stored"] for r in by_p[p]])) for p in ps]
        bracketed = any(f >= 0.5 for f in fr) and any(f < 0.5 for f in fr)
        acc_cross = _accuracy_crossing(
            [_alpha(p, d) for p in ps], [np.mean([r["accuracy"] for r in by_p[p]]) for p in ps]
        )
        row = dict(
            d=d,
            problem=problem,
            model=model,
            kappa=kappa,
            p_c=p_c,
            alpha_c=_alpha(p_c, d),
            ci_low=float(np.percentile(boots, 2.5)) if boots.size else None,
            ci_high=float(np.percentile(boots, 97.5)) if boots.size else None,
            alpha_acc_half=acc_cross,
            bracketed=bracketed,
            n_runs=len(recs),
            grid=[
                dict(
                    p=p,
                    alpha=_alpha(p, d),
                    fraction_all_stored=f,
                    accuracy=float(np.mean([r["accuracy"] for r in by_p[p]])),
                    n=len(by_p[p]),
                )
                for p, f in zip(ps, fr)
            ],
        )
        if theory:
            row["theory_alpha_c"] = theory_alpha_c(d, p_c, model, kappa, problem)
        rows.append(CapacityRow(boot=boots, **row))
    return rows


def theory_alpha_c(d, p_c, model, kappa, problem):
    """Theory at the measured `p_c`: Gardner `alpha_c(p_c, kappa)`; Hebbian: the load where the
    finite-size P(all stored) of `jaxmem.theory.hebbian` crosses 1/2 at this `d`."""
    from . import theory as th

    if not np.isfinite(p_c):
        return None
    if model != "hebbian":
        return float(th.alpha_c(float(p_c), kappa=float(kappa)))
    p_all = lambda p: float(th.hebbian(d, p, problem, samples=50_000).p_all_stored)
    lo, hi = 2, max(4, int(4 * p_c))
    if p_all(hi) >= 0.5:
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if p_all(mid) >= 0.5:
            lo = mid
        else:
            hi = mid
    return _alpha(lo + 0.5, d)


def public(rows):
    """The rows as JSON-ready dicts."""
    return [r.to_json() for r in rows]


def compare_op_dp(rows):
    """Per d, alpha_hat(OP) - alpha_hat(DP) for full-rank memories with a bootstrap CI."""
    out = []
    full = {(r["d"], r["problem"]): r for r in rows if r["model"] == "full"}
    for d in sorted({d for d, _ in full}):
        if (d, "op") in full and (d, "dp") in full:
            a, b = full[(d, "op")], full[(d, "dp")]
            n = min(len(a.boot), len(b.boot))
            diff = a.boot[:n] - b.boot[:n]
            lo, hi = (
                (float(np.percentile(diff, 2.5)), float(np.percentile(diff, 97.5))) if n else (None, None)
            )
            out.append(
                dict(
                    d=d,
                    diff=a["alpha_c"] - b["alpha_c"],
                    ci_low=lo,
                    ci_high=hi,
                    differs=bool(n and (lo > 0 or hi < 0)),
                )
            )
    return out
