"""Fixed-`p` sweeps (`jaxmem sweep`): ensembles of Adam runs (or the Hebbian rule) at a grid of
loads, P(all stored) against `p`, and a logistic estimate of the load where it crosses 1/2.
Presets: `default` (OP and DP at d = 16 and 24, ten loads, 16 seeds) and `quick` (d = 8, four
loads); `jaxmem sweep` runs a `SweepSpec` built from its options through the same study. Its page
is `sweep.md`, with the figure `sweep.png`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..._tasks import p_from_alpha
from ..._validate import InvalidArgument
from .._analysis import estimate, fmt
from .._figures import fig_sweep
from .._records import config_id
from .._study import AbstractStudy, by_kind, register
from .._units import Knobs, make_config


@dataclass
class SweepSpec:
    """A grid of fixed-`p` ensembles: every `d`, problem, model (and `kappa` of a factored one)
    at every load `alphas` (or every `p` of `ps`: exactly one of the two), with the training
    settings and seeds of `knobs`."""

    ds: list[int]
    problems: list[str] = field(default_factory=lambda: ["op"])
    models: list[str] = field(default_factory=lambda: ["full"])
    kappas: list[float] | None = None  # factored only; default 1
    alphas: list[float] | None = None
    ps: list[int] | None = None
    knobs: Knobs = Knobs()

    def configs(self) -> list[dict]:
        if (self.alphas is None) == (self.ps is None):
            raise InvalidArgument("give exactly one of alphas and ps")
        if self.kappas is not None and "factored" not in self.models:
            raise InvalidArgument(f"kappa applies to the factored model only, got kappa={self.kappas}")
        out, seen = [], set()
        for d in self.ds:
            ps = self.ps if self.ps is not None else [p_from_alpha(d, a) for a in self.alphas]
            for problem in self.problems:
                for model in self.models:
                    for kappa in (self.kappas or [1.0]) if model == "factored" else [None]:
                        for p in ps:
                            cfg = make_config(
                                d=d, p=p, problem=problem, model=model, kappa=kappa, knobs=self.knobs
                            )
                            if config_id(cfg) not in seen:
                                seen.add(config_id(cfg))
                                out.append(cfg)
        return out


def sweep_section(rows, figure: str, n: int) -> list[str]:
    """The sweep's table: per `(d, problem, model, kappa)` the logistic `alpha_c` with its
    bootstrap CI, whether the grid brackets the transition, and Gardner's `alpha_c(p_c)`."""
    L = [
        f"{n} fixed-p runs (`jaxmem sweep`). `alpha_c`: where a logistic fit of P(all stored) against "
        "ln p crosses 1/2, with a bootstrap 95% CI over runs; meaningful only where the grid brackets "
        "the transition (some loads below 1/2, some above).",
        "",
        "| d | problem | model | kappa | setup | runs | alpha_c | 95% CI | bracketed | alpha_c(p_c) theory |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        L.append(
            f"| {r['d']} | {r['problem'].upper()} | {r['model']} | {r['kappa']:.2f} | {r['setup']} | "
            f"{r['n_runs']} | "
            f"{fmt(r['alpha_c'])} | [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}] | "
            f"{'yes' if r['bracketed'] else 'no'} | {fmt(r.get('theory_alpha_c'))} |"
        )
    return L + ["", f"![sweep]({figure})", ""]


class Sweep(AbstractStudy):
    """Fixed-`p` sweeps (`SweepSpec`); its tables are the logistic estimates (`estimate`)."""

    name: ClassVar[str] = "sweep"
    title: ClassVar[str] = "fixed-p ensembles over a grid of loads, with a logistic estimate"
    presets: ClassVar[dict] = dict(
        default=SweepSpec(
            ds=[16, 24],
            problems=["op", "dp"],
            alphas=[0.3 + 0.1 * i for i in range(10)],
            knobs=Knobs(seeds=16),
        ),
        quick=SweepSpec(ds=[8], alphas=[0.4, 0.9, 1.4, 1.9], knobs=Knobs(seeds=4, steps=300)),
    )

    def units(self, spec: SweepSpec) -> list[dict]:
        return spec.configs()

    def claims(self, records: list[dict]) -> bool:
        return bool(by_kind(records)[2])

    def tables(self, records: list[dict]):
        sweep = by_kind(records)[2]
        return dict(rows=estimate(sweep), runs=len(sweep)) if sweep else None

    def figures(self, tables, out: str) -> dict:
        return dict(sweep=fig_sweep(tables["rows"], out))

    def report(self, tables, figures, out: str) -> str:
        L = ["# jaxmem sweep report", ""] + sweep_section(tables["rows"], figures["sweep"], tables["runs"])
        return "\n".join(L)


register(Sweep())
