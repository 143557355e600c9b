"""`report.md` and its figures from the records of a folder alone: it reads records and writes
only the figures and the report, never measures."""

from __future__ import annotations

import math

from ._analysis import (
    adam_vs_certified,
    compare,
    fmt,
    gap_note,
    gap_trend,
    peer_rows,
    setup,
    trend_note,
    verdict,
)
from ._figures import FIGURES
from ._records import where


def capacity_page(tables: dict, drawn: dict, out: str) -> str:
    """The capacity study's page (`report.md`) from its tables (`Demo.tables`: threshold records,
    max-margin records, capacity rows, the transition theory's loads and the figures' data) and
    its drawn figures (`{key: (file, notes)}`): a section only where it has rows, a figure only
    where it was drawn."""
    records, margins, rows, loads = (tables[k] for k in ("records", "margins", "rows", "loads"))
    data = tables["data"]
    L = [
        "# jaxmem capacity report",
        "",
        f"Records: {len(records)} seed thresholds and {len(margins)} max-margin memories in `{out}/records/` "
        "(JSON lines). Capacity: the median over seeds of each seed's threshold `p*` on nested tasks, "
        "`alpha_hat_c = p_c ln p_c / d^2`, with the distribution-free 95% CI of a median (binomial order "
        "statistics). `certified`: `p*` decided exactly (storable/unstorable certificates); `adam`: the "
        "largest `p` Adam stored within its budget (at most the certified one); `hebbian`: the last `p` "
        "before the closed-form rule first fails. Theory: Gardner `alpha_c(p_c, kappa)` at the measured "
        "`p_c` and the transition theory's `alpha_50(d)` (docs/science.md 2.1, 2.8); for the Hebbian rule, "
        "the load where its finite-size P(all stored) crosses 1/2 (2.5). A verdict is printed only where "
        "the CI decides it.",
        "",
        "## Capacity",
        "",
        "| d | problem | model | kappa | solver | setup | seeds | p_c | alpha_hat_c | 95% CI | "
        "alpha_c(p_c) | vs alpha_c(p_c) | alpha_50 (se) | vs alpha_50 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        full = r["model"] == "full" and r["embedding"] == "gaussian" and r["solver"] == "certified"
        a50 = loads.get((r["d"], 1.0)) if full else None
        a50v = float(a50.alpha_50) if a50 is not None else None
        a50s = f"{a50v:.3f} ({float(a50.alpha_50_se):.3f})" if a50 is not None else "—"
        vs_theory = verdict(
            r["ci_low"], r["ci_high"], r.get("theory_alpha_c"), "theory", r.get("lower_bound")
        )
        L.append(
            f"| {r['d']} | {r['problem'].upper()} | {r['model']} | {r['kappa']:.2f} | {r['solver']} | "
            f"{setup(r)} | {r['seeds']} | {fmt(r['p_c'], 1)} | {fmt(r['alpha_c'])} | "
            f"[{fmt(r['ci_low'])}, {fmt(r['ci_high'])}] | {fmt(r.get('theory_alpha_c'))} | "
            f"{vs_theory} | {a50s} | "
            f"{verdict(r['ci_low'], r['ci_high'], a50v, 'alpha_50') if a50v is not None else '—'} |"
        )
    undecided = sum(r["undecided"] for r in rows)
    L += ["", f"Seeds whose search stopped at an undecided instance: {undecided}."]
    L += _op_dp_section(records)
    L += _adam_section(records)
    L += _finite_size_section(rows, loads)
    for key, title in (("spectra", "Spectra of the max-margin memories"), ("scores", "Scores")):
        if key in drawn:
            L += ["", f"## {title}", ""] + [f"- {n}" for n in drawn[key][1]]
    L += _rank_section(rows, data.rank)
    L += _peer_section(rows)
    if drawn:
        L += ["", "## Figures", ""]
    for f in FIGURES:
        if f.key in drawn:
            L += [f"![{f.key}]({drawn[f.key][0]})", "", f"*{f.key}.* {f.caption}", ""]
    return "\n".join(L)


def gap_cell(g) -> str:
    if g is None:
        return "—"
    v = g["verdict"]
    if v == "undecided":
        v = f"undecided (about {g['seeds_to_decide']} seeds)" if g["seeds_to_decide"] else v
    return f"{g['diff']:+.3f} [{g['ci_low']:+.3f}, {g['ci_high']:+.3f}] {v}"


def _op_dp_section(records):
    cmp = [c for c in compare(records, *_OPDP) if c["embedding"] == "gaussian"]
    if not cmp:
        return []
    L = [
        "",
        "## OP against DP (certified)",
        "",
        "Difference of the median capacities with a 95% bootstrap CI over seeds.",
        "",
        "| d | OP − DP | 95% CI | CI width | verdict |",
        "|---|---|---|---|---|",
    ]
    for c in cmp:
        v = (
            "differ"
            if c["verdict"] == "differ"
            else f"undecided (about {c['seeds_to_decide']} seeds per side)"
        )
        L.append(
            f"| {c['d']} | {c['diff']:+.3f} | [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}] | "
            f"{c['ci_high'] - c['ci_low']:.3f} | {v} |"
        )
    if len(cmp) >= 2:
        d1, d2 = cmp[0]["d"], cmp[-1]["d"]
        L += ["", "Does the difference shrink? " + trend_note(gap_trend(records, "op-dp", d1, d2))]
    return L


_OPDP = (
    dict(problem="op", model="full", solver="certified"),
    dict(problem="dp", model="full", solver="certified"),
)


def _adam_section(records):
    rows = adam_vs_certified(records)
    if not rows:
        return []
    L = [
        "",
        "## Adam against certified",
        "",
        "Seed by seed on the same nested tasks: the fraction of seeds whose Adam threshold is below the "
        "certified one, and the capacity the step budget loses (certified minus Adam median `alpha`).",
        "",
        "| d | model | kappa | seeds | below | above | certified | Adam | lost |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in rows:
        L.append(
            f"| {c['d']} | {c['model']} | {c['kappa']:.2f} | {c['seeds']} | {c['fraction_below']:.2f} | "
            f"{c['fraction_above']:.2f} | {c['alpha_certified']:.3f} | {c['alpha_adam']:.3f} | "
            f"{c['lost']:+.3f} |"
        )
    return L


def _finite_size_section(rows, loads):
    L = []
    for problem in ("op", "dp"):
        sel = where(rows, problem=problem, model="full", solver="certified", embedding="gaussian")
        if not sel:
            continue
        parts = [f"d={r['d']}: {fmt(r['alpha_c'])} [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]" for r in sel]
        above = all(r["ci_low"] is not None and r["ci_low"] > 0.5 for r in sel)
        L.append(
            f"- {problem.upper()} certified: "
            + "; ".join(parts)
            + f". Every CI lies above the asymptote 1/2: {'yes' if above else 'no'}. Against Gardner's "
            "finite-`p` law `alpha_c(p_c)`: "
            + ", ".join(
                f"d={r['d']} {verdict(r['ci_low'], r['ci_high'], r.get('theory_alpha_c'), 'it')}" for r in sel
            )
            + ". No curve is fitted and nothing is extrapolated: the comparison is with the theory's own law."
        )
    heb = where(rows, solver="hebbian")
    if heb:
        L.append(
            "- Hebbian all-stored loads: "
            + "; ".join(
                f"d={r['d']}: {fmt(r['alpha_c'])} [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]" for r in heb
            )
            + ". They stay far below the optimal capacity and below the asymptote 1/8 at every d measured; "
            "against the finite-size Hebbian law (independence across inputs): "
            + ", ".join(
                f"d={r['d']} {verdict(r['ci_low'], r['ci_high'], r.get('theory_alpha_c'), 'it')}" for r in heb
            )
            + "."
        )
    return ["", "## Finite size", ""] + L if L else []


def _rank_section(rows, table):
    fac = where(rows, model="factored")
    if not fac:
        return []

    L = [
        "",
        "## Rank",
        "",
        "A certified rank-`m` threshold is a lower bound: a storable certificate for `W = Q R^T` is a "
        "found memory, and an undecided instance counts as not stored (the search goes on below it). "
        "`undecided` counts the seeds that met one. Adam above the certified lower bound is possible.",
        "",
    ]
    for r in fac:
        th_c = r.get("theory_alpha_c")
        L.append(
            f"- d={r['d']} kappa={r['kappa']:.2f} {r['solver']}: {fmt(r['alpha_c'])} "
            f"[{fmt(r['ci_low'])}, {fmt(r['ci_high'])}], undecided {r['undecided']}; theory "
            f"alpha_c(p_c, kappa) = {fmt(th_c)} "
            f"({verdict(r['ci_low'], r['ci_high'], th_c, 'it', r.get('lower_bound'))}), "
            f"asymptote F(kappa)/2 = {table['asymptote'][r['kappa']]:.3f}."
            + (f" {gap_note(r, head=False)}." if r.get("lower_bound") else "")
        )
    return L


def _below(value, row):
    if row is None or not math.isfinite(row["p_ci_low"]):
        return "undecided (no CI)"
    return "yes" if value < row["p_ci_low"] else "no"


def _peer_section(rows):
    pr = peer_rows(rows)
    if not pr:
        return []
    n = lambda r: "—" if r is None else f"{r['p_c']:.1f} [{fmt(r['p_ci_low'], 0)}, {fmt(r['p_ci_high'], 0)}]"
    L = [
        "",
        "## A peer's protocol (Nichani, Lee and Bietti, ICLR 2025)",
        "",
        "Their linear associative memory: unit-norm Gaussian embeddings, a bias-free `d x d` map, softmax "
        "cross-entropy over all `N` targets (a stable log-softmax), Adam stopped at training accuracy "
        "0.99, a per-seed search on `N` up to `d^2/2`. Beside it, the certified all-stored capacity of "
        "the same tasks and, where measured, of Gaussian embeddings. `N` is the median over seeds "
        "(95% CI).",
        "",
        "| d | theirs: Adam, accuracy 0.99 | ours: certified, all stored | certified, Gaussian | "
        "guide d² = 1.3 N ln N | theirs vs ours |",
        "|---|---|---|---|---|---|",
    ]
    for x in pr:
        t, o = x["theirs"], x["ours"]
        v = "—"
        if t is not None and o is not None:
            ends = [t["p_ci_low"], t["p_ci_high"], o["p_ci_low"], o["p_ci_high"]]
            if not all(math.isfinite(e) for e in ends):
                v = "undecided (too few seeds for a CI)"
            elif t["p_ci_high"] < o["p_ci_low"]:
                v = "below"
            elif o["p_ci_high"] < t["p_ci_low"]:
                v = "above"
            else:
                v = "CIs overlap: undecided"
        L.append(f"| {x['d']} | {n(t)} | {n(o)} | {n(x['gaussian'])} | {x['guide_N']:.0f} | {v} |")
    lr = next((x["theirs"]["lr"] for x in pr if x["theirs"] is not None), None)
    L += [
        "",
        f"Learning rate {lr:g} (their notebook's 1000 takes the log of a softmax, which underflows; "
        "jaxmem's loss is a stable log-softmax). Below `N = 100` an accuracy of 0.99 means all `N` "
        "stored, so the two criteria coincide there by definition. Is the guide line below the "
        "certified all-stored CI? "
        + ", ".join(f"d={x['d']} {_below(x['guide_N'], x['ours'])}" for x in pr)
        + ".",
    ]
    return L
