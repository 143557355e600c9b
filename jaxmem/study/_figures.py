"""The report's figures (PNG and PDF). Figures only draw: every number comes from the tables
of a `ReportData` (`_panels`), computed beforehand from the records and the theory."""

from __future__ import annotations

import io
import math
import os
from collections.abc import Callable

import equinox as eqx
import matplotlib.figure
import matplotlib.ticker
import numpy as np

from .._files import atomic_write
from ._panels import ReportData


def _subplots(*shape, figsize, **kw):
    """A figure and its axes, drawn on a `matplotlib.figure.Figure` of its own: no pyplot, so
    the caller's backend and pyplot state are never touched."""
    fig = matplotlib.figure.Figure(figsize=figsize)
    return fig, fig.subplots(*shape, **kw)


def save_figure(fig, out, name):
    """Write `fig` as PNG and PDF, each atomically; returns the PNG's file name."""
    fig.tight_layout()
    for ext in ("png", "pdf"):
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, dpi=110)
        atomic_write(os.path.join(out, f"{name}.{ext}"), buf.getvalue())
    return f"{name}.png"


def _legend(ax) -> None:
    """The legend of a panel that has labelled artists (none is drawn otherwise)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def _log_scale(ax, have: bool, *axes: str) -> None:
    """Log scales on `axes` of a panel that has data; a panel without says so instead (a log
    axis of nothing cannot be drawn)."""
    if have:
        for a in axes:
            getattr(ax, f"set_{a}scale")("log")
    else:
        ax.text(0.5, 0.5, "no records for this panel", ha="center", va="center", transform=ax.transAxes)


def _asymptote_note(ax, value: str, where: str = "below", y: float = 0.03) -> None:
    """Say where the asymptote is instead of drawing it far from the data (which would squeeze
    the data into a strip of the panel)."""
    text = f"asymptote {value} as d -> infinity ({where} this axis)"
    ax.text(0.02, y, text, transform=ax.transAxes, fontsize=8)


def _d_ticks(ax, ds) -> None:
    """A log axis in `d` with its ticks at the measured `d` only (no colliding minor labels)."""
    ax.set_xscale("log")
    ds = sorted(set(ds))
    if ds:
        ax.set_xticks(ds, [str(d) for d in ds])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())


def _uncertified(ax, rows, x, color, label) -> None:
    """Above each certified rank-`m` lower bound, the interval in which its seeds' rank-`m`
    thresholds are uncertified: up to the full-rank threshold of the same tasks (the median
    width over seeds, `gap_alpha`)."""
    pts = [(xi, r["alpha_c"], r.get("gap_alpha")) for xi, r in zip(x, rows) if r.get("gap_alpha")]
    if pts:
        xs, ys, gs = map(np.asarray, zip(*pts))
        ax.vlines(xs, ys, ys + gs, color=color, lw=7, alpha=0.22, label=label)


def fig_transition(data: ReportData, out):
    """P(all stored at p) = P(p* >= p) over seeds against the load, for each d, OP and DP, with
    the transition theory's curve and its band between P = 0.75 and 0.25."""
    drawn = [panel for panel in data.transition if panel["curves"]]
    fig, axes = _subplots(1, len(drawn), figsize=(5.5 * len(drawn), 4.2), sharey=True, squeeze=False)
    axes = axes[0]
    for ax, panel in zip(axes, drawn):
        for c in panel["curves"]:
            color = f"C{c['color']}"
            ax.step(
                c["alpha"], c["survival"], where="post", color=color, label=f"d={c['d']} ({c['seeds']} seeds)"
            )
            if c["band"] is not None:
                ax.plot(c["band"], [0.75, 0.5, 0.25], "o-", color=color, lw=3, alpha=0.35, ms=5)
                ax.axvspan(c["band"][0], c["band"][2], color=color, alpha=0.1)
        _asymptote_note(ax, "alpha = 1/2", "left of", y=0.5)
        ax.set_xlabel(r"load $\alpha = p\ln p/d^2$")
        ax.set_title(
            f"{panel['problem'].upper()}: steps measured (certified), thick theory, band P 0.75..0.25",
            fontsize=9,
        )
        _legend(ax)
    axes[0].set_ylabel("P(all p stored)")
    return save_figure(fig, out, "fig1_transition"), []


