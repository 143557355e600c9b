"""The tail-average study: the certified capacity under the tail-average criterion (`tail:r`,
docs/science.md 2.6) against `d`, for several `r`, OP and DP, with the top-1 capacity of the same
tasks beside it and the proportional limit `alpha_G,c(r)`. Presets: `default` (d = 16 and 24,
32 seeds, r = 0.05, 0.1 and 0.25) and `quick` (a minute). Its page is `tail.md`, with `tail.json`
and the figure `tail.png`."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import ClassVar

import equinox as eqx
import numpy as np

from ..._validate import check_int, check_real, InvalidArgument
from .._analysis import fmt, threshold_rows
from .._figures import fig_tail
from .._study import AbstractStudy, by_kind, register
from .._units import point_configs


class TailSpec(eqx.Module):
    """The tail-average study (`jaxmem study tail`).

    **Arguments:**

    - `ds`: the dimensions; `rs`: the tail fractions `r` (criterion `tail:r`).
    - `problems`: `"op"`, `"dp"` or both.
    - `seeds`, `group`: seeds per point and per unit of work.
    - `top1`: also measure the certified top-1 capacity of the same tasks (same seeds).
    """

    ds: tuple
    rs: tuple
    problems: tuple = ("op", "dp")
    seeds: int = 32
    group: int = 16
    top1: bool = True

    def __check_init__(self):
        if not self.ds or not self.rs:
            raise InvalidArgument("ds and rs must each hold at least one value")
        for d in self.ds:
            check_int("d", d, 4)
        for r in self.rs:
            check_real("r", r, low=0.0, low_open=True, high=1.0)
        for p in self.problems:
            if p not in ("op", "dp"):
                raise InvalidArgument(f"problems must be 'op' or 'dp', got {p!r}")
        check_int("seeds", self.seeds, 1)
        check_int("group", self.group, 1)


# d = 16 and 24, 32 seeds: the tail capacity's 95% CI is 0.01 to 0.03 wide in p / d^2
# (`jaxmem capacity --d 16 24 --criterion tail:0.1 --problem op dp --seeds 32`: 14 min, about
# 11 of them at d = 24; docs/results/tail.md).
TAIL = TailSpec(ds=(16, 24), rs=(0.05, 0.1, 0.25))

# The same path in about a minute (tests, and `--preset quick`).
TAIL_QUICK = TailSpec(ds=(6, 8), rs=(0.25,), seeds=8, group=8)


def tail_points(spec: TailSpec) -> list[dict]:
    """The units of a tail study, by `d`, problem, then `r` (the top-1 point first)."""
    units = []
    for d in spec.ds:
        for problem in spec.problems:
            common = dict(d=d, problem=problem, seeds=spec.seeds, group=spec.group)
            if spec.top1:
                units += point_configs(**common)
            for r in spec.rs:
                units += point_configs(**common, criterion=f"tail:{r:g}")
    return units


def _seeds(rec_rows, records, want) -> dict:
    """`{(d, problem, seed): p_star}` of the exact records of the points `want(cfg)` selects."""
    out = {}
    for r in records:
        c = r["config"]
        if want(c) and r["exact"]:
            out[(c["d"], c["problem"], c["seed0"], c.get("embedding", "gaussian"), r["seed"])] = r["p_star"]
    return out


def tail_table(records: list[dict]) -> list[dict]:
    """Per `(d, problem)`: the top-1 row, one row per `r`, and per `r` the seeds paired with the
    top-1 threshold of the same task (`paired`) with the median ratio `p*_tail / p*_top1`; the
    excess over the limit, `alpha_hat_c - alpha_G,c(r)`, with the CI's ends. Pure."""
    rows = [r for r in threshold_rows(records) if r["model"] == "full" and r["solver"] == "certified"]
    top = _seeds(None, records, lambda c: "criterion" not in c)
    out = defaultdict(lambda: dict(top1=None, tails={}))
    for row in rows:
        key = (row["d"], row["problem"])
        if isinstance(row["criterion"], str):
            out[key]["tails"][float(row["criterion"].partition(":")[2])] = row
        elif row["criterion"] == 1.0:
            out[key]["top1"] = row
    table = []
    for (d, problem), entry in sorted(out.items(), key=lambda kv: (kv[0][0], kv[0][1] != "op")):
        pairs = {}
        for r in sorted(entry["tails"]):
            tail = _seeds(None, records, lambda c, r=r: c.get("criterion") == f"tail:{r:g}")
            ratio = [tail[k] / top[k] for k in tail if k[0] == d and k[1] == problem and k in top]
            pairs[r] = dict(paired=len(ratio), ratio=float(np.median(ratio)) if ratio else None)
        excess = {
            r: [row[k] - row["theory_alpha_c"] for k in ("alpha_c", "ci_low", "ci_high")]
            for r, row in entry["tails"].items()
            if row.get("theory_alpha_c") is not None
        }
        table.append(
            dict(d=d, problem=problem, top1=entry["top1"], tails=entry["tails"], pairs=pairs, excess=excess)
        )
    return table


