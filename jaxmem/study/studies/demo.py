"""The capacity study of `jaxmem demo`: certified capacities of the OP and the DP, Adam and the
Hebbian rule on the same nested tasks, rank-constrained memories, the max-margin memories of the
spectra and scores, and a peer's protocol; presets `default` (CPU sized, `DEMO`), `quick` and
`paper` (accelerator sized). Its page is `report.md`, with the figures of `FIGURES` that have
data. Any folder of threshold records can be reported this way (the generic study)."""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax

from ..._models import rank_of
from ..._validate import check_int, check_real, InvalidArgument
from ...solvers._adam import TrainConfig
from ...solvers._decide import DecideConfig
from .._analysis import threshold_rows, transition_theory
from .._figures import FIGURES
from .._panels import panels
from .._records import config_id, KIND, MARGIN_KIND, where
from .._report import capacity_page
from .._spec import seed_pairs
from .._study import AbstractStudy, by_kind, register
from .._units import point_configs


class StudySpec(eqx.Module):
    """What a study measures.

    **Arguments:**

    - `certified`: `(d, seeds)` pairs: certified capacity of the OP and the DP.
    - `adam`: `(d, seeds)` pairs: Adam (the paper's protocol, `steps`, `lr`) on the same nested
      OP tasks, seeds `0..seeds-1` (a subset of the certified ones).
    - `hebbian`: `(d, seeds)` pairs: the Hebbian rule's all-stored threshold (OP).
    - `factored_d`, `kappas`, `factored_seeds`, `factored_adam_seeds`: rank-constrained memories
      `W = Q R^T` (certified lower bound, and Adam) at one `d` (0: none); `factored_max_iter`: the
      iteration budget of a rank-`m` decision's rank phase (`DecideConfig.rank_max_iter`; an
      undecided instance lowers the bound, never raises it).
    - `spectra_seeds`: max-margin memories at `factored_d` for the spectra and scores (OP, DP,
      and the factored memory at `spectra_kappa`), at each seed's certified threshold.
    - `peer`, `peer_seeds`, `peer_lr`: Nichani, Lee and Bietti's protocol (unit-norm embeddings,
      Adam to training accuracy 0.99) and the certified all-stored capacity of the same tasks.
    - `group`: seeds per unit of work.
    """

    certified: tuple
    adam: tuple
    hebbian: tuple
    factored_d: int
    kappas: tuple
    factored_seeds: int
    factored_adam_seeds: int
    spectra_seeds: int
    spectra_kappa: float
    peer: tuple
    peer_seeds: int
    peer_lr: float = 5.0
    factored_max_iter: int = DecideConfig().rank_max_iter
    steps: int = 5000
    lr: float = 3e-2
    group: int = 16

    def __check_init__(self):
        for name in ("certified", "adam", "hebbian"):
            seed_pairs(name, getattr(self, name))
        check_int("factored_d", self.factored_d, 0)
        if self.factored_d == 1:
            raise InvalidArgument("factored_d must be 0 (none) or at least 2, got 1")
        for k in self.kappas:
            check_real("kappas", k, low=0.0, low_open=True, high=1.0)
        check_real("spectra_kappa", self.spectra_kappa, low=0.0, low_open=True, high=1.0)
        check_int("factored_max_iter", self.factored_max_iter, 1)
        for name in ("factored_seeds", "factored_adam_seeds", "spectra_seeds", "peer_seeds", "steps"):
            check_int(name, getattr(self, name), 0)
        for d in self.peer:
            check_int("peer d", d, 2)
        check_real("peer_lr", self.peer_lr, low=0.0, low_open=True)
        check_real("lr", self.lr, low=0.0, low_open=True)
        check_int("group", self.group, 1)


# The CPU study of `jaxmem demo` (seeds chosen for 95% CIs no wider than 0.03 in alpha: at
# d = 16 the threshold is discrete in steps of 0.02, so the DP needs 160 seeds for one step).
DEMO = StudySpec(
    certified=((16, 160), (24, 64), (32, 48), (48, 16)),
    adam=((16, 8), (24, 8), (32, 8)),
    hebbian=((16, 256), (24, 256), (32, 256), (48, 128), (64, 128), (96, 64), (128, 64)),
    factored_d=16,
    kappas=(0.25, 0.5, 0.75),
    factored_seeds=8,
    factored_adam_seeds=4,
    spectra_seeds=6,
    spectra_kappa=0.5,
    peer=(8, 16),
    peer_seeds=8,
    factored_max_iter=500,
)


# The accelerator study of `scripts/reproduce_paper.py`.
PAPER = StudySpec(
    certified=(
        (16, 256),
        (24, 128),
        (32, 128),
        (48, 64),
        (64, 64),
        (96, 64),
        (128, 64),
        (192, 64),
        (256, 64),
    ),
    adam=((16, 64), (24, 64), (32, 64), (48, 64), (64, 64), (128, 64)),
    hebbian=tuple((d, 1024) for d in (16, 24, 32, 48, 64, 96, 128, 192, 256)),
    factored_d=32,
    kappas=(0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875),
    factored_seeds=64,
    factored_adam_seeds=32,
    spectra_seeds=32,
    spectra_kappa=0.5,
    peer=(8, 11, 16, 22, 32, 45, 64),
    peer_seeds=16,
)