def _errorbar(ax, rows, x, color, label, marker="o", dx=1.0):
    if not rows:
        return
    y = np.array([r["alpha_c"] for r in rows])
    lo = np.array([r["ci_low"] if r["ci_low"] is not None else np.nan for r in rows])
    hi = np.array([r["ci_high"] if r["ci_high"] is not None else np.nan for r in rows])
    err = np.nan_to_num(np.array([y - lo, hi - y]), nan=0.0)
    ax.errorbar(
        np.asarray(x) * dx, y, yerr=np.maximum(err, 0), fmt=marker, color=color, capsize=3, label=label
    )


def fig_finite_size(data: ReportData, out):
    """alpha_hat_c(d) with CIs: certified OP and DP and Adam, against Gardner's alpha_c(p) at the
    theory's own p(d) and the transition's alpha_50(d), the asymptote 1/2; Hebbian beside its
    finite-size law and 1/8. No fitted curve."""
    t = data.finite_size
    capacity = any(t[k] for k in ("certified_op", "certified_dp", "adam"))
    n = int(capacity) + int(bool(t["hebbian"]))
    fig, axes = _subplots(1, n, figsize=(5.5 * n, 4.2), squeeze=False)
    ax, bx = (axes[0][0], axes[0][-1])
    if capacity:
        _capacity_panel(ax, t)
    if t["hebbian"]:
        _hebbian_panel(bx, t)
    return save_figure(fig, out, "fig2_finite_size"), []


def _capacity_panel(ax, t) -> None:
    for key, color, label, marker, dx in (
        ("certified_op", "C0", "certified OP", "o", 0.99),
        ("certified_dp", "C1", "certified DP", "o", 1.01),
        ("adam", "C2", "Adam OP", "s", 1.03),
    ):
        _errorbar(ax, t[key], [r["d"] for r in t[key]], color, label, marker=marker, dx=dx)
    if t["gardner"]:
        ax.plot(
            [d for d, _ in t["gardner"]],
            [a for _, a in t["gardner"]],
            "k--",
            lw=1,
            label=r"Gardner $\alpha_c(p)$ at $p(d)$",
        )
        ax.plot(
            [d for d, _ in t["alpha_50"]],
            [a for _, a in t["alpha_50"]],
            "x:",
            color="C3",
            label=r"transition $\alpha_{50}(d)$",
        )
    _asymptote_note(ax, "1/2")
    _d_ticks(ax, [r["d"] for k in ("certified_op", "certified_dp", "adam") for r in t[k]])
    ax.set_xlabel("d")
    ax.set_ylabel(r"$\hat\alpha_c = p_c\ln p_c/d^2$")
    ax.set_title("Capacity against d (95% CIs)", fontsize=10)
    _legend(ax)


def _hebbian_panel(bx, t) -> None:
    heb = t["hebbian"]
    _errorbar(bx, heb, [r["d"] for r in heb], "C4", "Hebbian all-stored (simulation)")
    if heb:
        bx.plot(
            [r["d"] for r in heb], t["hebbian_theory"], "x--", color="C4", label="finite-size Hebbian law"
        )
    bx.axhline(1 / 8, color="k", ls="-.", lw=1, label="asymptote 1/8")
    _d_ticks(bx, [r["d"] for r in heb])
    bx.set_xlabel("d")
    bx.set_ylabel(r"$\hat\alpha$ (all stored)")
    bx.set_title("Hebbian rule", fontsize=10)
    _legend(bx)


