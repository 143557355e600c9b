"""`jaxmem study`, `demo`, `sweep`, `capacity` and `report`: studies that write a folder, and the
read-only commands that summarise one."""

from __future__ import annotations

import json
import os
import sys
import time

from ._args import (
    ArgumentError,
    criterion_arg,
    grid,
    integer,
    parse_shard,
    print_json,
    progress,
    real,
    working,
    writable_folder,
)
from .train import add_train_knobs, train_knobs


def _print_table(rows, cols, file=sys.stdout):
    """One line per row; `cols` are `(header, width, row -> text)`, right-aligned, except the
    last (left-aligned); a negative width right-aligns the header only."""
    head = [h.rjust(abs(w)) for h, w, _ in cols[:-1]]
    print(" ".join(head) + "  " + cols[-1][0], file=file)
    for r in rows:
        cells = [f(r).rjust(max(w, 0)) for _, w, f in cols]
        print(" ".join(cells[:-1]) + "  " + cells[-1], file=file)


def _fmt(x, nd=3):
    from ..study import fmt

    return fmt(x, nd)


def _ci(r):
    return f"[{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]"


_HEAD = [
    ("d", 4, lambda r: str(r["d"])),
    ("problem", 7, lambda r: r["problem"]),
    ("model", 9, lambda r: r["model"]),
    ("kappa", 5, lambda r: f"{r['kappa']:.2f}"),
]
_TAIL = [
    ("p_c", 8, lambda r: _fmt(r["p_c"], 1)),
    ("alpha_c", 8, lambda r: _fmt(r["alpha_c"])),
    ("95% CI", -17, _ci),
    ("theory", 7, lambda r: _fmt(r.get("theory_alpha_c"))),
]


def print_rows(rows, file=sys.stdout):
    """The rows of a folder of sweep records (logistic estimates)."""
    from ..study import theory_verdict

    _print_table(
        rows, _HEAD + [("setup", 20, lambda r: r["setup"])] + _TAIL + [("verdict", 0, theory_verdict)], file
    )


def _print_threshold_rows(rows, file=sys.stdout):
    """The rows of threshold measurements (certified, Adam, Hebbian)."""
    from ..study import setup

    extra = [
        ("solver", 9, lambda r: r["solver"]),
        ("seeds", 5, lambda r: str(r["seeds"])),
        ("setup", 30, setup),
    ]
    undecided = [("undecided", 9, lambda r: str(r["undecided"]))]
    if any("rebound" in r for r in rows):
        # seeds whose storability came back above an unstorable p (a non-monotone criterion)
        undecided.append(("rebound", 7, lambda r: str(r.get("rebound", "—"))))
    verdict = [("verdict", 0, lambda r: r.get("theory_verdict", ""))]
    _print_table(rows, _HEAD + extra + _TAIL + undecided + verdict, file)
    from ..study import gap_note

    for r in rows:
        if r.get("lower_bound"):
            print(gap_note(r), file=file)


def _knobs(a):
    from ..study import Knobs

    return Knobs(seeds=a.seeds, seed0=a.seed0, embedding=a.embedding, **train_knobs(a))


def _existing_folder(path: str) -> str:
    if not os.path.isdir(path):
        raise ArgumentError(f"argument dir: no such folder: {path!r}")
    return path


def _print_plan(
    a, units: list[dict], shard: tuple[int, int], *, head: dict | None = None, tail: str = ""
) -> None:
    """The number of units of work, and where a shard is given, how many of them it runs
    (what an array job sizes its tasks by); with `--json` one object (`head` first), else one
    line (`tail` after the count)."""
    from ..study import distinct_units, shard_units

    total, (i, n) = len(distinct_units(units)), shard
    mine = len(shard_units(units, shard))
    if a.json:
        counts = dict(units=total) if n == 1 else dict(units=total, shard=f"{i}/{n}", shard_units=mine)
        print(json.dumps(dict(head or {}, **counts)))
    else:
        print(f"{total} units of work{tail}" + ("" if n == 1 else f"; shard {i}/{n} runs {mine} of them"))