def approach(table: list[dict]) -> list[str]:
    """Per problem and `r` measured at two `d` or more: whether the excess over the limit at the
    largest `d` lies below the one at the smallest, decided only where their 95% CIs are
    disjoint (no fit, no extrapolation); where they overlap, the seeds per point that intervals
    of the same shape, narrowing as `1 / sqrt(n)`, would need to be disjoint."""
    notes = []
    by = defaultdict(list)
    for t in table:
        for r, ex in t["excess"].items():
            by[(t["problem"], r)].append((t["d"], ex, t["tails"][r]["seeds"]))
    for (problem, r), pts in sorted(by.items()):
        if len(pts) < 2:
            continue
        (d0, (e0, lo0, hi0), n0), (d1, (e1, lo1, hi1), n1) = pts[0], pts[-1]
        if hi1 < lo0:
            verdict = "shrinks (95% CIs disjoint)"
        elif lo1 > hi0:
            verdict = "grows (95% CIs disjoint)"
        elif e1 < e0:
            # the half-widths facing each other must fall below the distance of the medians
            need = math.ceil(max(n0, n1) * ((e0 - lo0 + hi1 - e1) / (e0 - e1)) ** 2)
            verdict = f"undecided (95% CIs overlap; about {need} seeds per point would decide it)"
        else:
            verdict = "undecided (95% CIs overlap, and the median excess does not fall)"
        at = lambda e, lo, hi, d: f"{fmt(e)} [{fmt(lo)}, {fmt(hi)}] at d = {d}"
        notes.append(
            f"{problem.upper()} r = {r:g}: excess over alpha_G,c {at(e0, lo0, hi0, d0)}, "
            f"{at(e1, lo1, hi1, d1)}: {verdict}"
        )
    return notes


class Tail(AbstractStudy):
    """The tail-average study (`TailSpec`)."""

    name: ClassVar[str] = "tail"
    title: ClassVar[str] = "The tail-average capacity (certified) beside top-1, against alpha_G,c(r)"
    presets: ClassVar[dict] = dict(default=TAIL, quick=TAIL_QUICK)

    def units(self, spec: TailSpec) -> list[dict]:
        return tail_points(spec)

    def claims(self, records: list[dict]) -> bool:
        """Certified full-rank thresholds, some of them under a tail-average criterion."""
        thr, margins, sweep = by_kind(records, every_criterion=True)
        if not thr or margins or sweep:
            return False
        return any(str(r["config"].get("criterion", "")).startswith("tail:") for r in thr)

    def tables(self, records: list[dict]):
        thr, _, _ = by_kind(records, every_criterion=True)
        table = tail_table(thr)
        if not any(t["tails"] for t in table):
            return None
        return dict(table=table, approach=approach(table))

    def figures(self, tables, out: str) -> dict:
        return dict(tail=fig_tail(tables["table"], out))

    def report(self, tables, figures, out: str) -> str:
        table = tables["table"]
        rs = sorted({r for t in table for r in t["tails"]})
        cell = lambda row: (
            "—" if row is None else f"{fmt(row['alpha_c'])} [{fmt(row['ci_low'])}, {fmt(row['ci_high'])}]"
        )
        L = [
            "# The tail-average capacity (certified)",
            "",
            f"Records in `{out}/records/`. Input `mu` counts as stored when its target's score beats the "
            "mean of its `k = ceil(r (p - 1))` highest competitor scores. Per `d` and problem: the median "
            "certified threshold on the load `p_c / d^2` with its distribution-free 95% CI, for each `r`, "
            "beside the certified top-1 capacity of the same tasks on its own load `p_c ln p_c / d^2`; "
            "the verdict against the proportional limit `alpha_G,c(r)` only where the CI decides it. A "
            "seed's threshold is the largest `p` found storable with `p + 1` and `p + 2` unstorable; "
            "`rebound` counts the seeds whose storability came back above an unstorable `p`. Nothing is "
            "fitted.",
            "",
            "| d | problem | top-1 `p ln p / d^2` | "
            + " | ".join(f"r = {r:g}: `p / d^2` (limit {fmt(_limit(table, r))})" for r in rs)
            + " | undecided / rebound | search s |",
            "|---|---|---|" + "---|" * len(rs) + "---|---|",
        ]
        for t in table:
            tails = [t["tails"].get(r) for r in rs]
            verdict = lambda row: "" if row is None else f"<br>{row.get('theory_verdict', '')}"
            und = sum(row["undecided"] for row in tails if row is not None)
            reb = sum(row.get("rebound", 0) for row in tails if row is not None)
            secs = sum(row["seconds"] for row in [t["top1"], *tails] if row is not None)
            L.append(
                f"| {t['d']} | {t['problem'].upper()} | {cell(t['top1'])} | "
                + " | ".join(cell(row) + verdict(row) for row in tails)
                + f" | {und} / {reb} | {secs:.0f} |"
            )
        L += ["", "Tail threshold over top-1 threshold of the same task, median over the paired seeds:", ""]
        for t in table:
            parts = [
                f"r = {r:g}: {fmt(p['ratio'], 2)} ({p['paired']} seeds)"
                for r, p in t["pairs"].items()
                if p["ratio"] is not None
            ]
            if parts:
                L.append(f"- d = {t['d']} {t['problem'].upper()}: " + "; ".join(parts))
        if tables["approach"]:
            L += ["", "## The approach to the limit", ""]
            L += [f"- {n}" for n in tables["approach"]]
        L += ["", f"![tail]({figures['tail']})", ""]
        return "\n".join(L)

    def summary(self, tables):
        as_json = lambda row: None if row is None else row.to_json()
        table = [
            dict(
                t,
                top1=as_json(t["top1"]),
                tails={f"{r:g}": as_json(row) for r, row in t["tails"].items()},
                pairs={f"{r:g}": p for r, p in t["pairs"].items()},
                excess={f"{r:g}": e for r, e in t["excess"].items()},
            )
            for t in tables["table"]
        ]
        return dict(table=table, approach=tables["approach"])


def _limit(table, r) -> float:
    for t in table:
        row = t["tails"].get(r)
        if row is not None and row.get("theory_alpha_c") is not None:
            return row["theory_alpha_c"]
    return math.nan


register(Tail())
