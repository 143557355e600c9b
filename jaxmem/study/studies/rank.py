"""The rank study: certified lower bounds on the capacity of two-layer memories `W = Q R^T` of
rank `m = kappa d`, against the theory's `alpha_c(p, kappa)`, with Adam on the same model and the
full-rank thresholds that bound each seed's uncertified gap. Presets: `default` (`RANK`, d = 32),
`large` (d = 48 at kappa = 0.5, into the same folder) and `quick` (under a minute). Its page is
`rank.md`, with `rank.json` and the figure `rank.png`."""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx

from ..._validate import check_int, check_real, InvalidArgument
from ...solvers._adam import TrainConfig
from .._analysis import fmt, rank_table
from .._figures import fig_rank_study
from .._spec import seed_pairs
from .._study import AbstractStudy, by_kind, register
from .._units import point_configs


class RankSpec(eqx.Module):
    """The rank study: certified lower bounds on the capacity of `W = Q R^T` of rank
    `m = kappa d`, with Adam on the same model and the full-rank thresholds that bound each seed's
    uncertified gap (`jaxmem study rank`).

    **Arguments:**

    - `points`: `(d, kappas, seeds)`: at each `d`, the certified full-rank thresholds of the OP
      and the DP and the certified rank-`m` lower bounds of both at each `kappa`, on the same
      nested tasks.
    - `adam`: `(d, seeds)`: Adam (the capacity study's protocol, `steps`, `lr`) on the factored
      model of the OP at each `kappa` of that `d`'s point, seeds `0..seeds-1`.
    - `steps`, `lr`: Adam's budget and step size.
    - `group`: seeds per unit of work.
    """

    points: tuple
    adam: tuple
    steps: int = 5000
    lr: float = 3e-2
    group: int = 16

    def __check_init__(self):
        try:
            pts = [(int(d), tuple(float(k) for k in ks), int(n)) for d, ks, n in self.points]
        except (TypeError, ValueError):
            raise InvalidArgument(f"points must be triples (d, kappas, seeds), got {self.points!r}") from None
        for d, ks, n in pts:
            check_int("points d", d, 2)
            check_int("points seeds", n, 1)
            for k in ks:
                check_real("points kappa", k, low=0.0, low_open=True, high=1.0)
        for d, _ in seed_pairs("adam", self.adam):
            if d not in [p[0] for p in pts]:
                raise InvalidArgument(f"adam d = {d} has no point in points")
        check_int("steps", self.steps, 1)
        check_real("lr", self.lr, low=0.0, low_open=True)
        check_int("group", self.group, 1)


# The CPU rank study (docs/results/rank.md). Seeds: 48
# per point: with 32 the DP's CI at kappa = 0.5 was 0.036 wide, the others at most 0.030. d = 48
# is `RANK_LARGE`: its two rank-m units took 11 and 15 minutes, past this preset's 30.
RANK = RankSpec(points=((32, (0.25, 0.5, 0.75), 48),), adam=((32, 16),))

# d = 48 at kappa = 0.5, OP and DP, 16 seeds, into the same folder (`jaxmem study rank --preset large`).
RANK_LARGE = RankSpec(points=((48, (0.5,), 16),), adam=())

# The same path in under a minute (tests, and `--preset quick`).
RANK_QUICK = RankSpec(points=((8, (0.5,), 8),), adam=((8, 4),), steps=500)


def rank_points(spec: RankSpec) -> list[dict]:
    """The units of work of a rank study: per `d`, the full-rank points, then the rank-`m`
    lower bounds by `kappa`, then Adam on the factored model."""
    adam = dict(seed_pairs("adam", spec.adam))
    cfg = TrainConfig(steps=spec.steps, lr=spec.lr)
    units = []
    for d, kappas, n in spec.points:
        for problem in ("op", "dp"):
            units += point_configs(d=d, problem=problem, seeds=n, group=spec.group)
        for k in kappas:
            for problem in ("op", "dp"):
                kw = dict(d=d, problem=problem, model="factored", kappa=k, group=spec.group)
                units += point_configs(seeds=n, **kw)
                if d in adam and problem == "op":
                    units += point_configs(seeds=adam[d], solver="adam", adam_config=cfg, **kw)
    return units


