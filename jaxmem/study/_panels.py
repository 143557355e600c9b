"""The tables the report's figures draw, computed from records and the theory (pure functions,
deterministic: the theory's samples are drawn from fixed keys). `panels` gathers them into a
`ReportData`; `_figures` only draws it, and the report quotes its notes.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import numpy as np

from .. import theory as th
from .._tasks import alpha_of
from ._analysis import adam_vs_certified, CERTIFIED_FULL, gardner_curve, peer_rows
from ._records import where
from ._stats import ks_distance


class ReportData(eqx.Module):
    """Everything the figures draw, one table per figure (lists of plain dicts and arrays):
    `transition`, `finite_size`, `spectra`, `scores`, `rank`, `adam` and `peer`
    (see the function of each name below)."""

    transition: list
    finite_size: dict
    spectra: list
    scores: list
    rank: dict
    adam: list
    peer: list


def capacity_points(rows, **where) -> list[dict]:
    """The rows with every field of `where` at its value and a finite capacity, by `d`."""
    return sorted(
        (
            r
            for r in rows
            if all(r.get(k) == v for k, v in where.items())
            and r["alpha_c"] is not None
            and math.isfinite(r["alpha_c"])
        ),
        key=lambda r: r["d"],
    )


def transition(records, rows, loads) -> list[dict]:
    """Per problem (OP, DP) and `d` of the certified full-rank rows: `P(all stored at p) =
    P(p* >= p)` over seeds as steps against the load (`alpha`, `survival`), and the transition
    theory's loads at P = 0.75, 0.5, 0.25 (`band`, None where not computed)."""
    ds = sorted({r["d"] for r in where(rows, solver="certified", model="full")})
    out = []
    for problem in ("op", "dp"):
        curves = []
        for i, d in enumerate(ds):
            recs = where(records, d=d, problem=problem, **CERTIFIED_FULL)
            if not recs:
                continue
            p_star = np.array([r["p_star"] for r in recs])
            grid = np.arange(max(2, p_star.min() - 3), p_star.max() + 4)
            band = loads.get((d, 1.0))
            curves.append(
                dict(
                    d=d,
                    color=i,
                    seeds=len(recs),
                    alpha=alpha_of(d, grid),
                    survival=(p_star[None, :] >= grid[:, None]).mean(axis=1),
                    band=None
                    if band is None
                    else [float(band.alpha_p75), float(band.alpha_50), float(band.alpha_p25)],
                )
            )
        out.append(dict(problem=problem, curves=curves))
    return out


def finite_size(rows, loads) -> dict:
    """The capacities against `d`: certified OP and DP and Adam (all stored), Gardner's
    `alpha_c(p(d))` (`gardner`, `(d, alpha)` pairs), the transition's `alpha_50(d)` at the
    certified `d`, and the Hebbian all-stored loads with their finite-size law."""
    base = dict(model="full", embedding="gaussian")
    cert = {pr: capacity_points(rows, problem=pr, solver="certified", **base) for pr in ("op", "dp")}
    adam = [
        r
        for r in capacity_points(rows, problem="op", solver="adam", **base)
        if r.get("criterion", 1.0) == 1.0
    ]
    ds = sorted({r["d"] for r in cert["op"] + cert["dp"]})
    heb = capacity_points(rows, solver="hebbian")
    return dict(
        certified_op=cert["op"],
        certified_dp=cert["dp"],
        adam=adam,
        gardner=gardner_curve(rows) if ds else [],
        alpha_50=[(d, float(loads[(d, 1.0)].alpha_50)) for d in ds if (d, 1.0) in loads],
        hebbian=heb,
        hebbian_theory=[r.get("theory_alpha_c") or np.nan for r in heb],
    )


def _moments(s):
    return f"mean {s.mean():.3f}, m2 {np.mean(s**2):.3f}, m4 {np.mean(s**4):.3f}"


def spectra(margins, key) -> list[dict]:
    """Per `(problem, model, kappa)` of the max-margin records: their singular values (normalised
    to `|W|_F^2 = d^2 F(kappa)`, over `sqrt d`), the law of `p/d -> infinity` (quarter circle,
    or its truncation for a factored memory: samples `law` and density `density` on `grid`), the
    finite-`p/d` law of `U^T E` and the initialisation's law (samples), and a note with moments,
    KS distances and the certified optimality ratio. The laws are sampled from `key` folded
    with `d`."""
    groups = {}
    for r in margins:
        c = r["config"]
        groups.setdefault((c["problem"], c["model"], c["kappa"]), []).append(r)
    grid = np.linspace(0, 2, 200)
    out = []
    for k in sorted(groups, key=lambda k: (k[1] != "full", k[0])):
        recs = groups[k]
        problem, model, kappa = k
        d = recs[0]["config"]["d"]
        p = int(np.median([r["p"] for r in recs]))
        sv = np.concatenate([r["singular_values"] for r in recs])
        k_law, k_init, k_fin = jax.random.split(jax.random.fold_in(key, d), 3)  # independent laws
        law = np.asarray(th.qc_sample(k_law, 20_000, kappa))
        init = np.asarray(th.init_spectrum(k_init, d, samples=16, kappa=kappa))
        fin = np.asarray(th.product_spectrum(k_fin, d, p, samples=16, kappa=kappa))
        full = model == "full"
        density = np.asarray(th.qc_density(grid) if full else th.truncated_density(grid, kappa))
        gaps = [np.inf if r.get("gap") is None else r["gap"] for r in recs]
        name = "quarter circle" if full else "truncated law"
        noise = 1.36 * math.sqrt(1 / sv.size + 1 / law.size)
        note = (
            f"{model} {problem.upper()} (d={d}, kappa={kappa:.2f}, {len(recs)} seeds at their certified "
            f"p*, median {p}): max margin {_moments(sv)}; {name} {_moments(law)}; finite p/d law "
            f"{_moments(fin)}; initialisation {_moments(init)}. KS distance to the {name} "
            f"{ks_distance(sv, law):.3f}, to the finite p/d law {ks_distance(sv, fin):.3f}, to the "
            f"initialisation {ks_distance(sv, init):.3f} (with {sv.size} values, distances below about "
            f"{noise:.3f} are within sampling noise at 95% if the values were independent; singular "
            "values of one matrix are not, so this is a yardstick, not a test). Certified gap to the "
            f"full-rank optimum (1 - margin / upper bound): median {np.median(gaps):.3f}, largest "
            f"{np.max(gaps):.3f}."
        )
        out.append(
            dict(
                problem=problem,
                model=model,
                kappa=kappa,
                d=d,
                p=p,
                seeds=len(recs),
                singular_values=sv,
                law=law,
                initialisation=init,
                finite=fin,
                grid=grid,
                density=density,
                note=note,
            )
        )
    return out


