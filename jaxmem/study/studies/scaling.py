"""The scaling study: certified capacities of the OP and the DP against `d`, and whether their
difference (and each one's difference from the theory) shrinks as `d` grows. Presets: `default`
(`SCALING`, under 3 hours on 2 cores), `more` (more seeds at d = 128 to 256, into the same
folder), `accelerator` (the OP at d = 512 and 1024, one GPU) and `quick` (a minute). Its page is
`scaling.md`, with `scaling.json` and the figure `scaling.png`."""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx

from ..._validate import check_int
from .._analysis import fmt, gap_trend, GAPS, scaling_table, trend_note
from .._figures import fig_scaling
from .._report import gap_cell as _gap_cell
from .._spec import seed_points
from .._study import AbstractStudy, by_kind, register
from .._units import point_configs


class ScalingSpec(eqx.Module):
    """The scaling study: certified capacities of the OP and the DP against `d`, for the
    equivalence of the two problems as `d` grows (`jaxmem study scaling`).

    **Arguments:**

    - `op`, `dp`: the certified full-rank points of each problem, as `(d, seeds)`, or
      `(d, seeds, group)` where a point needs its own group size (the DP's held candidates,
      `p^2 d` floats per seed, must fit `HOLD_BYTES` for a whole group).
    - `group`: seeds per unit of work where a point does not say.
    """

    op: tuple
    dp: tuple
    group: int = 16

    def __check_init__(self):
        check_int("group", self.group, 1)
        seed_points("op", self.op, self.group)
        seed_points("dp", self.dp, self.group)


# The CPU scaling study: every `d` of both problems in under 3 hours on the 2-core machine (163
# min: the sum of its units' search times in `docs/scaling`; docs/results/scaling.md). Seeds:
# 64 where a point takes minutes; at d = 16, 24 and 32 one step of `p` is 0.020,
# 0.010 and 0.006 in `alpha`, and the 95% CIs of the differences are 0.02 to 0.04 wide; at
# d = 48, 128 seeds give 0.012 (OP - DP). From d = 64 every difference's CI is at most 0.010
# wide: 32 seeds at d = 96, 16 at 128 (the DP's in groups of 4, whose candidates, 7.3 GB, are
# held in memory; 16 seeds' would be generated at every pass), 8 at 192 and 256 (groups of 4;
# a group took 280 to 394 s at d = 192, 678 to 1101 s at 256).
SCALING = ScalingSpec(
    op=((16, 64), (24, 64), (32, 64), (48, 128), (64, 64), (96, 32), (128, 16), (192, 8, 4), (256, 8, 4)),
    dp=((16, 64), (24, 64), (32, 64), (48, 128), (64, 64), (96, 32), (128, 16, 4)),
)

# More seeds where `SCALING` has few: 32 at d = 128 (OP and DP), 192 and 256 (OP), into the same
# folder (`jaxmem study scaling --preset more`; its 17 units beyond `SCALING`'s took 173 min).
SCALING_MORE = ScalingSpec(op=((128, 32), (192, 32, 4), (256, 32, 4)), dp=((128, 32, 4),))

# The OP at accelerator sizes (`jaxmem study scaling --preset accelerator`, one GPU). A group's working
# set holds `p0 k d` float32 candidates per instance: 10.6 GB for 4 at d = 512, 18.3 GB for one
# at d = 1024. Its expected time: docs/results/scaling.md, "Accelerator sizes".
SCALING_ACCELERATOR = ScalingSpec(op=((512, 16, 4), (1024, 8, 1)), dp=())

# The same path in about a minute (tests, and `--preset quick`).
SCALING_QUICK = ScalingSpec(op=((8, 16), (12, 16)), dp=((8, 16), (12, 16)))


def scaling_points(spec: ScalingSpec) -> list[dict]:
    """The units of work of a scaling study, by `d` and then problem (a partial run has the
    small `d` of both problems first)."""
    pts = [(t, "op") for t in seed_points("op", spec.op, spec.group)]
    pts += [(t, "dp") for t in seed_points("dp", spec.dp, spec.group)]
    units = []
    for (d, n, g), problem in sorted(pts, key=lambda t: (t[0][0], t[1] == "dp")):
        units += point_configs(d=d, problem=problem, seeds=n, group=g)
    return units


