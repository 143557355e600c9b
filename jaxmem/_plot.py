"""Figures from sweep records, each with its theory overlay (PNG and PDF)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import matplotlib


matplotlib.use("Agg")
import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from . import theory as th  # noqa: E402
from ._tasks import alpha_of, p_from_alpha  # noqa: E402
from ._validate import rank_of  # noqa: E402


class ReportData(eqx.Module):
    """Everything the figures draw, read from a folder by the report (figures compute no
    simulation): the sweep `records`, their capacity `rows`, the records at capacity of the
    score figure (`optimal`) and the Hebbian records beside them (or None), the `p` of the
    saddle-point figure and the theory's sampling `key`."""

    records: list
    rows: list
    optimal: list | None
    hebbian: list | None
    p_saddle: int
    key: object


def save_figure(fig, out, name):
    """Write `fig` as PNG and PDF, each atomically; returns the PNG's file name."""
    import io

    from ._files import atomic_write

    fig.tight_layout()
    for ext in ("png", "pdf"):
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, dpi=110)
        atomic_write(os.path.join(out, f"{name}.{ext}"), buf.getvalue())
    plt.close(fig)
    return f"{name}.png"


def _by_config(records):
    groups = {}
    for r in records:
        groups.setdefault(r["id"], []).append(r)
    return list(groups.values())


def fig_transition(data: ReportData, out):
    """(i) P(all stored) and mean accuracy against alpha, OP and DP, each d."""
    records, rows = data.records, data.rows
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    full = [g for g in _by_config(records) if g[0]["config"]["model"] == "full"]
    ds = sorted({g[0]["config"]["d"] for g in full})
    for i, d in enumerate(ds):
        for problem, ls in (("op", "-"), ("dp", "--")):
            gs = sorted(
                (g for g in full if g[0]["config"]["d"] == d and g[0]["config"]["problem"] == problem),
                key=lambda g: g[0]["alpha"],
            )
            if not gs:
                continue
            a = [g[0]["alpha"] for g in gs]
            ax[0].plot(
                a,
                [np.mean([r["all_stored"] for r in g]) for g in gs],
                ls,
                marker="o",
                color=f"C{i}",
                label=f"d={d} {problem.upper()}",
            )
            ax[1].plot(
                a,
                [np.mean([r["accuracy"] for r in g]) for g in gs],
                ls,
                marker="o",
                color=f"C{i}",
                label=f"d={d} {problem.upper()}",
            )
        th_rows = [r for r in rows if r["d"] == d and r["model"] == "full" and r.get("theory_alpha_c")]
        if th_rows:
            ax[0].axvline(th_rows[0]["theory_alpha_c"], color=f"C{i}", lw=0.8, ls=":")
        alphas = [g[0]["alpha"] for g in full if g[0]["config"]["d"] == d]
        if alphas:
            # the kinematic prediction (2.8): its curve, and the band between P = 0.75 and 0.25
            ps = np.linspace(p_from_alpha(d, min(alphas)), p_from_alpha(d, max(alphas)), 25)
            pr = [float(th.transition(d, float(p)).probability) for p in ps]
            ax[0].plot(alpha_of(d, ps), pr, color=f"C{i}", lw=2.5, alpha=0.35)
            band = th.transition_loads(d)
            ax[0].axvspan(float(band.alpha_p75), float(band.alpha_p25), color=f"C{i}", alpha=0.12)
    ax[0].axvline(0.5, color="k", lw=1, ls="-.", label="asymptote 1/2")
    ax[0].set_ylabel("P(all p stored)")
    ax[1].set_ylabel("mean retrieval accuracy")
    for a_ in ax:
        a_.set_xlabel(r"load $\alpha = p\ln p/d^2$")
        a_.legend(fontsize=7)
    ax[0].set_title(r"All stored (thick: kinematic theory, shaded P 0.75..0.25; dotted: $\alpha_c(p)$)")
    ax[1].set_title("Accuracy")
    return save_figure(fig, out, "fig1_transition"), []