def _cmd_sweep(a):
    from ..study import run, Store, STUDIES, SweepSpec

    i, n = parse_shard(a.shard)
    spec = SweepSpec(
        ds=a.d,
        problems=a.problem,
        models=a.model,
        kappas=a.kappa,
        alphas=grid("--alpha", a.alpha, integral=False, low=0.0) if a.alpha else None,
        ps=[int(x) for x in grid("--p", a.p, integral=True, low=2)] if a.p else None,
        knobs=_knobs(a),
    )
    cfgs = spec.configs()  # validates every config before anything is written
    writable_folder("--out", a.out)
    if a.plan:
        _print_plan(a, cfgs, (i, n))
        return
    store = Store(a.out)
    store.note_command(sys.argv)
    run(STUDIES["sweep"], spec, a.out, shard=(i, n), log=progress(a))
    if a.json:
        print_json(dict(out=a.out, configs=len(cfgs[i::n]), records=len(store.records())))


def _measurement_points(a) -> list[dict]:
    from ..solvers._adam import TrainConfig
    from ..solvers._decide import DecideConfig
    from ..study import distinct_units, point_configs

    if a.model == "factored" and not a.kappa:
        raise ArgumentError("argument --kappa: required with --model factored")
    tail = isinstance(a.criterion, str)
    if not tail and a.criterion != 1.0 and "certified" in a.solver:
        raise ArgumentError("argument --criterion: an accuracy criterion needs --solver adam")
    if tail and (a.solver != ["certified"] or a.model != "full"):
        raise ArgumentError(
            "argument --criterion: the tail average is measured with --solver certified --model full"
        )
    dcfg = DecideConfig(tol=a.tol, decider=a.decider, warm_start=a.warm_start)
    accuracy = 1.0 if tail else a.criterion
    acfg = TrainConfig(steps=a.steps, lr=a.lr, init_scale=a.init_scale, accuracy=accuracy)
    units = []
    common = dict(
        seeds=a.seeds,
        seed0=a.seed0,
        group=a.group,
        embedding=a.embedding,
        decide_config=dcfg,
        resolution=a.resolution,
        criterion=a.criterion if tail else "all",
    )
    for d in a.d:
        for problem in a.problem:
            if a.model == "factored" and "certified" in a.solver:
                # the certified full-rank threshold of each task bounds its rank-m threshold from
                # above: with it, a lower-bound row says how wide each seed's uncertified gap is
                units += point_configs(d=d, problem=problem, **common)
            for kappa in a.kappa or [None]:
                for solver in a.solver:
                    units += point_configs(
                        d=d,
                        problem=problem,
                        model=a.model,
                        kappa=kappa,
                        solver=solver,
                        adam_config=acfg,
                        **common,
                    )
    return distinct_units(units)


