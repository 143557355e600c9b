"""The storage mechanism: certified max-margin memories of the OP and the DP on the same seeds,
at fractions of each seed's certified threshold, beside the Hebbian memory of the same tasks and
a rank-`kappa d` max-margin memory; their spectra and scores against the laws of
docs/science.md (2.3, 2.4), OP against DP, with Student-t 95% intervals over seeds. Presets:
`default` (d = 64, 4 seeds: 711 s on the 2-core machine) and `quick`. Its page is
`mechanism.md`, with the figure `mechanism.png`.

Seed `s` is the task `make_task(fold_in(key(seed0), s), ...)` of `jaxmem capacity`; OP and DP
tasks of one seed share their inputs and targets (the DP's competitors are fresh vectors), so
OP - DP is paired by seed."""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import numpy as np

from ... import theory as th
from ..._validate import check_int, check_real
from .._analysis import fmt, threshold_rows
from .._figures import fig_mechanism
from .._mechanism import ci_verdict, paired_rows, SCORE_STATS, SPECTRUM_STATS
from .._records import KIND, MECHANISM_KIND, where
from .._stats import mean_ci
from .._study import AbstractStudy, by_kind, register
from .._units import point_configs


class MechanismSpec(eqx.Module):
    """The mechanism study's settings.

    **Arguments:**

    - `d`, `seeds`, `seed0`: the tasks (seeds `0..seeds-1`, at least 2 for an interval).
    - `problems`: of the certified thresholds and the full-rank memories.
    - `loads`: the fractions of each seed's threshold at which the max-margin memory is solved.
    - `kappa`, `rank_load`, `rank_problems`: the rank-`kappa d` max-margin memory, at
      `rank_load` of the full-rank threshold, for these problems (`kappa` 0: none; each costs
      about 75 s per seed at d = 64).
    """

    d: int = 64
    seeds: int = 4
    seed0: int = 0
    problems: tuple = ("op", "dp")
    loads: tuple = (0.8, 0.95)
    kappa: float = 0.5
    rank_load: float = 0.75
    rank_problems: tuple = ("op",)

    def __check_init__(self):
        check_int("d", self.d, 2)
        check_int("seeds", self.seeds, 2)
        check_int("seed0", self.seed0, 0)
        for x in (*self.loads, self.rank_load):
            check_real("loads", x, low=0.0, low_open=True, high=1.0)
        check_real("kappa", self.kappa, low=0.0, high=1.0)


MECHANISM = MechanismSpec()
MECHANISM_QUICK = MechanismSpec(d=12, seeds=3, loads=(0.9,))


def mechanism_configs(spec: MechanismSpec, records: list[dict]) -> list[dict]:
    """The mechanism units: per problem and load, the seeds' max-margin memories at
    `floor(load p*)` of their certified thresholds `p*` (read from `records`), the tasks drawn at
    the largest `p*`; then the rank-`kappa d` memories."""
    out = []
    for problem in spec.problems:
        recs = where(
            records, d=spec.d, problem=problem, model="full", solver="certified", embedding="gaussian"
        )
        thr = {r["seed"]: r["p_star"] for r in recs if r["config"]["seed0"] == spec.seed0}
        if any(s not in thr for s in range(spec.seeds)):
            continue
        p_star = np.array([thr[s] for s in range(spec.seeds)])
        base = dict(kind=MECHANISM_KIND, d=spec.d, problem=problem, seed0=spec.seed0, seeds=[0, spec.seeds])
        base.update(p_max=int(p_star.max()))
        for load in spec.loads:
            ps = np.floor(load * p_star).astype(int).tolist()
            out.append(dict(base, model="full", kappa=1.0, load=load, p=ps))
        if spec.kappa and problem in spec.rank_problems:
            ps = np.floor(spec.rank_load * p_star).astype(int).tolist()
            out.append(dict(base, model="factored", kappa=spec.kappa, load=spec.rank_load, p=ps))
    return out


def _ci(values, nd=3) -> str:
    m, lo, hi = mean_ci(values)
    return f"{m:.{nd}f} [{lo:.{nd}f}, {hi:.{nd}f}]"


def _diff(values) -> str:
    """A paired difference with its interval and what the interval decides about 0."""
    m, lo, hi = mean_ci(values)
    return f"{m:+.3f} [{lo:+.3f}, {hi:+.3f}] ({ci_verdict(lo, hi)})"