# A minutes-long CPU check of the same path (`reproduce_paper.py --quick`, and the tests).
QUICK = StudySpec(
    certified=((8, 16), (12, 16)),
    adam=((8, 8),),
    hebbian=((8, 64), (16, 64)),
    factored_d=8,
    kappas=(0.5,),
    factored_seeds=8,
    factored_adam_seeds=4,
    spectra_seeds=4,
    spectra_kappa=0.5,
    peer=(8,),
    peer_seeds=4,
    steps=2000,
)


def study_points(spec: StudySpec) -> list[dict]:
    """The threshold units of work of a study (`point_configs` of every point)."""
    adam = TrainConfig(steps=spec.steps, lr=spec.lr)
    peer = TrainConfig(steps=spec.steps, lr=spec.peer_lr, accuracy=0.99)
    pc = lambda **kw: point_configs(group=spec.group, **kw)
    units = []
    for d, n in spec.certified:
        for problem in ("op", "dp"):
            units += pc(d=d, problem=problem, seeds=n)
    for d, n in spec.adam:
        units += pc(d=d, problem="op", seeds=n, solver="adam", adam_config=adam)
    for d, n in spec.hebbian:
        units += point_configs(d=d, problem="op", seeds=n, solver="hebbian", group=n)
    if spec.factored_d:
        d = spec.factored_d
        if d not in [c for c, _ in spec.certified]:
            units += pc(d=d, problem="op", seeds=spec.factored_seeds)
        for k in spec.kappas:
            kw = dict(d=d, problem="op", model="factored", kappa=k)
            dcfg = DecideConfig(rank_max_iter=spec.factored_max_iter)
            units += pc(seeds=spec.factored_seeds, decide_config=dcfg, **kw)
            if spec.factored_adam_seeds:
                units += pc(seeds=spec.factored_adam_seeds, solver="adam", adam_config=adam, **kw)
    for d in spec.peer:
        units += pc(d=d, problem="op", seeds=spec.peer_seeds, embedding="unit")
        units += pc(
            d=d, problem="op", seeds=spec.peer_seeds, embedding="unit", solver="adam", adam_config=peer
        )
    seen, out = set(), []
    for u in units:  # a point listed twice is run once
        if config_id(u) not in seen:
            seen.add(config_id(u))
            out.append(u)
    return out


# the max-margin units' certified gap and rank alternations (MaxMarginConfig)
MARGIN_GAP = 1e-2
MARGIN_ROUNDS = 10


def margin_configs(spec: StudySpec, records: list[dict]) -> list[dict]:
    """The max-margin units of a study: at `factored_d`, OP and DP full rank and the factored
    OP at `spectra_kappa`, for the first `spectra_seeds` seeds, each at its certified threshold
    `p*` (read from `records`, so the unit says exactly which `p` it solved)."""
    if not spec.factored_d or not spec.spectra_seeds:
        return []
    d = spec.factored_d
    kappa = rank_of(d, kappa=spec.spectra_kappa) / d
    out = []
    for problem, model, k in (("op", "full", 1.0), ("dp", "full", 1.0), ("op", "factored", kappa)):
        thr = {
            r["seed"]: r
            for r in where(
                records, d=d, problem=problem, model=model, kappa=k, solver="certified", embedding="gaussian"
            )
        }
        n = 0  # seeds 0..n-1, each with its threshold
        while n < spec.spectra_seeds and n in thr and thr[n]["p_star"] >= 2:
            n += 1
        if not n:
            continue
        out.append(
            dict(
                kind=MARGIN_KIND,
                d=d,
                problem=problem,
                model=model,
                kappa=k,
                seed0=thr[0]["config"]["seed0"],
                embedding="gaussian",
                seeds=[0, n],
                p=[thr[s]["p_star"] for s in range(n)],
                gap=MARGIN_GAP,
                rank_rounds=MARGIN_ROUNDS,
            )
        )
    return out


class Demo(AbstractStudy):
    """The capacity study (`StudySpec`): its units, then the max-margin memories at each seed's
    certified threshold; its page `report.md` (`capacity_page`)."""

    name: ClassVar[str] = "demo"
    title: ClassVar[str] = (
        "the capacity study: certified, Adam, Hebbian, rank, spectra, scores, a peer's protocol"
    )
    presets: ClassVar[dict] = dict(default=DEMO, quick=QUICK, paper=PAPER)
    page: ClassVar[str] = "report"
    generic: ClassVar[bool] = True

    def units(self, spec: StudySpec) -> list[dict]:
        return study_points(spec)

    def later_units(self, spec: StudySpec, records: list[dict]) -> list[dict]:
        return margin_configs(spec, [r for r in records if r.get("kind") == KIND])

    def tables(self, records: list[dict]):
        thr, margins, _ = by_kind(records)
        if not thr:
            return None
        rows = threshold_rows(thr)
        loads = transition_theory(rows)
        data = panels(thr, rows, margins, loads, jax.random.key(0))
        return dict(records=thr, margins=margins, rows=rows, loads=loads, data=data)

    def figures(self, tables, out: str) -> dict:
        data = tables["data"]
        return {f.key: f.draw(data, out) for f in FIGURES if f.has(data)}

    def report(self, tables, figures, out: str) -> str:
        return capacity_page(tables, figures, out)

    def summary(self, tables):
        return None


register(Demo())
