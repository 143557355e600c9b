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
import time

import numpy as np

from ._stats import judge, ks_distance, mean_ci, Verdict


def ci_verdict(low: float, high: float, value: float = 0.0) -> str:
    """What a 95% interval decides about `value` (`judge`), worded: "above", "below", or
    "undecided" (inside)."""
    v = judge(low, high, value)
    if v is Verdict.NO_CI or not math.isfinite(high):
        return "undecided (no CI)"
    return v.value if v.decided else "undecided"


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


def margin_at_load(p: int, alpha: float) -> float:
    """The theory's margin `kappa >= 0` at which `alpha_c(p, margin=kappa)` is the load `alpha`
    (bisection to `2^-20` of its bracket; 0 where the load is at or above the capacity)."""
    from .. import theory as th

    if alpha >= float(th.alpha_c(p)):
        return 0.0
    lo, hi = 0.0, 1.0
    while float(th.alpha_c(p, margin=hi)) > alpha:
        hi *= 2
    for _ in range(20):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if float(th.alpha_c(p, margin=mid)) > alpha else (lo, mid)
    return (lo + hi) / 2


def run_mechanism_unit(cfg: dict) -> list[dict]:
    """The mechanism study's unit: the max-margin memories of a seed group at `p` (one per seed,
    a fraction `load` of its certified threshold; tasks drawn at `p_max`), each summarised
    (`memory_summary`) beside the Hebbian memory of the same task (full rank) and the theory at
    its `(p, alpha)`: the margin at that load, the water-level law's target and pooled count.
    One record per seed."""
    import jax

    from .. import theory as th
    from .._models import hebbian_weight, rank_of
    from .._tasks import make_tasks
    from ..solvers._constraints import batch_constraints
    from ..solvers._decide import to64
    from ..solvers._margin import max_margin
    from ..solvers._status import MARGIN_STATUS
    from ._records import envelope

    d, ps, P = cfg["d"], np.asarray(cfg["p"]), cfg["p_max"]
    seeds = range(*cfg["seeds"])
    tasks = make_tasks(jax.random.key(cfg["seed0"]), seeds=seeds, d=d, p=P, problem=cfg["problem"])
    factored = cfg["model"] == "factored"
    t = time.perf_counter()
    mm = max_margin(tasks, p=ps, model=cfg["model"], kappa=cfg["kappa"] if factored else None)
    sec = (time.perf_counter() - t) / len(seeds)
    cons = batch_constraints(tasks, ps, int(ps.max()), stream=False)
    with jax.enable_x64(True):
        c64 = jax.tree.map(to64, cons)
        a = np.asarray(jax.vmap(lambda c: c.rms_norm())(c64))
        c64 = jax.tree.map(np.asarray, c64)
    key = jax.random.key(cfg["seed0"] + 1)
    m = rank_of(d, kappa=cfg["kappa"]) if factored else d
    F = float(th.F(m / d)) if factored else 1.0

    def summarise(W, j, p, salt):
        k1, k2 = jax.random.split(jax.random.fold_in(key, salt * p))
        law = np.asarray(th.qc_sample(k1, 20_000, m / d))
        finite = np.asarray(th.product_spectrum(k2, d, p, samples=8, kappa=m / d))
        return memory_summary(W, c64.inputs[j], c64.candidates[j], p, m=m, F=F, law=law, finite=finite)

    recs = []
    for j, s in enumerate(seeds):
        p = int(ps[j])
        W = mm.weight[j]
        common = dict(p=p, seconds=sec, margin=float(mm.margin[j]), load=cfg["load"])
        if factored:
            rec = dict(
                common,
                rank=m,
                gap_to_full=float(mm.gap[j]),
                max_margin=summarise(W, j, p, 11),
                singular_values=normalised_spectrum(W, m, F).tolist(),
            )
        else:
            alpha = p * math.log(p) / d**2
            kappa_th = margin_at_load(p, alpha)
            law = th.optimal_scores(p, margin=kappa_th, samples=20_000, key=jax.random.fold_in(key, p))
            law0 = th.optimal_scores(p, samples=20_000, key=jax.random.fold_in(key, p))
            sc = score_table(W, c64.inputs[j], c64.candidates[j], p)
            H = hebbian_weight(c64.inputs[j, :p], np.asarray(tasks.targets[j, :p], np.float64))
            rec = dict(
                common,
                alpha=alpha,
                status=MARGIN_STATUS[int(mm.status[j])],
                gap_certified=float(mm.gap[j]),
                margin_field=float(mm.margin[j] * a[j]),
                margin_theory=kappa_th,
                active=float(np.mean(mm.active[j, :p])),
                pooled_theory=float(np.mean(np.asarray(law.pooled))),
                law_target=float(np.mean(np.asarray(law.target))),
                law_target_sd=float(np.std(np.asarray(law.target))),
                law0_target=float(np.mean(np.asarray(law0.target))),
                threshold=math.sqrt(2 * math.log(p)),
                max_margin=summarise(W, j, p, 7),
                hebbian=summarise(H, j, p, 7),
                singular_values=normalised_spectrum(W, d).tolist(),
                hebbian_singular_values=normalised_spectrum(H, d).tolist(),
                targets=sc["target"].tolist(),
                active_per_input=mm.active[j, :p].tolist(),
                law_targets=np.asarray(law.target)[:2000].tolist(),
            )
        recs.append(envelope(cfg, s, **rec))
    return recs