def fig_spectra(data: ReportData, out):
    """Singular values of the max-margin memories (normalised to |W|_F^2 = d^2 F(kappa), over
    sqrt d): full-rank OP and DP against the quarter circle, the finite-p/d law and the
    initialisation's law; the factored memory against the truncated law."""
    n = len(data.spectra)
    fig, axes = _subplots(1, n, figsize=(4.6 * n, 4), squeeze=False)
    for ax, g in zip(axes[0], data.spectra):
        ax.hist(
            g["singular_values"], bins=20, density=True, alpha=0.5, label=f"max margin ({g['seeds']} seeds)"
        )
        label = (
            r"quarter circle ($p/d\to\infty$)"
            if g["model"] == "full"
            else rf"truncated QC, $\kappa$={g['kappa']:.2f}"
        )
        ax.plot(g["grid"], g["density"], "k-", label=label)
        for key, color, ls, lw, label in (
            ("finite", "C2", "-", 1.5, f"finite p/d = {g['p'] / g['d']:.1f}"),
            ("initialisation", "C3", "--", 1.2, "initialisation"),
        ):
            ax.hist(g[key], bins=25, density=True, histtype="step", color=color, ls=ls, lw=lw, label=label)
        ax.set_xlabel(r"singular value / $\sqrt{d}$")
        ax.set_ylabel("density")
        ax.set_title(f"{g['model']} {g['problem'].upper()}, d={g['d']}, p* ~ {g['p']}", fontsize=10)
        _legend(ax)
    return save_figure(fig, out, "fig3_spectra"), [g["note"] for g in data.spectra]


def fig_scores(data: ReportData, out):
    """Normalised target and best-competitor scores of the max-margin memory (full-rank OP)
    against the water-level law, and of the Hebbian memory at the same (d, p) against its law,
    with sqrt(2 ln p)."""
    n = len(data.scores)
    fig, axes = _subplots(1, n, figsize=(5.5 * n, 4), squeeze=False)
    for ax, g in zip(axes[0], data.scores):
        bins = g["bins"]
        ax.hist(g["target"], bins=bins, density=True, alpha=0.5, label="target (simulation)")
        ax.hist(g["best"], bins=bins, density=True, alpha=0.5, label="best competitor (simulation)")
        for key, color, label in (("law_target", "C0", "target"), ("law_best", "C1", "best competitor")):
            ax.hist(
                g[key],
                bins=bins,
                density=True,
                histtype="step",
                color=color,
                lw=1.5,
                label=f"{label} (theory)",
            )
        ax.axvline(g["threshold"], color="k", ls="--", label=r"$\sqrt{2\ln p}$")
        ax.set_xlabel(r"score / $|W e_\mu|$")
        ax.set_ylabel("density")
        ax.set_title(f"{g['title']}, d={g['d']}, p ~ {g['p']}", fontsize=10)
        _legend(ax)
    return save_figure(fig, out, "fig4_scores"), [g["note"] for g in data.scores]


def fig_rank(data: ReportData, out):
    """Certified (lower bound) and Adam capacities against kappa at one d, against
    alpha_c(p, kappa) at the measured p_c and the asymptote F(kappa)/2."""
    t = data.rank
    fig, ax = _subplots(figsize=(6.2, 4.3))
    ax.plot(t["grid"], t["limit"], "k-", label=r"$F(\kappa)/2$ ($p\to\infty$)")
    for j, (solver, pts) in enumerate(t["points"]):
        x = [r["kappa"] * (1 + 0.025 * j) for r in pts]
        certified = solver == "certified"
        if certified:
            _uncertified(ax, pts, x, f"C{j}", "uncertified: up to the full-rank threshold (median)")
        _errorbar(
            ax,
            pts,
            x,
            f"C{j}",
            f"{solver}, d={t['d']}" + (" (lower bound)" if certified else ""),
            marker="^s"[j] if certified else "s",
        )
    if t["theory"] is not None:
        ax.plot(
            t["grid"],
            t["theory"]["alpha"],
            "--",
            color="C0",
            label=rf"$\alpha_c(p, \kappa)$ at p={t['theory']['p_c']:.0f}",
        )
    ax.set_xlabel(r"$\kappa = m/d$")
    ax.set_ylabel(r"$\hat\alpha_c$")
    ax.set_title(r"Rank-constrained memory $W = QR^T$ (certified: lower bound)", fontsize=10)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="lower right")
    return save_figure(fig, out, "fig5_rank"), []