def fig_capacity_vs_d(data: ReportData, out):
    """(ii) alpha_hat_c(d) with CIs against d, theory at p_c, 1/2; Hebbian beside 1/8."""
    rows = data.rows
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for k, (problem, model) in enumerate(
        (("op", "full"), ("dp", "full"), ("op", "hebbian"), ("dp", "hebbian"))
    ):
        sel = sorted(
            (
                r
                for r in rows
                if r["problem"] == problem and r["model"] == model and np.isfinite(r["alpha_c"])
            ),
            key=lambda r: r["d"],
        )
        if not sel:
            continue
        d = np.array([r["d"] for r in sel]) * (1 + 0.02 * (k % 2))
        y = np.array([r["alpha_c"] for r in sel])
        err = np.array(
            [
                [y_ - (r["ci_low"] if r["ci_low"] is not None else y_) for y_, r in zip(y, sel)],
                [(r["ci_high"] if r["ci_high"] is not None else y_) - y_ for y_, r in zip(y, sel)],
            ]
        )
        ax.errorbar(
            d,
            y,
            yerr=np.maximum(err, 0),
            fmt="o",
            color=f"C{k}",
            capsize=3,
            label=f"{model} {problem.upper()} (simulation)",
        )
        t = [r.get("theory_alpha_c") for r in sel]
        if all(v is not None for v in t):
            ax.plot(d, t, "x--", color=f"C{k}", label=f"{model} {problem.upper()} theory at measured $p_c$")
    ax.axhline(0.5, color="k", ls="-.", label="1/2")
    ax.axhline(1 / 8, color="C3", ls=":", label="1/8 (Hebbian)")
    ax.set_xlabel("dimension d")
    ax.set_ylabel(r"$\hat\alpha_c(d) = p_c \ln p_c / d^2$")
    ax.set_title("Capacity against dimension")
    ax.legend(fontsize=7)
    return save_figure(fig, out, "fig2_capacity_vs_d"), []


def at_capacity(records, model, problem, d, kappa=1.0):
    """Records of the memory at capacity: the largest p at which every seed stored all (else the
    config with the highest stored fraction)."""
    groups = [
        g
        for g in _by_config(records)
        if (g[0]["config"]["model"], g[0]["config"]["problem"], g[0]["config"]["d"]) == (model, problem, d)
        and abs(g[0]["config"]["kappa"] - kappa) < 1e-6
    ]
    if not groups:
        return None
    return max(groups, key=lambda g: (np.mean([r["all_stored"] for r in g]), g[0]["config"]["p"]))


def _floats(values) -> np.ndarray:
    """Record numbers as floats (a diverged run stores None for a non-finite one)."""
    return np.asarray([np.nan if v is None else v for v in values], float)


def _normalised_sv(sv, d, kappa, F):
    """Top `m = kappa d` singular values scaled so that `|W|_F^2 = d^2 F`, divided by sqrt(d)."""
    sv = _floats(sv)
    if not np.all(np.isfinite(sv)):  # a diverged run: nothing to draw
        return np.zeros(0)
    m = rank_of(d, kappa=kappa)
    sv = np.sort(sv)[::-1][:m]
    return sv * math.sqrt(d * d * F / np.sum(sv**2)) / math.sqrt(d)


def fig_spectra(data: ReportData, out):
    """(iii) singular values of learnt W (at capacity) against the quarter circle, the finite
    p/d law and the initialisation's law."""
    records, key = data.records, data.key
    full = [r for r in records if r["config"]["model"] == "full"]
    fac = [r for r in records if r["config"]["model"] == "factored"]
    d = max((r["config"]["d"] for r in full), default=None)
    panels = [("op", "full"), ("dp", "full")] + ([("op", "factored")] if fac else [])
    fig, ax = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 4))
    s = np.linspace(0, 2, 200)
    notes = []
    for a, (problem, model) in zip(np.atleast_1d(ax), panels):
        dd = d if model == "full" else max(r["config"]["d"] for r in fac)
        kappa = 1.0 if model == "full" else fac[0]["config"]["kappa"]
        g = at_capacity(records, model, problem, dd, kappa)
        if g is None:
            a.set_title(f"{model} {problem.upper()}: no records")
            continue
        p = g[0]["config"]["p"]
        Fk = float(th.F(kappa))
        sv = np.concatenate([_normalised_sv(r.get("singular_values") or [], dd, kappa, Fk) for r in g])
        if sv.size == 0:
            a.set_title(f"{model} {problem.upper()}: no finite singular values")
            continue
        a.hist(sv, bins=25, density=True, alpha=0.5, label=f"learnt (d={dd}, p={p})")
        if model == "full":
            a.plot(s, np.asarray(th.qc_density(s)), "k-", label="quarter circle (p/d→∞)")
            fin = np.asarray(th.product_spectrum(key, dd, p, samples=64))
            a.hist(
                fin,
                bins=25,
                density=True,
                histtype="step",
                color="C2",
                lw=1.5,
                label=f"finite p/d={p / dd:.1f}",
            )
        else:
            a.plot(
                s,
                np.asarray(th.truncated_density(s, kappa)),
                "k-",
                label=rf"truncated QC, $\kappa$={kappa:.2f}",
            )
        sv0 = np.asarray(th.init_spectrum(key, dd, kappa=kappa))
        law = np.asarray(th.qc_sample(key, 20000, kappa))
        notes.append(
            f"{model} {problem.upper()} (d={dd}, p={p}): mean/std of the normalised singular values: "
            f"learnt {sv.mean():.3f}/{sv.std():.3f}, "
            f"{'quarter circle' if model == 'full' else 'truncated law'} {law.mean():.3f}/{law.std():.3f}, "
            f"initialisation {sv0.mean():.3f}/{sv0.std():.3f}"
            + (f", finite p/d law {fin.mean():.3f}/{fin.std():.3f}" if model == "full" else "")
            + ". Closest in spread: "
            + min(
                [("the theory law", law.std()), ("the initialisation", sv0.std())]
                + ([("the finite p/d law", fin.std())] if model == "full" else []),
                key=lambda c: abs(c[1] - sv.std()),
            )[0]
            + (f"; the learnt spread differs from the theory law's by {abs(sv.std() - law.std()):.3f}.")
        )
        a.hist(
            sv0, bins=25, density=True, histtype="step", color="C3", ls="--", lw=1.2, label="initialisation"
        )
        a.set_xlabel(r"singular value / $\sqrt{d}$ ($|W|_F^2 = d^2 F(\kappa)$)")
        a.set_ylabel("density")
        a.set_title(f"{model} {problem.upper()}")
        a.legend(fontsize=7)
    return save_figure(fig, out, "fig3_spectra"), notes