def _line(*cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _header(*cells) -> list[str]:
    return [_line(*cells), "|" + "---|" * len(cells)]


def _paired(rows) -> list[str]:
    return [
        _line(
            r["stat"],
            f"{r['a']:.3f}",
            f"{r['b']:.3f}",
            f"{r['diff']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]",
            r["verdict"],
        )
        for r in rows
    ]


class Mechanism(AbstractStudy):
    """The mechanism study (`MechanismSpec`): certified thresholds, then the mechanism units."""

    name: ClassVar[str] = "mechanism"
    title: ClassVar[str] = "the storage mechanism: max-margin and Hebbian spectra and scores against the laws"
    presets: ClassVar[dict] = dict(default=MECHANISM, quick=MECHANISM_QUICK)

    def units(self, spec: MechanismSpec) -> list[dict]:
        return [
            u
            for problem in spec.problems
            for u in point_configs(d=spec.d, problem=problem, seeds=spec.seeds, seed0=spec.seed0)
        ]

    def later_units(self, spec: MechanismSpec, records: list[dict]) -> list[dict]:
        return mechanism_configs(spec, [r for r in records if r.get("kind") == KIND])

    def claims(self, records: list[dict]) -> bool:
        return any(r.get("kind") == MECHANISM_KIND for r in records)

    def tables(self, records: list[dict]):
        mech = where(records, kind=MECHANISM_KIND)
        if not mech:
            return None
        cfg = mech[0]["config"]
        d, seed0 = cfg["d"], cfg["seed0"]
        full = sorted(where(mech, model="full"), key=lambda r: r["seed"])
        fac = where(mech, model="factored")
        problems = [p for p in ("op", "dp") if any(r["config"]["problem"] == p for r in full)]
        loads = sorted({r["load"] for r in full})
        thr = by_kind(records)[0]
        thresholds = {}
        for problem in problems:
            recs = where(thr, d=d, problem=problem, model="full", solver="certified", embedding="gaussian")
            recs = sorted((r for r in recs if r["config"]["seed0"] == seed0), key=lambda r: r["seed"])
            (row,) = threshold_rows(recs, theory=False)
            thresholds[problem] = dict(
                p_star=[r["p_star"] for r in recs], alpha_c=row["alpha_c"], ci=[row["ci_low"], row["ci_high"]]
            )
        grid = np.linspace(0, 2, 200)
        curves = dict(grid=grid, qc=np.asarray(th.qc_density(grid)))
        if fac:
            curves["truncated"] = np.asarray(th.truncated_density(grid, fac[0]["rank"] / d))
        seeds = len({r["seed"] for r in full})
        return dict(
            d=d,
            seeds=seeds,
            problems=problems,
            loads=loads,
            full=full,
            fac=fac,
            thresholds=thresholds,
            curves=curves,
        )

    def figures(self, t, out: str) -> dict:
        return dict(mechanism=fig_mechanism(t, out))

    def report(self, t, figures, out: str) -> str:
        full, problems, loads = t["full"], t["problems"], t["loads"]
        at = lambda problem, load: [
            r for r in full if r["config"]["problem"] == problem and r["load"] == load
        ]
        mean = lambda rs, k: float(np.mean([r[k] for r in rs]))
        thr = "; ".join(
            f"{k.upper()} p* {v['p_star']} (alpha_c {fmt(v['alpha_c'], 4)} [{fmt(v['ci'][0], 4)}, "
            f"{fmt(v['ci'][1], 4)}])"
            for k, v in t["thresholds"].items()
        )
        L = [
            f"# The storage mechanism at d = {t['d']} ({t['seeds']} seeds)",
            "",
            f"Certified thresholds: {thr}",
            "",
        ]
        L += [
            "## Max-margin memories against the theory",
            "",
            "Means over seeds with 95% Student-t intervals. `margin x a`: the best normalised margin in "
            "field units; `kappa`: the theory's margin at which `alpha_c(p, kappa)` is the load. Scores in "
            "units of `|W e_mu|`; the water level is the target coordinate of `proj_{C_p(kappa)}(z)`, at "
            "capacity `kappa = 0`; `pooled`: the competitors at the water level; `sd`: the targets' spread.",
            "",
        ]
        L += _header(
            "problem", "load", "gap (max)", "margin x a", "kappa", "active / input", "pooled", "target",
            "water level", "at capacity", "best", "target sd", "law sd", "sqrt(2 ln p)",
        )  # fmt: skip
        for problem in problems:
            for load in loads:
                rs = at(problem, load)
                mm = lambda k: [r["max_margin"][k] for r in rs]
                L.append(
                    _line(
                        problem.upper(),
                        load,
                        f"{max(r['gap_certified'] for r in rs):.4f}",
                        _ci([r["margin_field"] for r in rs]),
                        f"{mean(rs, 'margin_theory'):.3f}",
                        _ci([r["active"] for r in rs]),
                        f"{mean(rs, 'pooled_theory'):.2f}",
                        _ci(mm("target")),
                        f"{mean(rs, 'law_target'):.3f}",
                        f"{mean(rs, 'law0_target'):.3f}",
                        _ci(mm("best")),
                        _ci(mm("target_sd")),
                        f"{mean(rs, 'law_target_sd'):.3f}",
                        f"{mean(rs, 'threshold'):.3f}",
                    )  # fmt: skip
                )
        L += ["", "## Measured minus theory (per seed)", ""]
        L += _header(
            "problem",
            "load",
            "target - water level",
            "active - pooled",
            "margin x a - kappa",
            "target - sqrt(2 ln p)",
        )
        for problem in problems:
            for load in loads:
                rs = at(problem, load)
                L.append(
                    _line(
                        problem.upper(),
                        load,
                        _diff([r["max_margin"]["target"] - r["law_target"] for r in rs]),
                        _diff([r["active"] - r["pooled_theory"] for r in rs]),
                        _diff([r["margin_field"] - r["margin_theory"] for r in rs]),
                        _diff([r["max_margin"]["target"] - r["threshold"] for r in rs]),
                    )  # fmt: skip
                )
        L += [
            "",
            "## Spectra (normalised to |W|_F^2 = d^2 F(kappa), over sqrt d)",
            "",
            "`ks_law`: KS distance to the quarter circle (truncated to its top `kappa` for a rank-`m` "
            "memory); `ks_finite`: to the finite-`p/d` law of `U^T E`.",
            "",
        ]
        L += _header("memory", "problem", "load", *SPECTRUM_STATS)
        for problem in problems:
            for load in loads:
                rs = at(problem, load)
                for mem in ("max_margin", "hebbian"):
                    stats = (_ci([r[mem][k] for r in rs]) for k in SPECTRUM_STATS)
                    L.append(_line(mem, problem.upper(), load, *stats))
            rs = [r for r in t["fac"] if r["config"]["problem"] == problem]
            if rs:
                stats = (_ci([r["max_margin"][k] for r in rs]) for k in SPECTRUM_STATS)
                L.append(_line(f"max_margin rank {rs[0]['rank']}", problem.upper(), rs[0]["load"], *stats))
        if len(problems) == 2:
            for mem in ("max_margin", "hebbian"):
                for load in loads:
                    L += ["", f"## OP - DP, {mem} at {load} of p* (paired per seed)", ""]
                    L += _header("stat", "OP", "DP", "OP - DP", "verdict (OP)")
                    a, b = at("op", load), at("dp", load)
                    L += _paired(
                        paired_rows([r[mem] for r in a], [r[mem] for r in b], SPECTRUM_STATS + SCORE_STATS)
                    )
        for problem in problems:
            for load in loads:
                L += [
                    "",
                    f"## Max-margin against Hebbian, {problem.upper()} at {load} of p* (same tasks)",
                    "",
                ]
                L += _header("stat", "max-margin", "Hebbian", "difference", "verdict (max-margin)")
                rs = at(problem, load)
                stats = ("target", "target_sd", "gap", "target_z", "ks_law", "sv_max")
                L += _paired(paired_rows([r["max_margin"] for r in rs], [r["hebbian"] for r in rs], stats))
        seconds = sum(r["seconds"] for r in full + t["fac"])
        L += [
            "",
            f"Max-margin time in all: {seconds:.0f} s.",
            "",
            f"![mechanism]({figures['mechanism']})",
            "",
        ]
        return "\n".join(L)


register(Mechanism())