def _cmd_capacity(a):
    from ..study import measure, read_tables, Store, tables_of

    if (a.dir is None) == (a.d is None):
        raise ArgumentError(
            "argument dir: give a folder to read, or --d to measure (with --out DIR to keep the records)"
        )
    if a.json and a.csv:
        raise ArgumentError("argument --csv: not allowed with --json (one format at a time)")
    if a.dir is not None:
        given = [f"--{k.replace('_', '-')}" for k, v in a.measuring.items() if getattr(a, k) != v]
        if given:
            raise ArgumentError(
                f"argument {given[0]}: a measurement option, but dir only reads "
                "a folder's records (give --d to measure)"
            )
        _existing_folder(a.dir)
        tables = read_tables(a.dir, log=progress(a))
    else:
        shard = parse_shard(a.shard)
        units = _measurement_points(a)
        if a.out:
            writable_folder("--out", a.out)
        if a.plan:
            _print_plan(a, units, shard)
            return
        store = Store(a.out) if a.out else None
        if store is not None:
            store.note_command(sys.argv)
        tables = tables_of(measure(units, store=store, shard=shard, log=progress(a)))
    if a.json:
        print_json(tables.to_json())
        return
    if a.csv:
        _print_csv(tables.flat_rows())
        return
    rows = [r for r in tables.rows if r["kind"] == "threshold"]
    if rows:
        _print_threshold_rows(rows)
    for c in tables.op_vs_dp:
        tail = (
            ""
            if c["verdict"] == "differ"
            else f" (about {c['seeds_to_decide']} seeds per side would decide it)"
        )
        at = f" ({c['setup']})" if c["setup"] else ""
        print(
            f"OP - DP ({c['solver']}, {c['embedding']}) at d={c['d']}{at}: {c['diff']:+.4f} "
            f"[{c['ci_low']:+.4f}, {c['ci_high']:+.4f}]: {c['verdict']}{tail}"
        )
    avc = tables.adam_vs_certified
    for c in avc:
        print(
            f"adam vs certified at {_label(c, avc)}: {c['fraction_below']:.2f} of "
            f"seeds below, capacity lost {c['lost']:+.4f}"
        )
    sweep_rows = [r for r in tables.rows if r["kind"] == "sweep"]
    if sweep_rows:
        print_rows(sweep_rows)


def _print_csv(rows: list[dict]) -> None:
    """Rows as CSV on stdout, one header of every column any row has."""
    import csv

    cols = list(dict.fromkeys(k for r in rows for k in r))
    w = csv.DictWriter(sys.stdout, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)


def _label(row: dict, rows: list[dict]) -> str:
    """`d=.. problem model`, then every other setting whose value differs among `rows` (the
    rank fraction always for a factored memory): each line tells itself apart from the rest."""
    varies = lambda k: len({json.dumps(r.get(k), sort_keys=True) for r in rows}) > 1
    words = [f"d={row['d']}", row["problem"], row["model"]]
    if row["model"] == "factored" or varies("kappa"):
        words.append(f"kappa={row['kappa']:g}")
    words += [f"{k}={row[k]}" for k in ("embedding", "seed0") if varies(k)]
    return " ".join(words)


def _cmd_report(a):
    from ..study import by_kind, estimate, InvalidArgument, public, Store, studies_of, threshold_rows, write

    _existing_folder(a.dir)
    records = Store(a.dir).records()
    try:
        studies = studies_of(a.dir, records)
    except InvalidArgument as e:
        raise ArgumentError(f"argument dir: {e}") from None
    paths = []
    with working(a, f"jaxmem report: reading {a.dir!r} and drawing its figures"):
        for study in studies:
            paths.append(write(study, a.dir, records)[0])
    if a.json:
        thr, _, sweep = by_kind(records)
        rows = public(threshold_rows(thr)) if thr else public(estimate(sweep))
        print_json(
            dict(out=a.dir, report=paths[0], reports=paths, studies=[s.name for s in studies], rows=rows)
        )
    else:
        for path in paths:
            print(f"report: {path}")


