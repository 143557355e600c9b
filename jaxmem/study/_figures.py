"""The report's figures (PNG and PDF) with their theory overlays. Figures only draw: every
number comes from the tables of `ReportData`, computed beforehand from the records
(`_analysis`), or from `jaxmem.theory`."""

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

from .. import theory as th  # noqa: E402
from .._files import atomic_write  # noqa: E402
from .._tasks import alpha_of  # noqa: E402
from ._analysis import CERTIFIED_FULL  # noqa: E402
from ._records import select  # noqa: E402


class ReportData(eqx.Module):
    """Everything the figures draw: the threshold `records` and their capacity `rows`, the
    max-margin records (`margins`), the transition theory's loads per `(d, kappa)`, Gardner's
    `alpha_c(p(d))` as `(d, alpha)` pairs (`gardner`), Adam against certified (`adam`), the
    peer protocol's rows (`peer`) and the theory's sampling `key`."""

    records: list
    rows: list
    margins: list
    loads: dict
    gardner: list
    adam: list
    peer: list
    key: object


def save_figure(fig, out, name):
    """Write `fig` as PNG and PDF, each atomically; returns the PNG's file name."""
    import io

    fig.tight_layout()
    for ext in ("png", "pdf"):
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, dpi=110)
        atomic_write(os.path.join(out, f"{name}.{ext}"), buf.getvalue())
    plt.close(fig)
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