def _scores(recs, key):
    """The finite scores of `key` over `recs` (a diverged run stores None for non-finite ones)."""
    x = np.concatenate([_floats(r.get(key) or []) for r in recs])
    return x[np.isfinite(x)]


def fig_scores(data: ReportData, out):
    """(iv) normalised target and best-competitor scores: optimal (trained at capacity) against
    the Hebbian rule at the same (d, p) (when the study ran it), with the theory laws and
    sqrt(2 ln p)."""
    optimal, hebbian = data.optimal, data.hebbian
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    if not optimal:
        return save_figure(fig, out, "fig4_scores"), []
    d, p = optimal[0]["config"]["d"], optimal[0]["config"]["p"]
    thr = math.sqrt(2 * math.log(p))
    panels = [
        (ax[0], optimal, th.optimal_scores(p, samples=50_000), "optimal (trained)"),
        (ax[1], hebbian, th.hebbian_scores(d, p, "op", samples=50_000), "Hebbian"),
    ]
    for a, recs, law, name in panels:
        tgt, best = (_scores(recs, "target_score"), _scores(recs, "best_score")) if recs else ([], [])
        if len(tgt) == 0 or len(best) == 0:
            a.set_title(f"{name}, d={d}, p={p}: no finite scores in the records")
            continue
        bins = np.linspace(min(tgt.min(), best.min(), -1), max(tgt.max(), best.max(), thr + 1), 50)
        a.hist(tgt, bins=bins, density=True, alpha=0.5, label="target (simulation)")
        a.hist(best, bins=bins, density=True, alpha=0.5, label="best competitor (simulation)")
        for vals, color, what in ((law.target, "C0", "target"), (law.best, "C1", "best competitor")):
            a.hist(
                np.asarray(vals),
                bins=bins,
                density=True,
                histtype="step",
                color=color,
                lw=1.5,
                label=f"{what} (theory)",
            )
        a.axvline(thr, color="k", ls="--", label=r"$\sqrt{2\ln p}$")
        a.set_xlabel(r"score / $|W e_\mu|$")
        a.set_ylabel("density")
        a.set_title(f"{name}, d={d}, p={p}")
        a.legend(fontsize=7)
    return save_figure(fig, out, "fig4_scores"), []