def fig_adam(data: ReportData, out):
    """The capacity the step budget loses: certified minus Adam, seed by seed, per d."""
    fig, ax = _subplots(figsize=(6.2, 4.3))
    for c in data.adam:
        d, lost = c["d"], c["lost"]
        jitter = 1 + 0.02 * np.random.default_rng(d).standard_normal(lost.size)
        ax.scatter(np.full(lost.size, d) * jitter, lost, s=10, alpha=0.5, color="C0")
        ax.plot(d, c["median"], "D", color="C3", ms=7)
    ax.plot([], [], "o", color="C0", alpha=0.5, label="per seed (jittered)")
    ax.plot([], [], "D", color="C3", label="difference of medians")
    ax.axhline(0, color="k", lw=0.8)
    _log_scale(ax, bool(data.adam), "x")
    _d_ticks(ax, [c["d"] for c in data.adam])
    ax.set_xlabel("d")
    ax.set_ylabel(r"certified $\alpha$ − Adam $\alpha$")
    ax.set_title("Capacity lost to Adam's step budget (OP, same tasks)", fontsize=10)
    _legend(ax)
    return save_figure(fig, out, "fig6_adam"), []


def fig_peer(data: ReportData, out):
    """Nichani, Lee and Bietti's protocol: N against d^2 (log-log), their criterion beside the
    certified all-stored capacity, with their guide line d^2 = 1.3 N ln N."""
    pr = data.peer
    fig, ax = _subplots(figsize=(6.2, 4.3))
    for j, (key, label) in enumerate(
        (
            ("theirs", "Adam, accuracy 0.99 (theirs)"),
            ("ours", "certified, all stored (unit)"),
            ("gaussian", "certified, Gaussian"),
        )
    ):
        pts = [(x["d"], x[key]) for x in pr if x[key] is not None]
        if not pts:
            continue
        d2 = np.array([d * d for d, _ in pts]) * (1 + 0.02 * (j - 1))
        y = np.array([r["p_c"] for _, r in pts])
        err = np.array(
            [[r["p_c"] - r["p_ci_low"] for _, r in pts], [r["p_ci_high"] - r["p_c"] for _, r in pts]]
        )
        ax.errorbar(
            d2, y, yerr=np.maximum(np.nan_to_num(err), 0), fmt="os^"[j], color=f"C{j}", capsize=3, label=label
        )
    if pr:
        ax.plot(
            [x["d"] ** 2 for x in pr],
            [x["guide_N"] for x in pr],
            "k.--",
            lw=1,
            label=r"guide $d^2 = 1.3\,N\ln N$",
        )
    _log_scale(ax, bool(pr), "x", "y")
    if pr:
        _n_against_d2(ax, [x["d"] for x in pr])
    ax.set_title("A peer's protocol: unit-norm embeddings", fontsize=10)
    _legend(ax)
    return save_figure(fig, out, "fig7_peer"), []


def _n_against_d2(ax, ds) -> None:
    """Axes of `N` against `d^2` (log-log) with plain ticks: `d^2` at the measured `d`, `N` at
    round values."""
    ax.set_xticks([d * d for d in ds], [f"{d * d} (d={d})" for d in ds])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 3.0, 5.0)))
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel(r"$d^2$")
    ax.set_ylabel("capacity N (median over seeds, 95% CI)")