class Rank(AbstractStudy):
    """The rank study (`RankSpec`)."""

    name: ClassVar[str] = "rank"
    title: ClassVar[str] = "rank-constrained memories W = Q R^T: certified lower bounds against kappa"
    presets: ClassVar[dict] = dict(default=RANK, large=RANK_LARGE, quick=RANK_QUICK)

    def units(self, spec: RankSpec) -> list[dict]:
        return rank_points(spec)

    def claims(self, records: list[dict]) -> bool:
        """Certified rank-`m` thresholds and no max-margin, Hebbian or unit-norm records (those
        are the capacity study's)."""
        thr, margins, sweep = by_kind(records)
        cfgs = [r["config"] for r in thr]
        other = any(c["solver"] == "hebbian" or c["embedding"] != "gaussian" for c in cfgs)
        factored = any(c["model"] == "factored" and c["solver"] == "certified" for c in cfgs)
        return factored and not (other or margins or sweep)

    def tables(self, records: list[dict]):
        thr, _, _ = by_kind(records)
        table = rank_table(thr)
        return table if table["rows"] else None

    def figures(self, table, out: str) -> dict:
        return dict(rank=fig_rank_study(table, out))

    def report(self, table, figures, out: str) -> str:
        figure = figures["rank"]
        ci = lambda r: f"{fmt(r['alpha_c'])} [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]"
        width = lambda r: fmt(r["ci_high"] - r["ci_low"]) if r["ci_high"] is not None else "—"
        L = [
            "# Rank-constrained memories `W = Q R^T` (certified lower bounds)",
            "",
            f"Records in `{out}/records/`. A rank-`m` threshold is a lower bound: a storable certificate is "
            "an explicit rank-`m` memory with every margin positive (checked in float64), but no certificate "
            "says that no rank-`m` memory exists, so an undecided instance counts as not stored and the "
            "seed's search goes on below it. `alpha_hat_c = p_c ln p_c / d^2` is the median over seeds of "
            "these lower bounds, with the distribution-free 95% CI of a median; the true rank-`m` capacity "
            "is at least it. Each seed's rank-`m` threshold lies between its lower bound and its certified "
            "full-rank threshold on the same task: `below full rank` counts the seeds where these differ "
            "(the rank-`m` threshold is uncertified in between) and gives the median width in `alpha`. "
            "Gardner's `alpha_c(p_c, kappa)` is evaluated at each row's own `p_c`; against a lower bound "
            'only "above" can be decided. `Adam above` counts the seeds at which Adam on the factored '
            "model stored more than the lower bound (a lower bound that Adam beats is not tight).",
            "",
            "| d | kappa | problem | seeds | lower bound alpha_hat_c [95% CI] | CI width | "
            "alpha_c(p_c, kappa) | vs theory | F(kappa)/2 | below full rank: seeds, median width | "
            "undecided | Adam alpha_hat_c "
            "(seeds) | Adam above the bound | search s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for t in table["rows"]:
            r, a = t["certified"], t["adam"]
            gap = (
                f"{r['gap_seeds']} of {r['gap_paired']}, {fmt(r['gap_alpha'])}"
                if r.get("gap_paired")
                else "—"
            )
            adam = "—" if a is None else f"{fmt(a['alpha_c'])} ({a['seeds']})"
            above = "—" if t["adam_above"] is None else f"{t['adam_above']} of {t['adam_paired']}"
            L.append(
                f"| {t['d']} | {t['kappa']:.2f} | {t['problem'].upper()} | {r['seeds']} | {ci(r)} | "
                f"{width(r)} | {fmt(r.get('theory_alpha_c'))} | {r['theory_verdict']} | {t['limit']:.3f} | "
                f"{gap} | "
                f"{r['undecided']} | {adam} | {above} | {r['seconds']:.0f} |"
            )
        L += ["", "Full rank on the same tasks (certified, both sides):", ""]
        L += [
            f"- d={f['d']} {f['problem'].upper()}: {ci(f)}, {f['seeds']} seeds; alpha_c(p_c) = "
            f"{fmt(f.get('theory_alpha_c'))} ({f['theory_verdict']})."
            for f in table["full"]
        ]
        L += (
            []
            if not table["op_dp"]
            else [
                "",
                "## OP against DP",
                "",
                "The difference of the medians of the lower bounds, with its 95% bootstrap CI over seeds (a "
                "difference of lower bounds, not of capacities: it measures the two problems only as far as "
                "the bounds are tight):",
                "",
            ]
        )
        for c in table["op_dp"]:
            v = c["verdict"]
            if v == "undecided":
                v = f"undecided (about {c['seeds_to_decide']} seeds per side would decide it)"
            L.append(
                f"- d={c['d']} kappa={c['kappa']:.2f}: OP - DP = {c['diff']:+.3f} "
                f"[{c['ci_low']:+.3f}, {c['ci_high']:+.3f}], {v}."
            )
        secs = sum(
            t["certified"]["seconds"] + (t["adam"]["seconds"] if t["adam"] else 0) for t in table["rows"]
        )
        secs += sum(f["seconds"] for f in table["full"])
        L += ["", f"Search time in all: {secs:.0f} s.", "", f"![rank]({figure})", ""]
        return "\n".join(L)

    def summary(self, table):
        js = lambda r: None if r is None else r.to_json()
        return dict(
            rows=[dict(t, certified=js(t["certified"]), adam=js(t["adam"])) for t in table["rows"]],
            op_dp=table["op_dp"],
            full=[js(f) for f in table["full"]],
            curves={str(d): c for d, c in table["curves"].items()},
            limit=table["limit"],
        )


register(Rank())