def fig_transition(data: ReportData, out):
    """P(all stored at p) = P(p* >= p) over seeds against the load, for each d, OP and DP, with
    the transition theory's curve and its band between P = 0.75 and 0.25."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    ds = sorted({r["d"] for r in data.rows if r["solver"] == "certified" and r["model"] == "full"})
    for ax, problem in zip(axes, ("op", "dp")):
        for i, d in enumerate(ds):
            recs = select(data.records, d=d, problem=problem, **CERTIFIED_FULL)
            if not recs:
                continue
            p_star = np.array([r["p_star"] for r in recs])
            grid = np.arange(max(2, p_star.min() - 3), p_star.max() + 4)
            surv = (p_star[None, :] >= grid[:, None]).mean(axis=1)
            ax.step(alpha_of(d, grid), surv, where="post", color=f"C{i}", label=f"d={d} ({len(recs)} seeds)")
            band = data.loads.get((d, 1.0))
            if band is not None:
                a = [float(band.alpha_p75), float(band.alpha_50), float(band.alpha_p25)]
                ax.plot(a, [0.75, 0.5, 0.25], "o-", color=f"C{i}", lw=3, alpha=0.35, ms=5)
                ax.axvspan(a[0], a[2], color=f"C{i}", alpha=0.1)
        ax.axvline(0.5, color="k", lw=1, ls="-.", label="asymptote 1/2")
        ax.set_xlabel(r"load $\alpha = p\ln p/d^2$")
        ax.set_title(
            f"{problem.upper()}: steps measured (certified), thick theory, band P 0.75..0.25", fontsize=9
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


def _rows(rows, **f):
    return sorted(
        (
            r
            for r in rows
            if all(r.get(k) == v for k, v in f.items())
            and r["alpha_c"] is not None
            and math.isfinite(r["alpha_c"])
        ),
        key=lambda r: r["d"],
    )


def fig_finite_size(data: ReportData, out):
    """alpha_hat_c(d) with CIs: certified OP and DP and Adam, against Gardner's alpha_c(p) at the
    theory's own p(d) and the transition's alpha_50(d), the asymptote 1/2; Hebbian beside its
    finite-size law and 1/8. No fitted curve."""
    rows = data.rows
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
    base = dict(model="full", embedding="gaussian")
    cert = {pr: _rows(rows, problem=pr, solver="certified", **base) for pr in ("op", "dp")}
    _errorbar(ax, cert["op"], [r["d"] for r in cert["op"]], "C0", "certified OP", dx=0.99)
    _errorbar(ax, cert["dp"], [r["d"] for r in cert["dp"]], "C1", "certified DP", dx=1.01)
    adam = [r for r in _rows(rows, problem="op", solver="adam", **base) if r.get("criterion", 1.0) == 1.0]
    _errorbar(ax, adam, [r["d"] for r in adam], "C2", "Adam OP", marker="s", dx=1.03)
    ds = sorted({r["d"] for r in cert["op"] + cert["dp"]})
    if ds:
        ax.plot(
            [d for d, _ in data.gardner],
            [a for _, a in data.gardner],
            "k--",
            lw=1,
            label=r"Gardner $\alpha_c(p)$ at $p(d)$",
        )
        a50 = [(d, data.loads[(d, 1.0)]) for d in ds if (d, 1.0) in data.loads]
        ax.plot(
            [d for d, _ in a50],
            [float(b.alpha_50) for _, b in a50],
            "x:",
            color="C3",
            label=r"transition $\alpha_{50}(d)$",
        )
    ax.axhline(0.5, color="k", ls="-.", lw=1, label="asymptote 1/2")
    ax.set_xscale("log")
    ax.set_xlabel("d")
    ax.set_ylabel(r"$\hat\alpha_c = p_c\ln p_c/d^2$")
    ax.set_title("Capacity against d (95% CIs)", fontsize=10)
    _legend(ax)
    heb = _rows(rows, solver="hebbian")
    _errorbar(bx, heb, [r["d"] for r in heb], "C4", "Hebbian all-stored (simulation)")
    if heb:
        bx.plot(
            [r["d"] for r in heb],
            [r.get("theory_alpha_c") or np.nan for r in heb],
            "x--",
            color="C4",
            label="finite-size Hebbian law",
        )
    bx.axhline(1 / 8, color="k", ls="-.", lw=1, label="asymptote 1/8")
    bx.set_xscale("log")
    bx.set_xlabel("d")
    bx.set_ylabel(r"$\hat\alpha$ (all stored)")
    bx.set_title("Hebbian rule", fontsize=10)
    _legend(bx)
    return save_figure(fig, out, "fig2_finite_size"), []


def _ks(x, y):
    """Two-sample Kolmogorov-Smirnov statistic `sup |F_x - F_y|`."""
    x, y = np.sort(x), np.sort(y)
    grid = np.concatenate([x, y])
    return float(
        np.max(
            np.abs(np.searchsorted(x, grid, "right") / x.size - np.searchsorted(y, grid, "right") / y.size)
        )
    )


def _moments(s):
    return f"mean {s.mean():.3f}, m2 {np.mean(s**2):.3f}, m4 {np.mean(s**4):.3f}"


def fig_spectra(data: ReportData, out):
    """Singular values of the max-margin memories (normalised to |W|_F^2 = d^2 F(kappa), over
    sqrt d): full-rank OP and DP against the quarter circle, the finite-p/d law and the
    initialisation's law; the factored memory against the truncated law."""
    groups = {}
    for r in data.margins:
        c = r["config"]
        groups.setdefault((c["problem"], c["model"], c["kappa"]), []).append(r)
    keys = sorted(groups, key=lambda k: (k[1] != "full", k[0]))
    fig, axes = plt.subplots(1, max(1, len(keys)), figsize=(4.6 * max(1, len(keys)), 4))
    axes = np.atleast_1d(axes)
    notes = []
    s = np.linspace(0, 2, 200)
    for ax, k in zip(axes, keys):
        recs = groups[k]
        problem, model, kappa = k
        d = recs[0]["config"]["d"]
        p = int(np.median([r["p"] for r in recs]))
        sv = np.concatenate([r["singular_values"] for r in recs])
        k_law, k_init, k_fin = jax.random.split(jax.random.fold_in(data.key, d), 3)  # independent laws
        law = np.asarray(th.qc_sample(k_law, 20_000, kappa))
        init = np.asarray(th.init_spectrum(k_init, d, samples=16, kappa=kappa))
        fin = np.asarray(th.product_spectrum(k_fin, d, p, samples=16, kappa=kappa))
        ax.hist(sv, bins=20, density=True, alpha=0.5, label=f"max margin ({len(recs)} seeds)")
        if model == "full":
            ax.plot(s, np.asarray(th.qc_density(s)), "k-", label=r"quarter circle ($p/d\to\infty$)")
        else:
            ax.plot(
                s,
                np.asarray(th.truncated_density(s, kappa)),
                "k-",
                label=rf"truncated QC, $\kappa$={kappa:.2f}",
            )
        ax.hist(
            fin, bins=25, density=True, histtype="step", color="C2", lw=1.5, label=f"finite p/d = {p / d:.1f}"
        )
        ax.hist(
            init, bins=25, density=True, histtype="step", color="C3", ls="--", lw=1.2, label="initialisation"
        )
        ax.set_xlabel(r"singular value / $\sqrt{d}$")
        ax.set_ylabel("density")
        ax.set_title(f"{model} {problem.upper()}, d={d}, p* ~ {p}", fontsize=10)
        _legend(ax)
        ratio = np.median([r["margin"] / r["margin_bound"] for r in recs])
        name = "quarter circle" if model == "full" else "truncated law"
        noise = 1.36 * math.sqrt(1 / sv.size + 1 / law.size)
        notes.append(
            f"{model} {problem.upper()} (d={d}, kappa={kappa:.2f}, {len(recs)} seeds at their certified "
            f"p*, median {p}): max margin {_moments(sv)}; {name} {_moments(law)}; finite p/d law "
            f"{_moments(fin)}; initialisation {_moments(init)}. KS distance to the {name} "
            f"{_ks(sv, law):.3f}, to the finite p/d law {_ks(sv, fin):.3f}, to the initialisation "
            f"{_ks(sv, init):.3f} (with {sv.size} values, distances below about {noise:.3f} are within "
            "sampling noise at 95% if the values were independent; singular values of one matrix are "
            f"not, so this is a yardstick, not a test). Certified optimality: the margin reached is a "
            f"median {ratio:.2f} of the multipliers' upper bound on the best margin."
        )
    return save_figure(fig, out, "fig3_spectra"), notes