def fig_sweep(rows: list, out) -> str:
    """A fixed-`p` sweep: the fraction of seeds that stored all, against the load, per
    `(d, problem, model, kappa)`, each with its logistic estimate of `alpha_c` (its bootstrap 95%
    CI shaded). `rows`: `estimate`'s rows."""
    fig, ax = _subplots(figsize=(6.2, 4.3))
    for j, r in enumerate(rows):
        g = r["grid"]
        label = f"d={r['d']} {r['problem'].upper()} {r['model']}" + (
            f" kappa={r['kappa']:.2f}" if r["model"] == "factored" else ""
        )
        ax.plot(
            [x["alpha"] for x in g], [x["fraction_all_stored"] for x in g], "o-", color=f"C{j}", label=label
        )
        if r["alpha_c"] is not None and math.isfinite(r["alpha_c"]):
            ax.axvline(r["alpha_c"], color=f"C{j}", ls="--", lw=1)
        if r.get("ci_low") is not None and r.get("ci_high") is not None:
            ax.axvspan(r["ci_low"], r["ci_high"], color=f"C{j}", alpha=0.12)
    ax.set_xlabel(r"load $\alpha = p\ln p/d^2$")
    ax.set_ylabel("fraction of seeds with all stored")
    ax.set_title("Fixed-p sweep: P(all stored) and the logistic alpha_c (dashed, 95% CI shaded)", fontsize=9)
    _legend(ax)
    return save_figure(fig, out, "fig_sweep")


def _against_d(ax, ds, ylabel, title) -> None:
    """A panel against `d`: a log axis with ticks at the measured `d`, labels, title, legend."""
    _log_scale(ax, bool(ds), "x")
    if ds:
        ax.set_xticks(ds, [str(d) for d in ds])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("d")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    _legend(ax)


def fig_scaling(table: list, out) -> str:
    """The scaling study (`scaling_table`'s rows): left, the certified capacities of the OP and
    the DP against `d` with 95% CIs, Gardner's `alpha_c(p_c)` at each measured `p_c`, the
    transition theory's band (P(all stored) from 0.75 to 0.25) and the asymptote 1/2; right,
    OP - DP, OP - theory and DP - theory with their CIs. Nothing is fitted."""
    fig, (ax, bx) = _subplots(1, 2, figsize=(11, 4.2))
    for key, color, dx in (("op", "C0", 0.98), ("dp", "C1", 1.02)):
        rows = [t[key] for t in table if t[key] is not None]
        _errorbar(ax, rows, [r["d"] for r in rows], color, f"certified {key.upper()}", dx=dx)
        th_ = [(r["d"] * dx, r["theory_alpha_c"]) for r in rows if r.get("theory_alpha_c") is not None]
        if th_:
            ax.plot(
                *zip(*th_), "x", color=color, ms=7, label=rf"$\alpha_c(p_c)$ at the {key.upper()}'s $p_c$"
            )
    ds = [t["d"] for t in table]
    if ds:
        band = np.array([t["band"] for t in table])
        ax.fill_between(
            ds, band[:, 0], band[:, 2], color="C3", alpha=0.12, label="transition band P 0.75..0.25"
        )
        ax.plot(ds, band[:, 1], ":", color="C3", lw=1, label=r"transition $\alpha_{50}(d)$")
    _asymptote_note(ax, "1/2")
    _against_d(ax, ds, r"$\hat\alpha_c = p_c\ln p_c/d^2$", "Certified capacity against d (95% CIs)")
    for j, (gap, label) in enumerate(
        (("op-dp", "OP − DP"), ("op-theory", "OP − theory"), ("dp-theory", "DP − theory"))
    ):
        pts = [(t["d"], t["gaps"][gap]) for t in table if gap in t["gaps"]]
        if not pts:
            continue
        x = np.array([d for d, _ in pts]) * (0.97, 1.0, 1.03)[j]
        y = np.array([g["diff"] for _, g in pts])
        err = np.array(
            [[g["diff"] - g["ci_low"] for _, g in pts], [g["ci_high"] - g["diff"] for _, g in pts]]
        )
        bx.errorbar(x, y, yerr=np.maximum(err, 0), fmt="os^"[j], color=f"C{j + 4}", capsize=3, label=label)
    bx.axhline(0.0, color="k", lw=1)
    _against_d(bx, ds, r"difference in $\hat\alpha_c$", "Differences with 95% bootstrap CIs")
    return save_figure(fig, out, "scaling")