def scores(margins) -> list[dict]:
    """Normalised target and best-competitor scores of the full-rank OP max-margin memories and of
    the Hebbian memories on the same tasks, each beside its law (samples: the water-level law and
    the Hebbian finite-size law) and `sqrt(2 ln p)`, with a note: one panel each, none without
    such records."""
    recs = where(margins, model="full", problem="op")
    if not recs:
        return []
    d = recs[0]["config"]["d"]
    p = int(np.median([r["p"] for r in recs]))
    thr = math.sqrt(2 * math.log(p))
    out = []
    laws = (
        ("max_margin", "max-margin memory", th.optimal_scores(p, samples=50_000)),
        ("hebbian", "Hebbian memory", th.hebbian_scores(d, p, "op", samples=50_000)),
    )
    for name, title, law in laws:
        tgt = np.concatenate([r[f"{name}_target"] for r in recs])
        best = np.concatenate([r[f"{name}_best"] for r in recs])
        lt, lb = np.asarray(law.target), np.asarray(law.best)
        lo = min(np.percentile(tgt, 0.5), np.percentile(lb, 0.5), -1)
        hi = max(np.percentile(tgt, 99.5), np.percentile(lt, 99.5), thr + 1)
        note = (
            f"{title} (d={d}, {len(recs)} seeds, p* median {p}): target mean {tgt.mean():.2f} sd "
            f"{tgt.std():.2f} (theory {lt.mean():.2f} sd {lt.std():.2f}); best competitor mean "
            f"{best.mean():.2f} sd {best.std():.2f} (theory {lb.mean():.2f} sd {lb.std():.2f}); "
            f"sqrt(2 ln p) = {thr:.2f}. KS distance of the targets to the theory law "
            f"{ks_distance(tgt, lt):.3f}, of the best competitors {ks_distance(best, lb):.3f}."
        )
        out.append(
            dict(
                title=title,
                d=d,
                p=p,
                threshold=thr,
                bins=np.linspace(lo, hi, 50),
                target=tgt,
                best=best,
                law_target=lt,
                law_best=lb,
                note=note,
            )
        )
    return out


def rank(rows) -> dict:
    """Capacity against `kappa` at the factored rows' `d`: certified (lower bound) and Adam points,
    the asymptote `F(kappa)/2` on a grid, and `alpha_c(p, kappa)` at the full-rank certified OP
    `p_c` (`theory`, None without that row); `asymptote` maps each factored row's `kappa` to
    `F(kappa)/2`."""
    grid = np.linspace(0.05, 1, 12)
    fac = where(rows, model="factored")
    out = dict(
        grid=grid,
        limit=np.array([float(th.F(x)) / 2 for x in grid]),
        d=None,
        points=[],
        theory=None,
        asymptote={r["kappa"]: float(th.F(r["kappa"])) / 2 for r in fac},
    )
    if not fac:
        return out
    d = fac[0]["d"]
    out["d"] = d
    for solver in ("certified", "adam"):
        pts = sorted(
            where(rows, d=d, solver=solver, problem="op", embedding="gaussian", criterion=1.0),
            key=lambda r: r["kappa"],
        )
        out["points"].append(
            (solver, [r for r in pts if r["alpha_c"] is not None and math.isfinite(r["alpha_c"])])
        )
    full = next(iter(where(rows, d=d, model="full", solver="certified", problem="op")), None)
    if full is not None:
        out["theory"] = dict(
            p_c=full["p_c"],
            alpha=np.array(
                [float(th.alpha_c(float(full["p_c"]), kappa=float(x), se_target=0.005)) for x in grid]
            ),
        )
    return out


def adam(records) -> list[dict]:
    """Per full-rank point of `adam_vs_certified`: the capacity each seed loses to Adam's step
    budget (certified minus Adam `alpha`, `lost`) and the difference of the medians (`median`)."""
    out = []
    for c in adam_vs_certified(records):
        if c["model"] != "full":
            continue
        d, ps = c["d"], c["per_seed"]
        lost = alpha_of(d, np.array(ps["certified"], float)) - alpha_of(d, np.array(ps["adam"], float))
        out.append(dict(d=d, lost=lost, median=c["lost"]))
    return out


def panels(records, rows, margins, loads, key) -> ReportData:
    """Every figure's table from a folder's threshold `records`, their capacity `rows`, its
    max-margin records, the transition theory's `loads` (`transition_theory`) and the theory's
    sampling `key`."""
    return ReportData(
        transition=transition(records, rows, loads),
        finite_size=finite_size(rows, loads),
        spectra=spectra(margins, key),
        scores=scores(margins),
        rank=rank(rows),
        adam=adam(records),
        peer=peer_rows(rows),
    )