class Scaling(AbstractStudy):
    """The scaling study (`ScalingSpec`); `band_samples`: samples of the transition theory's band
    per `d` (`scaling_table`)."""

    band_samples: int = 16384
    name: ClassVar[str] = "scaling"
    title: ClassVar[str] = "OP against DP against d (certified), and whether their difference shrinks"
    presets: ClassVar[dict] = dict(
        default=SCALING, more=SCALING_MORE, accelerator=SCALING_ACCELERATOR, quick=SCALING_QUICK
    )

    def units(self, spec: ScalingSpec) -> list[dict]:
        return scaling_points(spec)

    def claims(self, records: list[dict]) -> bool:
        """Only certified full-rank Gaussian thresholds, of both problems, at two `d` or more."""
        thr, margins, sweep = by_kind(records)
        if not thr or margins or sweep:
            return False
        cfgs = [r["config"] for r in thr]
        plain = all(
            (c["model"], c["solver"], c["embedding"]) == ("full", "certified", "gaussian") for c in cfgs
        )
        return plain and {c["problem"] for c in cfgs} == {"op", "dp"} and len({c["d"] for c in cfgs}) >= 2

    def tables(self, records: list[dict]):
        thr, _, _ = by_kind(records)
        table = scaling_table(thr, band_samples=self.band_samples)
        if not table:
            return None
        trends = []
        for gap in GAPS:
            ds = [t["d"] for t in table if gap in t["gaps"]]
            if len(ds) >= 2:
                trends.append(gap_trend(thr, gap, ds[0], ds[-1]))
        return dict(table=table, trends=trends)

    def figures(self, tables, out: str) -> dict:
        return dict(scaling=fig_scaling(tables["table"], out))

    def report(self, tables, figures, out: str) -> str:
        table, trends, figure = tables["table"], tables["trends"], figures["scaling"]
        cell = lambda r: (
            "—" if r is None else f"{fmt(r['alpha_c'])} [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]"
        )
        th_ = lambda r: "—" if r is None else fmt(r.get("theory_alpha_c"))
        seeds = lambda r: "—" if r is None else str(r["seeds"])
        secs = lambda r: 0.0 if r is None else r["seconds"]
        L = [
            "# OP against DP against d (certified)",
            "",
            f"Records in `{out}/records/`. Per `d` and problem: the median certified threshold as "
            "`alpha_hat_c = p_c ln p_c / d^2` with its distribution-free 95% CI; Gardner's `alpha_c(p_c)` at "
            "the problem's own `p_c`; the transition theory's loads at P(all stored) = 0.75, 0.5, 0.25. "
            "Differences: medians, with 95% bootstrap CIs over seeds (the theory term evaluated at each "
            "bootstrap median); a verdict only where the CI excludes 0, otherwise the seeds per side that "
            "a CI of the same shape would need. Nothing is fitted.",
            "",
            "| d | seeds OP/DP | OP | DP | alpha_c(p_c) OP/DP | transition 0.75 / 0.5 / 0.25 | OP − DP | "
            "OP − theory | DP − theory | search s |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for t in table:
            op, dp = t["op"], t["dp"]
            L.append(
                f"| {t['d']} | {seeds(op)}/{seeds(dp)} | {cell(op)} | {cell(dp)} | {th_(op)}/{th_(dp)} | "
                + " / ".join(fmt(a) for a in t["band"])
                + " | "
                + " | ".join(_gap_cell(t["gaps"].get(g)) for g in GAPS)
                + f" | {secs(op) + secs(dp):.0f} |"
            )
        undecided = sum(r["undecided"] for t in table for r in (t["op"], t["dp"]) if r is not None)
        # seeds neither exact, undecided nor censored: stopped at the plan's resolution
        within = lambda r: r["seeds"] - r["exact"] - r["undecided"] - r["censored"]
        bracketed = [
            f"d = {t['d']} {r['problem'].upper()} ({within(r)} of {r['seeds']} seeds, "
            f"at most {r['settings']['plan'].get('resolution', 1)} values of p each)"
            for t in table
            for r in (t["op"], t["dp"])
            if r is not None and within(r) > 0
        ]
        if bracketed:
            L += [
                "",
                "Thresholds resolved to a bracket (the search plan's `resolution`; each end of an interval "
                "takes the brackets' ends on its own side): " + "; ".join(bracketed) + ".",
            ]
        L += [
            "",
            f"Seeds whose search stopped at an undecided instance: {undecided}. "
            f"Search time in all: {sum(secs(t['op']) + secs(t['dp']) for t in table):.0f} s.",
        ]
        if trends:
            L += [
                "",
                "## Trends",
                "",
                "Each difference at the smallest against the largest `d` where it is measured (its size, "
                "signed by the small-`d` difference, so a positive change means it shrinks):",
                "",
            ]
            L += [f"- {trend_note(tr)}" for tr in trends]
        L += ["", f"![scaling]({figure})", ""]
        return "\n".join(L)

    def summary(self, tables):
        rows = lambda r: None if r is None else r.to_json()
        table = [dict(t, op=rows(t["op"]), dp=rows(t["dp"])) for t in tables["table"]]
        return dict(table=table, trends=tables["trends"])


register(Scaling())