def fig_tail(table: list, out) -> str:
    """The tail-average study (`tail_table`'s rows): left, the certified tail-average capacity
    `p_c / d^2` against `d` with 95% CIs, one colour per `r` (OP circles, DP squares), and each
    `r`'s proportional limit `alpha_G,c(r)` as a dashed line; right, the top-1 capacity of the
    same tasks on its own load `p_c ln p_c / d^2`. Nothing is fitted."""
    fig, (ax, bx) = _subplots(1, 2, figsize=(11, 4.2))
    rs = sorted({r for t in table for r in t["tails"]})
    ds = sorted({t["d"] for t in table})
    for j, r in enumerate(rs):
        color = f"C{j}"
        for problem, marker, dx in (("op", "o", 0.98), ("dp", "s", 1.02)):
            rows = [t["tails"][r] for t in table if t["problem"] == problem and r in t["tails"]]
            _errorbar(ax, rows, [x["d"] for x in rows], color, f"r = {r:g} {problem.upper()}", marker, dx)
        limit = next((t["tails"][r].get("theory_alpha_c") for t in table if r in t["tails"]), None)
        if limit is not None:
            ax.axhline(limit, color=color, ls="--", lw=1)
    _against_d(
        ax, ds, r"$\hat\alpha_c = p_c/d^2$", r"Tail-average capacity (95% CIs); dashed: $\alpha_{G,c}(r)$"
    )
    for problem, marker, color in (("op", "o", "C0"), ("dp", "s", "C1")):
        rows = [t["top1"] for t in table if t["problem"] == problem and t["top1"] is not None]
        _errorbar(bx, rows, [x["d"] for x in rows], color, f"top-1 {problem.upper()}", marker)
    _against_d(bx, ds, r"$\hat\alpha_c = p_c\ln p_c/d^2$", "Top-1 capacity of the same tasks (95% CIs)")
    return save_figure(fig, out, "tail")


def fig_rank_study(table: dict, out) -> str:
    """The rank study (`rank_table`): the certified rank-`m` lower bounds of the OP and the DP
    against `kappa` with 95% CIs at each `d`, Adam on the same model, the full-rank capacities at
    `kappa = 1`, Gardner's `alpha_c(p_c, kappa)` at each row's own `p_c` (crosses), the theory's
    threshold at each `d` (dashed); the asymptote `F(kappa)/2`, far below, is named, not drawn.
    Nothing is fitted."""
    fig, ax = _subplots(figsize=(10.5, 5.2))
    ds = sorted({r["d"] for r in table["rows"]})
    for i, d in enumerate(ds):
        marker = "os^D"[i % 4]
        for j, problem in enumerate(("op", "dp")):
            color, dx = f"C{j}", 1 + 0.012 * (2 * j - 1) + 0.004 * i
            at = [r for r in table["rows"] if r["d"] == d and r["problem"] == problem]
            cert = [r["certified"] for r in at] + [
                f for f in table["full"] if f["d"] == d and f["problem"] == problem
            ]
            x = [c["kappa"] * dx for c in cert]
            first = i == 0 and j == 0
            _uncertified(
                ax, cert, x, color, "uncertified: up to the full-rank threshold (median)" if first else None
            )
            _errorbar(ax, cert, x, color, f"certified {problem.upper()}, d={d} (lower bound below 1)", marker)
            adam = [r["adam"] for r in at if r["adam"] is not None]
            if adam:
                ax.plot(
                    [a["kappa"] * dx * 1.01 for a in adam],
                    [a["alpha_c"] for a in adam],
                    marker,
                    mfc="none",
                    color=color,
                    label=f"Adam {problem.upper()}, d={d}",
                )
            th_ = [
                (c["kappa"] * dx, c["theory_alpha_c"]) for c in cert if c.get("theory_alpha_c") is not None
            ]
            if th_:
                ax.plot(*zip(*th_), "x", color=color, ms=6)
        style = ("--", ":", "-.")[i % 3]
        ax.plot(*zip(*table["curves"][d]), style, color="0.5", lw=1, label=f"theory's threshold at d={d}")
    ax.plot([], [], "x", color="0.3", label=r"$\alpha_c(p_c, \kappa)$ at the row's $p_c$")
    limit = np.array(table["limit"])
    if limit.size:  # far below the data: said, not drawn
        ks = [r["certified"]["kappa"] for r in table["rows"]]
        at = [
            f"{float(np.interp(k, limit[:, 0], limit[:, 1])):.2f} at kappa = {k:g}" for k in sorted(set(ks))
        ]
        ax.text(
            0.2,
            0.1,
            r"asymptote $F(\kappa)/2$ ($p \to \infty$), below this axis:" + "\n" + ", ".join(at),
            transform=ax.transAxes,
            fontsize=8,
        )
    ax.set_xlabel(r"$\kappa = m/d$")
    ax.set_ylabel(r"$\hat\alpha_c = p_c\ln p_c/d^2$")
    ax.set_title(r"$W = QR^T$ of rank $m$: certified lower bounds (95% CIs) and Adam", fontsize=10)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, out, "rank")


