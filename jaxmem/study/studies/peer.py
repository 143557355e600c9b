"""A peer's protocol (Nichani, Lee and Bietti, ICLR 2025): unit-norm Gaussian embeddings, a
bias-free `d x d` map trained by Adam on the softmax cross-entropy over all `N` targets, stopped
at training accuracy 0.99, and a per-seed search on `N` up to `d^2 / 2`; beside it, on the same
nested tasks, the certified all-stored capacity and Adam with the all-stored criterion. Presets:
`default` (their grid up to d = 32, 8 seeds, learning rates 0.5 and 5) and `quick`. Its page is
`peer.md`, with `peer.json` and the figure `peer.png`.

Their notebook uses five seeds; five cannot give a 95% interval for a median (the widest covers
it with probability `1 - 2/2^5 = 0.94`), so the presets use at least 8 (jaxmem's seeds `0..n-1`,
its own nested tasks)."""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx

from ..._tasks import p_from_alpha
from ..._validate import check_int, check_real
from ...solvers._adam import TrainConfig
from .._analysis import fmt, threshold_rows
from .._figures import fig_peer_study
from .._stats import judge, Verdict
from .._study import AbstractStudy, by_kind, register
from .._units import point_configs


class PeerSpec(eqx.Module):
    """The peer protocol's grid.

    **Arguments:**

    - `ds`: the dimensions; `seeds`: seeds per `d` (one unit of work each).
    - `lrs`: Adam's learning rates; `accuracies`: the training accuracies at which a run counts
      as stored (0.99 theirs, 1.0 all stored); `steps`: Adam's budget.
    """

    ds: tuple
    seeds: int = 8
    lrs: tuple = (0.5, 5.0)
    accuracies: tuple = (0.99, 1.0)
    steps: int = 5000

    def __check_init__(self):
        for d in self.ds:
            check_int("ds", d, 2)
        check_int("seeds", self.seeds, 1)
        for lr in self.lrs:
            check_real("lrs", lr, low=0.0, low_open=True)
        for a in self.accuracies:
            check_real("accuracies", a, low=0.0, low_open=True, high=1.0)
        check_int("steps", self.steps, 1)


# their grid up to d = 32 (7 min 20 s on the 2-core machine; docs/results/peer.md)
PEER = PeerSpec(ds=(8, 11, 16, 22, 32))
# the same path in about a minute
PEER_QUICK = PeerSpec(ds=(8,), seeds=4, lrs=(5.0,), steps=2000)


def peer_points(spec: PeerSpec) -> list[dict]:
    """Per `d`: the certified all-stored thresholds of the unit-norm tasks, then Adam at each
    learning rate and accuracy, on the same tasks."""
    units = []
    for d in spec.ds:
        kw = dict(d=d, problem="op", seeds=spec.seeds, group=spec.seeds, embedding="unit")
        units += point_configs(**kw)
        for lr in spec.lrs:
            for acc in spec.accuracies:
                cfg = TrainConfig(steps=spec.steps, lr=lr, accuracy=acc)
                units += point_configs(solver="adam", adam_config=cfg, **kw)
    return units


def _run_label(row) -> str:
    if row["solver"] == "certified":
        return "certified, all stored"
    crit = row.get("criterion", 1.0)
    what = "all stored" if crit == 1.0 else f"accuracy {crit:g}"
    return f"Adam lr {row['settings']['adam.lr']:g}, {what}"


def peer_table(rows) -> dict:
    """The unit-norm rows by run and `d`: `runs` (labels, certified first), `cells[(run, d)]`
    the row, `guide[d]` the `N` of their guide line `d^2 = 1.3 N ln N`."""
    sel = [
        r
        for r in rows
        if r["embedding"] == "unit" and r["model"] == "full" and r["solver"] in ("certified", "adam")
    ]
    runs = sorted({_run_label(r) for r in sel}, key=lambda s: (not s.startswith("certified"), s))
    ds = sorted({r["d"] for r in sel})
    cells = {(_run_label(r), r["d"]): r for r in sel}
    return dict(runs=runs, ds=ds, cells=cells, guide={d: float(p_from_alpha(d, 1 / 1.3)) for d in ds})


class Peer(AbstractStudy):
    """The peer protocol (`PeerSpec`)."""

    name: ClassVar[str] = "peer"
    title: ClassVar[str] = (
        "a peer's protocol: Adam to accuracy 0.99 on unit-norm embeddings, beside certified"
    )
    presets: ClassVar[dict] = dict(default=PEER, quick=PEER_QUICK)

    def units(self, spec: PeerSpec) -> list[dict]:
        return peer_points(spec)

    def tables(self, records: list[dict]):
        thr, _, _ = by_kind(records)
        table = peer_table(threshold_rows(thr))
        return table if table["runs"] else None

    def figures(self, table, out: str) -> dict:
        return dict(peer=fig_peer_study(table, out))

    def report(self, table, figures, out: str) -> str:
        runs, ds, cells, guide = table["runs"], table["ds"], table["cells"], table["guide"]

        def cell(run, d):
            r = cells.get((run, d))
            if r is None:
                return "—"
            return f"{fmt(r['p_c'], 1)} [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]"

        L = [
            "# A peer's protocol: unit-norm embeddings, accuracy 0.99 against all stored",
            "",
            f"Records in `{out}/records/`. Nichani, Lee and Bietti's linear associative memory: unit-norm "
            "Gaussian embeddings, a bias-free `d x d` map, softmax cross-entropy over all `N` targets (a "
            "stable log-softmax), Adam stopped at the training accuracy of each run, a per-seed search on "
            "`N` up to `d^2 / 2`; beside it the certified all-stored capacity of the same tasks. Each cell: "
            "the median `N` over seeds, with the distribution-free 95% CI of `alpha = N ln N / d^2`. Below "
            "`N = 100` an accuracy of 0.99 means all `N` stored.",
            "",
            "| d | " + " | ".join(runs) + " | guide `d^2 = 1.3 N ln N` |",
            "|---|" + "---|" * len(runs) + "---|",
        ]
        for d in ds:
            L.append(f"| {d} | " + " | ".join(cell(run, d) for run in runs) + f" | {guide[d]:.0f} |")
        cert = {d: cells.get(("certified, all stored", d)) for d in ds}
        below = []
        for d, r in cert.items():
            v = judge(None, None) if r is None else judge(r["ci_low"], r["ci_high"], 1 / 1.3)
            if v is Verdict.NO_CI:
                below.append(f"d={d} undecided (no CI)")
            else:
                below.append(f"d={d} {'yes' if v is Verdict.ABOVE else 'no'}")
        L += [
            "",
            "Is the guide line (the load `1/1.3 = 0.77`) below the certified all-stored CI? "
            + ", ".join(below)
            + ".",
            "",
            f"![peer]({figures['peer']})",
            "",
        ]
        return "\n".join(L)

    def summary(self, table):
        return dict(
            runs=table["runs"],
            rows=[
                dict(run=run, d=d, row=table["cells"][(run, d)].to_json())
                for run in table["runs"]
                for d in table["ds"]
                if (run, d) in table["cells"]
            ],
            guide={str(d): n for d, n in table["guide"].items()},
        )


register(Peer())