def fig_kappa(data: ReportData, out):
    """(v) alpha_c(kappa): simulated factored (and full-rank) points against theory."""
    rows = data.rows
    fig, ax = plt.subplots(figsize=(6, 4.2))
    k = np.linspace(0.05, 1, 40)
    ax.plot(k, np.asarray(jax.vmap(th.alpha_c_asymptotic)(k)), "k-", label=r"$F(\kappa)/2$ ($p\to\infty$)")
    sel = [
        r
        for r in rows
        if r["model"] in ("full", "factored") and r["problem"] == "op" and np.isfinite(r["alpha_c"])
    ]
    for i, d in enumerate(sorted({r["d"] for r in sel if r["model"] == "factored"})):
        pts = sorted((r for r in sel if r["d"] == d), key=lambda r: r["kappa"])
        p_ref = pts[-1]["p_c"]
        ax.plot(
            k,
            [float(th.alpha_c(float(p_ref), kappa=float(x), se_target=0.005)) for x in k],
            "--",
            color=f"C{i}",
            label=f"theory at p={p_ref:.0f}",
        )
        y = np.array([r["alpha_c"] for r in pts])
        err = np.array(
            [[r["alpha_c"] - r["ci_low"] for r in pts], [r["ci_high"] - r["alpha_c"] for r in pts]]
        )
        ax.errorbar(
            [r["kappa"] for r in pts],
            y,
            yerr=np.maximum(err, 0),
            fmt="o",
            color=f"C{i}",
            capsize=3,
            label=f"simulation d={d}",
        )
    ax.set_xlabel(r"$\kappa = m/d$")
    ax.set_ylabel(r"$\alpha_c$")
    ax.set_title(r"Rank-constrained memory $W = QR^T$")
    ax.legend(fontsize=7)
    return save_figure(fig, out, "fig5_kappa"), []


def fig_saddle(data: ReportData, out):
    """(vi) the RS overlap q*(alpha) at p with its Monte Carlo error bars, and alpha_c(p): the
    order-statistics value, and the capacity of the saddle point's own samples (where q* -> 1)."""
    key, p = data.key, data.p_saddle
    a_c = float(th.alpha_c(float(p)))
    alphas = np.linspace(0.05, 0.99, 24) * a_c
    path = th.saddle_path(alphas, float(p), key=key)
    ok = np.asarray(path.status._value) == 0
    fig, ax = plt.subplots(figsize=(6, 4.2))
    q, q_se = np.asarray(path.q), np.asarray(path.q_se)
    ax.errorbar(alphas[ok], q[ok], yerr=2 * q_se[ok], fmt="o-", ms=3, label=f"$q^*$ at p={p} (bars: 2 se)")
    a_same = float(np.nanmax(np.asarray(path.alpha_samples)))
    ax.axvline(a_same, color="C1", ls=":", label=r"$\ln p / \overline{\mathrm{dist}^2}$ on its samples")
    ax.axvline(a_c, color="k", ls="--", label=r"$\alpha_c(p)$ (order statistics, se 0.0015)")
    ax.set_xlabel(r"load $\alpha = p \ln p/d^2$")
    ax.set_ylabel(r"overlap $q^*$")
    ax.set_title("Replica-symmetric saddle point")
    ax.legend(fontsize=8)
    return save_figure(fig, out, "fig6_saddle"), []


class Figure(eqx.Module):
    """One figure of the report: its key, a caption (text, or a function of the data) and the
    function that draws it from a `ReportData` into a folder, returning its file name and any
    notes for the report."""

    key: str
    caption: str | Callable[[ReportData], str]
    draw: Callable[[ReportData, str], tuple[str, list[str]]]


# The figure registry: a new figure is a function above and one entry here.
FIGURES = (
    Figure(
        "i",
        "P(all stored) and accuracy against the load, OP (solid) and DP (dashed); dotted lines: "
        "theory alpha_c(p) at each d.",
        fig_transition,
    ),
    Figure(
        "ii",
        "Measured alpha_hat_c(d) with 95% CIs, theory at the measured p_c (crosses), the asymptote "
        "1/2 and the Hebbian 1/8.",
        fig_capacity_vs_d,
    ),
    Figure(
        "iii",
        "Singular values of memories trained at capacity (largest p with every seed stored), "
        "normalised to |W|_F^2 = d^2 F(kappa), against the quarter circle, the finite-p/d law of "
        "U E^T, the truncated law for the factored memory, and the initialisation's law.",
        fig_spectra,
    ),
    Figure(
        "iv",
        "Normalised target and best-competitor scores, trained (at capacity) against Hebbian at the "
        "same (d, p), with theory laws (water level of the cone projection; Hebbian finite-size law) "
        "and sqrt(2 ln p).",
        fig_scores,
    ),
    Figure(
        "v",
        "alpha_c against the rank fraction kappa: simulation against theory at the measured p_c and "
        "the asymptote F(kappa)/2.",
        fig_kappa,
    ),
    Figure(
        "vi",
        lambda data: (
            f"Replica-symmetric overlap q*(alpha) at p = {data.p_saddle}, approaching 1 at the "
            "Gardner capacity."
        ),
        fig_saddle,
    ),
)