class Figure(eqx.Module):
    """One figure of the report: its key, its caption, the function that draws it from a
    `ReportData` into a folder (returning its file name and notes for the report), and `has`,
    whether the data holds anything for it (a figure without data is not drawn)."""

    key: str
    caption: str
    draw: Callable[[ReportData, str], tuple[str, list[str]]]
    has: Callable[[ReportData], bool]


# The figure registry: a new figure is a function above and one entry here.
FIGURES = (
    Figure(
        "transition",
        "P(all stored) against the load at each d (steps: the fraction of seeds with certified "
        "threshold p* >= p), with the transition theory's loads at P = 0.75, 0.5 and 0.25 (thick, "
        "joined) and its band between them (shaded); OP left, DP right.",
        fig_transition,
        lambda t: any(panel["curves"] for panel in t.transition),
    ),
    Figure(
        "finite_size",
        "Measured capacities with 95% CIs against d: certified OP and DP, Adam, Gardner's alpha_c(p) "
        "at the theory's own p(d), the transition's alpha_50(d) and the asymptote 1/2; right, the "
        "Hebbian all-stored load against its finite-size law and 1/8. Nothing is fitted.",
        fig_finite_size,
        lambda t: any(t.finite_size[k] for k in ("certified_op", "certified_dp", "adam", "hebbian")),
    ),
    Figure(
        "spectra",
        "Singular values of the max-margin memories at each seed's certified threshold, normalised "
        "to |W|_F^2 = d^2 F(kappa), against the quarter circle (full rank) or its truncation "
        "(factored), the finite-p/d law of U^T E and the initialisation's law.",
        fig_spectra,
        lambda t: bool(t.spectra),
    ),
    Figure(
        "scores",
        "Normalised target and best-competitor scores: the max-margin memory against the "
        "water-level law, and the Hebbian memory at the same (d, p) against its finite-size law, "
        "with sqrt(2 ln p).",
        fig_scores,
        lambda t: bool(t.scores),
    ),
    Figure(
        "rank",
        "Capacity against the rank fraction kappa: certified lower bound and Adam, against "
        "alpha_c(p, kappa) at the full-rank p_c and the asymptote F(kappa)/2.",
        fig_rank,
        lambda t: any(pts for _, pts in t.rank["points"]),
    ),
    Figure(
        "adam",
        "Certified minus Adam capacity per seed on the same tasks, and the difference of the medians.",
        fig_adam,
        lambda t: bool(t.adam),
    ),
    Figure(
        "peer",
        "Nichani, Lee and Bietti's protocol: their capacity (accuracy 0.99) beside the certified "
        "all-stored one, N against d^2, with their guide line.",
        fig_peer,
        lambda t: bool(t.peer),
    ),
)