def fig_scores(data: ReportData, out):
    """Normalised target and best-competitor scores of the max-margin memory (full-rank OP)
    against the water-level law, and of the Hebbian memory at the same (d, p) against its law,
    with sqrt(2 ln p)."""
    recs = select(data.margins, model="full", problem="op")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    if not recs:
        return save_figure(fig, out, "fig4_scores"), []
    d = recs[0]["config"]["d"]
    p = int(np.median([r["p"] for r in recs]))
    thr = math.sqrt(2 * math.log(p))
    notes = []
    laws = (
        ("max_margin", "max-margin memory", th.optimal_scores(p, samples=50_000)),
        ("hebbian", "Hebbian memory", th.hebbian_scores(d, p, "op", samples=50_000)),
    )
    for ax, (name, title, law) in zip(axes, laws):
        tgt = np.concatenate([r[f"{name}_target"] for r in recs])
        best = np.concatenate([r[f"{name}_best"] for r in recs])
        lt, lb = np.asarray(law.target), np.asarray(law.best)
        lo = min(np.percentile(tgt, 0.5), np.percentile(lb, 0.5), -1)
        hi = max(np.percentile(tgt, 99.5), np.percentile(lt, 99.5), thr + 1)
        bins = np.linspace(lo, hi, 50)
        ax.hist(tgt, bins=bins, density=True, alpha=0.5, label="target (simulation)")
        ax.hist(best, bins=bins, density=True, alpha=0.5, label="best competitor (simulation)")
        ax.hist(lt, bins=bins, density=True, histtype="step", color="C0", lw=1.5, label="target (theory)")
        ax.hist(
            lb, bins=bins, density=True, histtype="step", color="C1", lw=1.5, label="best competitor (theory)"
        )
        ax.axvline(thr, color="k", ls="--", label=r"$\sqrt{2\ln p}$")
        ax.set_xlabel(r"score / $|W e_\mu|$")
        ax.set_ylabel("density")
        ax.set_title(f"{title}, d={d}, p ~ {p}", fontsize=10)
        _legend(ax)
        notes.append(
            f"{title} (d={d}, {len(recs)} seeds, p* median {p}): target mean {tgt.mean():.2f} sd "
            f"{tgt.std():.2f} (theory {lt.mean():.2f} sd {lt.std():.2f}); best competitor mean "
            f"{best.mean():.2f} sd {best.std():.2f} (theory {lb.mean():.2f} sd {lb.std():.2f}); "
            f"sqrt(2 ln p) = {thr:.2f}. KS distance of the targets to the theory law {_ks(tgt, lt):.3f}, "
            f"of the best competitors {_ks(best, lb):.3f}."
        )
    return save_figure(fig, out, "fig4_scores"), notes