def _cmd_study(a):
    """`jaxmem study NAME`: a preset of a registered study into `--out` (resumable, by shards
    and worker processes), then its report once every unit is done; `--plan` lists the units,
    `--report DIR` writes the preset's report from a folder that holds more."""
    from ..study import (
        check_jobs,
        copy_report,
        default_jobs,
        InvalidArgument,
        preset_of,
        public,
        run,
        Store,
        study_of,
        write,
    )

    study = study_of(a.name)
    spec = preset_of(study, a.preset)
    shard = parse_shard(a.shard)
    out = a.out or f"jaxmem-{study.name}"
    if a.plan:
        if a.report:
            raise ArgumentError("argument --report: not with --plan")
        _print_study_plan(a, study, spec, shard)
        return
    if a.report:
        _existing_folder(out)
        writable_folder("--report", a.report)
        try:
            path, units, seconds = copy_report(study, spec, out, a.report)
        except InvalidArgument as e:
            raise ArgumentError(f"argument --report: {e}") from None
        if a.json:
            print_json(dict(study=study.name, out=a.report, report=path, units=units))
        else:
            print(f"report: {path}   ({units} units, {seconds:.0f} s of search in their records)")
        return
    jobs = check_jobs(a.jobs or default_jobs())  # before anything is written
    writable_folder("--out", out)
    t0 = time.perf_counter()
    Store(out).note_command(sys.argv)
    done = run(study, spec, out, shard=shard, jobs=jobs, log=progress(a))
    path, tables = (None, None) if done["left"] else write(study, out)
    seconds = time.perf_counter() - t0
    if a.json:
        extra = dict(rows=public(tables["rows"])) if study.name == "demo" and tables else {}
        print_json(
            dict(
                study=study.name,
                out=out,
                report=path,
                units=done["units"],
                left=done["left"],
                seconds=seconds,
                **extra,
            )
        )
        return
    if done["left"]:
        print(
            f"{done['left']} of {done['units']} units left (other shards); "
            "the report is written once all are done"
        )
        return
    if study.name == "demo":
        _print_threshold_rows(tables["rows"])
        print()
    print(f"report: {path}   ({seconds:.0f} s)")


def _print_study_plan(a, study, spec, shard) -> None:
    """The units of work of a preset (one JSON line each for this shard, unless `--json`), then
    their count (`_print_plan`)."""
    from ..study import AbstractStudy, plan

    units, mine = plan(study, spec, shard)
    if not a.json:
        fields = ("kind", "d", "problem", "model", "kappa", "solver", "seeds", "p")
        for u in mine:
            print(json.dumps({f: u[f] for f in fields if f in u}))
    later = type(study).later_units is not AbstractStudy.later_units
    tail = " (then the units that depend on them)" if later else ""
    _print_plan(a, units, shard, head=dict(study=study.name), tail=tail)


def _cmd_demo(a):
    """`jaxmem demo`: the short name of `jaxmem study demo` (`--quick`: its preset `quick`)."""
    a.name, a.preset, a.shard, a.plan, a.report = "demo", "quick" if a.quick else None, None, False, None
    _cmd_study(a)


_SWEEP_EXAMPLES = """examples:
  jaxmem sweep --d 24 32 --alpha 0.3:1.2:10 --problem op dp --seeds 16 --out runs/a
  jaxmem sweep --d 32 --p 100 150 200 --model factored --kappa 0.5 --out runs/b --shard 0/2"""
_CAPACITY_EXAMPLES = """examples:
  jaxmem capacity --d 16 --seeds 8                           certified OP capacity, 8 seeds
  jaxmem capacity --d 32 48 --problem op dp --out runs/c     keep the records (resumable)
  jaxmem capacity --d 16 --solver certified adam             Adam against certified, seed by seed
  jaxmem capacity --d 32 --model factored --kappa 0.5        a certified rank-16 lower bound
  jaxmem capacity runs/c --csv > rows.csv                    a folder's rows as CSV"""