def fig_peer_study(table: dict, out) -> str:
    """The peer study: `N` (median over seeds, 95% CI) against `d^2` on log axes, one curve per
    run, with their guide line `d^2 = 1.3 N ln N`."""
    fig, ax = _subplots(figsize=(6.4, 4.4))
    for j, run in enumerate(table["runs"]):
        pts = [(d, table["cells"][(run, d)]) for d in table["ds"] if (run, d) in table["cells"]]
        pts = [(d, r) for d, r in pts if r["p_c"] is not None and math.isfinite(r["p_c"])]
        if not pts:
            continue
        d2 = np.array([d * d for d, _ in pts]) * (1 + 0.015 * (j - len(table["runs"]) / 2))
        y = np.array([r["p_c"] for _, r in pts])
        err = np.array(
            [[r["p_c"] - r["p_ci_low"] for _, r in pts], [r["p_ci_high"] - r["p_c"] for _, r in pts]]
        )
        ax.errorbar(d2, y, yerr=np.maximum(np.nan_to_num(err), 0), fmt="o-", ms=4, capsize=3, label=run)
    ds = table["ds"]
    ax.plot(
        [d * d for d in ds], [table["guide"][d] for d in ds], "k.--", lw=1, label=r"guide $d^2 = 1.3\,N\ln N$"
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    _n_against_d2(ax, ds)
    ax.set_title("Unit-norm embeddings: accuracy 0.99 against all stored", fontsize=10)
    _legend(ax)
    return save_figure(fig, out, "peer")


def _step(ax, values, **kw):
    """A density step histogram of the concatenated `values`."""
    ax.hist(np.concatenate(values), density=True, histtype="step", **kw)


def fig_mechanism(t: dict, out) -> str:
    """The mechanism study at its largest load: the max-margin spectra (OP, DP) and the Hebbian
    one against the quarter circle; the rank-`kappa d` spectra against the truncated law; the
    targets against the water-level law and `sqrt(2 ln p)`; the active constraints per input
    against the theory's pooled count."""
    load = max(t["loads"])
    full = [r for r in t["full"] if r["load"] == load]
    panels = 4 if t["fac"] else 3
    fig, ax = _subplots(1, panels, figsize=(4.5 * panels, 4))
    grid = t["curves"]["grid"]
    right = ax[1:] if t["fac"] else [None, *ax[1:]]
    for problem, c in zip(t["problems"], ("C0", "C1")):
        rs = [r for r in full if r["config"]["problem"] == problem]
        _step(
            ax[0], [r["singular_values"] for r in rs], bins=40, color=c, label=f"max margin {problem.upper()}"
        )
        _step(right[1], [r["targets"] for r in rs], bins=50, color=c, label=f"targets {problem.upper()}")
        counts = [r["active_per_input"] for r in rs]
        _step(right[2], counts, bins=np.arange(0, 30) - 0.5, color=c, label=f"active {problem.upper()}")
    rs = [r for r in full if r["config"]["problem"] == t["problems"][0]]
    _step(ax[0], [r["hebbian_singular_values"] for r in rs], bins=40, color="C2", label="Hebbian")
    ax[0].plot(grid, t["curves"]["qc"], "k--", label="quarter circle")
    ax[0].set(title=f"spectra at {load} of p*", xlabel="s / sqrt(d)")
    if t["fac"]:
        for problem, c in zip(t["problems"], ("C0", "C1")):
            fs = [r for r in t["fac"] if r["config"]["problem"] == problem]
            if fs:
                _step(
                    ax[1],
                    [r["singular_values"] for r in fs],
                    bins=30,
                    color=c,
                    label=f"rank {fs[0]['rank']} {problem.upper()}",
                )
        ax[1].plot(grid, t["curves"]["truncated"], "k--", label="truncated quarter circle")
        ax[1].set(title=f"rank-{t['fac'][0]['rank']} max margin", xlabel="s / sqrt(d)")
    _step(
        right[1],
        [r["law_targets"] for r in rs],
        bins=50,
        color="k",
        linestyle="--",
        label="water level (theory)",
    )
    right[1].axvline(np.mean([r["threshold"] for r in rs]), color="gray", linestyle=":", label="sqrt(2 ln p)")
    right[1].set(title="target scores / |W e|", xlabel="score")
    right[2].axvline(
        np.mean([r["pooled_theory"] for r in rs]), color="k", linestyle="--", label="theory pooled (mean)"
    )
    right[2].set(title="active constraints per input (within 1%)", xlabel="count")
    for a in ax:
        _legend(a)
    return save_figure(fig, out, "mechanism")