def fig_rank(data: ReportData, out):
    """Certified (lower bound) and Adam capacities against kappa at one d, against
    alpha_c(p, kappa) at the measured p_c and the asymptote F(kappa)/2."""
    rows = data.rows
    fac = [r for r in rows if r["model"] == "factored"]
    fig, ax = plt.subplots(figsize=(6.2, 4.3))
    k = np.linspace(0.05, 1, 12)
    ax.plot(k, [float(th.F(x)) / 2 for x in k], "k-", label=r"$F(\kappa)/2$ ($p\to\infty$)")
    if fac:
        d = fac[0]["d"]
        for j, (solver, marker) in enumerate((("certified", "o"), ("adam", "s"))):
            pts = sorted(
                (
                    r
                    for r in rows
                    if r["d"] == d
                    and r["solver"] == solver
                    and r["problem"] == "op"
                    and r["embedding"] == "gaussian"
                    and r.get("criterion", 1.0) == 1.0
                ),
                key=lambda r: r["kappa"],
            )
            pts = [r for r in pts if r["alpha_c"] is not None and math.isfinite(r["alpha_c"])]
            _errorbar(
                ax,
                pts,
                [r["kappa"] for r in pts],
                f"C{j}",
                f"{solver}, d={d}",
                marker=marker,
                dx=1 + 0.01 * j,
            )
        full = next(
            (
                r
                for r in rows
                if r["d"] == d
                and r["model"] == "full"
                and r["solver"] == "certified"
                and r["problem"] == "op"
            ),
            None,
        )
        if full is not None:
            ax.plot(
                k,
                [float(th.alpha_c(float(full["p_c"]), kappa=float(x), se_target=0.005)) for x in k],
                "--",
                color="C0",
                label=rf"$\alpha_c(p, \kappa)$ at p={full['p_c']:.0f}",
            )
    ax.set_xlabel(r"$\kappa = m/d$")
    ax.set_ylabel(r"$\hat\alpha_c$")
    ax.set_title(r"Rank-constrained memory $W = QR^T$ (certified: lower bound)", fontsize=10)
    _legend(ax)
    return save_figure(fig, out, "fig5_rank"), []