def add_commands(sub) -> None:
    from .._names import (
        DECIDER_NAMES,
        EMBEDDINGS,
        MAX_TOL,
        MEMORY_NAMES as MEMORIES,
        MODELS,
        PROBLEMS,
        SOLVER_NAMES as SOLVERS,
    )

    kappa = real(0.0, 1.0, low_open=True)
    sw = sub.add_parser(
        "sweep",
        help="run a resumable sweep into an output folder",
        description="Fixed-p ensembles over a grid of loads: P(all stored) against p, "
        "with a logistic estimate.",
        epilog=_SWEEP_EXAMPLES,
    )
    sw.add_argument("--d", type=integer(2), nargs="+", required=True, help="dimensions")
    g = sw.add_mutually_exclusive_group(required=True)
    g.add_argument("--alpha", nargs="+", help="START:STOP:N or a list of loads")
    g.add_argument("--p", nargs="+", help="START:STOP:N or a list of p")
    sw.add_argument("--problem", nargs="+", default=["op"], choices=list(PROBLEMS), help="problems")
    sw.add_argument("--model", nargs="+", default=["full"], choices=list(MODELS), help="memories")
    sw.add_argument("--kappa", type=kappa, nargs="+", default=None, help="rank fractions (factored only)")
    add_train_knobs(sw)
    sw.add_argument("--shard", default=None, help="i/n: run every n-th config from the i-th (multi-host)")
    sw.add_argument("--plan", action="store_true", help="print the number of units of work and stop")
    sw.add_argument("--out", required=True, help="the folder of records (created; resumed if it exists)")
    sw.set_defaults(func=_cmd_sweep)

    c = sub.add_parser(
        "capacity",
        help="measure certified (or Adam) capacities, or read a folder's records",
        description="Per seed, the largest p at which some memory stores all p associations, decided with "
        "certificates; per point, the median capacity with its distribution-free 95% CI.",
        epilog=_CAPACITY_EXAMPLES,
    )
    c.add_argument(
        "dir", nargs="?", default=None, help="a folder of records to read (sweeps or measurements)"
    )
    c.add_argument("--d", type=integer(2), nargs="+", default=None, help="measure at these dimensions")
    c.add_argument("--problem", nargs="+", default=["op"], choices=list(PROBLEMS), help="problems")
    c.add_argument(
        "--model",
        default="full",
        choices=list(MEMORIES),
        help="factored: W = Q R^T of rank kappa d, certified as a lower bound, measured with the "
        "certified full-rank thresholds of the same tasks (each seed's uncertified gap)",
    )
    c.add_argument("--kappa", type=kappa, nargs="+", default=None, help="rank fractions (factored only)")
    c.add_argument(
        "--solver",
        nargs="+",
        default=["certified"],
        choices=list(SOLVERS),
        help="certified: exact decisions; adam: the paper's protocol; hebbian: the rule",
    )
    c.add_argument("--seeds", type=integer(1, 1_000_000), default=64, help="seeds per point")
    c.add_argument("--seed0", type=integer(0, 2**31 - 1), default=0, help="the first seed")
    c.add_argument("--group", type=integer(1), default=16, help="seeds per unit of work (one record file)")
    c.add_argument(
        "--embedding", default="gaussian", choices=list(EMBEDDINGS), help="how inputs and targets are drawn"
    )
    c.add_argument(
        "--tol",
        type=real(0.0, MAX_TOL, low_open=True),
        default=1e-5,
        help=f"tolerance of the unstorable certificate (at most {MAX_TOL:g}: above, thresholds drop)",
    )
    c.add_argument(
        "--decider",
        default="auto",
        help=f"the certified decider: {', '.join(DECIDER_NAMES)} (or any registered one; auto: the "
        "working set from d = 128 for the OP, 64 for the DP)",
    )
    c.add_argument(
        "--warm-start",
        action="store_true",
        help="start each certified decision from the best multiple of the seed's last storable memory",
    )
    c.add_argument(
        "--resolution",
        type=integer(1),
        default=None,
        help="stop a seed's search once its bracket holds this many values of p (1: exact; default: "
        "the largest within 1e-3 in alpha, 1 up to d = 128)",
    )
    c.add_argument("--steps", type=integer(0), default=5000, help="Adam step budget")
    c.add_argument("--lr", type=real(0.0, low_open=True), default=3e-2, help="Adam learning rate")
    c.add_argument("--init-scale", type=real(0.0, low_open=True), default=1e-3, help="Adam's initial scale")
    c.add_argument(
        "--criterion",
        type=criterion_arg,
        default=1.0,
        help="what counts as stored: all (every target above all its competitors), accuracy:X (Adam's: "
        "a fraction X of them) or tail:r (every target above the mean of its ceil(r (p-1)) best "
        "competitors; certified, full rank; load p/d^2)",
    )
    c.add_argument("--out", default=None, help="keep the records here (resumable); default: keep nothing")
    c.add_argument("--shard", default=None, help="i/n: run every n-th unit of work from the i-th")
    c.add_argument("--plan", action="store_true", help="print the number of units of work and stop")
    c.add_argument(
        "--csv", action="store_true", help="print the rows as CSV (every column, settings included)"
    )
    measuring = (
        "problem",
        "model",
        "kappa",
        "solver",
        "seeds",
        "seed0",
        "group",
        "embedding",
        "tol",
        "decider",
        "resolution",
        "steps",
        "lr",
        "init_scale",
        "criterion",
        "out",
        "shard",
        "plan",
    )
    c.set_defaults(func=_cmd_capacity, measuring={k: c.get_default(k) for k in measuring})

    r = sub.add_parser(
        "report",
        help="figures and report.md from a study folder (reads records only)",
        epilog="examples:\n  jaxmem report jaxmem-demo\n  jaxmem report runs/a --json",
    )
    r.add_argument("dir", help="a folder jaxmem wrote (its records are read, never changed)")
    r.set_defaults(func=_cmd_report)

    _add_study(sub)

    d = sub.add_parser(
        "demo",
        help="the main job: the CPU-sized capacity study and its report",
        description="Certified, Adam and Hebbian capacities, rank, spectra, scores and a peer's protocol at "
        "CPU sizes, into one resumable folder, then report.md and its figures.",
        epilog="examples:\n  jaxmem demo\n  jaxmem demo --out runs/demo --jobs 2\n"
        "  jaxmem demo --quick --out /tmp/q",
    )
    d.add_argument("--out", default="jaxmem-demo", help="the folder (resumed if it exists)")
    d.add_argument("--quick", action="store_true", help="a minutes-long check of the same path")
    d.add_argument(
        "--jobs",
        type=integer(0, 64),
        default=0,
        help="worker processes (0: one per CPU core up to 4 on the CPU, 1 on an accelerator)",
    )
    d.set_defaults(func=_cmd_demo)


