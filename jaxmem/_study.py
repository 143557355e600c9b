"""The capacity report: the rows of a folder of sweep records, their verdicts, figures and
`report.md`."""

from __future__ import annotations

import math
import os

import numpy as np

from ._estimate import compare_op_dp, estimate, trend
from ._files import atomic_write
from ._sweep import Knobs, make_config, Store


DEMO_DS = (16, 24, 32)
DEMO_FACTORED = (24, 0.5)


def fmt(x, nd=3):
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{nd}f}"


def capacity_rows(out: str):
    """The sweep records of a folder and their logistic estimates (threshold records aside)."""
    store = Store(out)
    recs = [r for r in store.records() if r.get("kind") != "threshold"]
    if not recs:
        raise ValueError(f"no sweep records under {out!r}")
    return store, recs, estimate(recs)


def verdict(r) -> str:
    t = r.get("theory_alpha_c")
    if t is None or r["ci_low"] is None:
        return "no theory value"
    if r["ci_low"] <= t <= r["ci_high"]:
        return "agrees (theory inside the 95% CI)"
    side = "above" if r["alpha_c"] > t else "below"
    return f"DISAGREES: measured {side} theory by {abs(r['alpha_c'] - t):.3f}"


def score_configs(records) -> tuple[list[dict] | None, dict | None]:
    """What the score figure compares: the full-rank OP records at capacity at the largest `d`,
    and the config of the Hebbian rule at the same `(d, p)` and seeds. The study that writes a
    folder runs that config (`prepare_figures`); the report only reads it.

    **Returns:** `(records, hebbian_config)`, or `(None, None)` without full-rank OP records."""
    from ._plot import at_capacity

    full = [r for r in records if r["config"]["model"] == "full" and r["config"]["problem"] == "op"]
    if not full:
        return None, None
    d = max(r["config"]["d"] for r in full)
    g = at_capacity(records, "full", "op", d)
    c = g[0]["config"]
    knobs = Knobs(seeds=c["seeds"], seed0=c["seed0"], embedding=c["embedding"])
    heb = make_config(d=d, p=c["p"], problem="op", model="hebbian", kappa=None, knobs=knobs)
    return [r for r in g if r["all_stored"]] or g, heb


def prepare_figures(store: Store) -> None:
    """Run what the report's figures need beyond the capacity search (the Hebbian memories of
    the score figure), so that `write_report` only reads."""
    _, heb = score_configs([r for r in store.records() if r.get("kind") != "threshold"])
    if heb is not None:
        store.get_or_run(heb)


def write_report(out: str) -> tuple[str, list[dict]]:
    """Figures and `report.md` from the records in `out`. It reads records and writes only
    the figures and `report.md`: it never trains.

    **Returns:** the report's path and the capacity rows."""
    import jax

    from . import _plot

    store, recs, rows = capacity_rows(out)
    optimal, heb_cfg = score_configs(recs)
    full = [r for r in rows if r["model"] == "full" and np.isfinite(r["p_c"])]
    data = _plot.ReportData(
        records=recs,
        rows=rows,
        optimal=optimal,
        hebbian=store.load(heb_cfg) if heb_cfg is not None and store.done(heb_cfg) else None,
        p_saddle=int(round(max(r["p_c"] for r in full))) if full else 200,
        key=jax.random.key(0),
    )
    drawn = {f.key: f.draw(data, out) for f in _plot.FIGURES}
    L = [
        "# jaxmem capacity report",
        "",
        f"Records: {len(recs)} runs in `{out}/records/` (one JSON line per config and seed). "
        "Capacity: logistic fit of P(all stored) against ln p, `alpha_hat_c = p_c ln p_c / d^2`, "
        "95% percentile bootstrap over seeds. Theory: Gardner `alpha_c(p_c, kappa)` of docs/science.md "
        "2.1/2.2 "
        "at the measured `p_c`; for the Hebbian rule, the load where the finite-size theory's "
        "P(all stored) crosses 1/2.",
        "",
        "## Capacity against theory",
        "",
        "| d | problem | model | kappa | p_c | alpha_hat_c | 95% CI | theory | verdict | runs |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        L.append(
            f"| {r['d']} | {r['problem'].upper()} | {r['model']} | {r['kappa']:.2f} | {fmt(r['p_c'], 1)} | "
            f"{fmt(r['alpha_c'])} | [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}] | "
            f"{fmt(r.get('theory_alpha_c'))} | "
            f"{verdict(r)}{'' if r['bracketed'] else ' (transition not bracketed)'} | {r['n_runs']} |"
        )
    L += [
        "",
        "## OP against DP",
        "",
        "| d | alpha_hat(OP) - alpha_hat(DP) | 95% CI | differ? |",
        "|---|---|---|---|",
    ]
    cmp = compare_op_dp(rows)
    for c in cmp:
        L.append(
            f"| {c['d']} | {c['diff']:+.3f} | [{fmt(c['ci_low'])}, {fmt(c['ci_high'])}] | "
            f"{'yes' if c['differs'] else 'no'} |"
        )
    if len(cmp) >= 2:
        first, last = abs(cmp[0]["diff"]), abs(cmp[-1]["diff"])
        n_diff = sum(c["differs"] for c in cmp)
        L += [
            "",
            f"OP and DP differ significantly (95% CI excludes 0) at {n_diff} of {len(cmp)} dimensions. "
            f"|difference| is {first:.3f} at d={cmp[0]['d']} and {last:.3f} at d={cmp[-1]['d']}: it "
            f"{'shrinks' if last < first else 'does not shrink'} over this range of d.",
        ]
    L += ["", "## Finite-size trend", ""]
    for problem in ("op", "dp"):
        t = trend(rows, problem)
        if t:
            L.append(
                f"- {problem.upper()} full rank: fit `alpha_hat_c = a + b / ln p_c` over {t['n']} sizes: "
                f"a = {t['a']:.3f} ± {t['a_se']:.3f}, b = {t['b']:.3f}. The asymptote 1/2 is "
                f"{abs(t['a'] - 0.5) / max(t['a_se'], 1e-9):.1f} standard errors from a (a two-parameter "
                "fit over small d; the theory's corrections are of order log log p / log p)."
            )
    heb = [r for r in rows if r["model"] == "hebbian" and np.isfinite(r["alpha_c"])]
    if heb:
        from ._estimate import theory_alpha_c

        far = {d: theory_alpha_c(d, d * d / 8 / math.log(d), "hebbian", 1.0, "op") for d in (64, 256, 1024)}
        L.append(
            "- Hebbian all-stored loads: "
            + ", ".join(f"d={r['d']} {r['problem'].upper()}: {r['alpha_c']:.3f}" for r in heb)
            + ", far below the trained memories and below the asymptote 1/8. The finite-size Hebbian theory "
            "(same definition, OP) gives "
            + ", ".join(f"{fmt(v)} at d={d}" for d, v in far.items())
            + ": it reaches the neighbourhood of 1/8 only at d ~ 10^3."
        )
    L += ["", "## Spectra", ""] + [f"- {n}" for n in drawn["iii"][1]]
    L += ["", "## Figures", ""]
    for f in _plot.FIGURES:
        caption = f.caption(data) if callable(f.caption) else f.caption
        L += [f"![figure {f.key}]({drawn[f.key][0]})", "", f"*({f.key})* {caption}", ""]
    path = os.path.join(out, "report.md")
    atomic_write(path, "\n".join(L) + "\n")
    return path, rows