def fig_adam(data: ReportData, out):
    """The capacity the step budget loses: certified minus Adam, seed by seed, per d."""
    avc = [c for c in data.adam if c["model"] == "full"]
    fig, ax = plt.subplots(figsize=(6.2, 4.3))
    for c in avc:
        d, ps = c["d"], c["per_seed"]
        lost = alpha_of(d, np.array(ps["certified"], float)) - alpha_of(d, np.array(ps["adam"], float))
        ax.scatter(
            np.full(lost.size, d) * (1 + 0.02 * np.random.default_rng(d).standard_normal(lost.size)),
            lost,
            s=10,
            alpha=0.5,
            color="C0",
        )
        ax.plot(d, c["lost"], "D", color="C3", ms=7)
    ax.plot([], [], "o", color="C0", alpha=0.5, label="per seed (jittered)")
    ax.plot([], [], "D", color="C3", label="difference of medians")
    ax.axhline(0, color="k", lw=0.8)
    _log_scale(ax, bool(avc), "x")
    ax.set_xlabel("d")
    ax.set_ylabel(r"certified $\alpha$ − Adam $\alpha$")
    ax.set_title("Capacity lost to Adam's step budget (OP, same tasks)", fontsize=10)
    _legend(ax)
    return save_figure(fig, out, "fig6_adam"), []


def fig_peer(data: ReportData, out):
    """Nichani, Lee and Bietti's protocol: N against d^2 (log-log), their criterion beside the
    certified all-stored capacity, with their guide line d^2 = 1.3 N ln N."""
    pr = data.peer
    fig, ax = plt.subplots(figsize=(6.2, 4.3))
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
    ax.set_xlabel(r"$d^2$")
    ax.set_ylabel("capacity N (median over seeds, 95% CI)")
    ax.set_title("A peer's protocol: unit-norm embeddings", fontsize=10)
    _legend(ax)
    return save_figure(fig, out, "fig7_peer"), []


def fig_sweep(rows: list, out) -> str:
    """A fixed-`p` sweep: the fraction of seeds that stored all, against the load, per
    `(d, problem, model, kappa)`, each with its logistic estimate of `alpha_c` (its bootstrap 95%
    CI shaded). `rows`: `estimate`'s rows."""
    fig, ax = plt.subplots(figsize=(6.2, 4.3))
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


class Figure(eqx.Module):
    """One figure of the report: its key, its caption and the function that draws it from a
    `ReportData` into a folder, returning its file name and notes for the report."""

    key: str
    caption: str
    draw: Callable[[ReportData, str], tuple[str, list[str]]]


# The figure registry: a new figure is a function above and one entry here.
FIGURES = (
    Figure(
        "transition",
        "P(all stored) against the load at each d (steps: the fraction of seeds with certified "
        "threshold p* >= p), with the transition theory's loads at P = 0.75, 0.5 and 0.25 (thick, "
        "joined) and its band between them (shaded); OP left, DP right.",
        fig_transition,
    ),
    Figure(
        "finite_size",
        "Measured capacities with 95% CIs against d: certified OP and DP, Adam, Gardner's alpha_c(p) "
        "at the theory's own p(d), the transition's alpha_50(d) and the asymptote 1/2; right, the "
        "Hebbian all-stored load against its finite-size law and 1/8. Nothing is fitted.",
        fig_finite_size,
    ),
    Figure(
        "spectra",
        "Singular values of the max-margin memories at each seed's certified threshold, normalised "
        "to |W|_F^2 = d^2 F(kappa), against the quarter circle (full rank) or its truncation "
        "(factored), the finite-p/d law of U^T E and the initialisation's law.",
        fig_spectra,
    ),
    Figure(
        "scores",
        "Normalised target and best-competitor scores: the max-margin memory against the "
        "water-level law, and the Hebbian memory at the same (d, p) against its finite-size law, "
        "with sqrt(2 ln p).",
        fig_scores,
    ),
    Figure(
        "rank",
        "Capacity against the rank fraction kappa: certified lower bound and Adam, against "
        "alpha_c(p, kappa) at the full-rank p_c and the asymptote F(kappa)/2.",
        fig_rank,
    ),
    Figure(
        "adam",
        "Certified minus Adam capacity per seed on the same tasks, and the difference of the medians.",
        fig_adam,
    ),
    Figure(
        "peer",
        "Nichani, Lee and Bietti's protocol: their capacity (accuracy 0.99) beside the certified "
        "all-stored one, N against d^2, with their guide line.",
        fig_peer,
    ),
)