def _add_study(sub) -> None:
    from .._names import STUDY_NAMES

    listing = "\n".join(
        f"  {name:10s} {title}\n             presets: {', '.join(presets)}"
        for name, (title, presets) in STUDY_NAMES.items()
    )
    s = sub.add_parser(
        "study",
        help="run a study (a preset of measurements) into a folder, then write its report",
        description="Measure a preset of a study into one resumable folder (shardable for a SLURM array), "
        "then write the study's report from its records. `jaxmem demo` is `jaxmem study demo`.",
        epilog=f"studies:\n{listing}\n\nexamples:\n"
        "  jaxmem study scaling --out runs/scaling                   the scaling study (hours)\n"
        "  jaxmem study scaling --preset quick --out /tmp/s          the same path in a minute\n"
        "  jaxmem study rank --plan                                  its units of work, writing nothing\n"
        "  jaxmem study rank --out runs/rank --shard 3/8             one task of a SLURM array\n"
        "  jaxmem study scaling --out runs/scaling --report DIR      the default preset's report alone",
    )
    s.add_argument("name", help="the study (listed below)")
    s.add_argument("--preset", default=None, help="the study's preset (default: its first, listed below)")
    s.add_argument(
        "--out", default=None, help="the folder of records (default: jaxmem-NAME; resumed if it exists)"
    )
    s.add_argument("--plan", action="store_true", help="print the units of work and stop (writes nothing)")
    s.add_argument("--shard", default=None, help="i/n: run every n-th unit of work from the i-th")
    s.add_argument(
        "--jobs",
        type=integer(0, 64),
        default=0,
        help="worker processes (0: one per CPU core up to 4 on the CPU, 1 on an accelerator)",
    )
    s.add_argument(
        "--report",
        metavar="DIR",
        default=None,
        help="measure nothing: copy the preset's records from --out (which must hold them all, and is "
        "only read) into DIR and write their report there",
    )
    s.set_defaults(func=_cmd_study)
