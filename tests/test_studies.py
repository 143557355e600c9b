"""Studies as one protocol: `jaxmem study NAME` plans, refuses, runs and reports any registered
study, a new study is one class and one `register` line (a toy study defined here, not shipped,
is picked up by the command line and by `jaxmem report`), and the report of a folder is that of
the studies that wrote it, with no empty panel or section."""

import json
import os
import shutil
import subprocess
import sys
from typing import ClassVar

import pytest
from helpers import same_json
from jaxmem.cli import main


ROOT = os.path.join(os.path.dirname(__file__), "..")
JAXMEM = os.path.join(os.path.dirname(sys.executable), "jaxmem")  # the installed command


def test_the_help_lists_what_the_registry_holds():
    """`jaxmem study --help` names every study and preset without importing the study layer; the
    names it shows are the registry's."""
    from jaxmem._names import STUDY_NAMES
    from jaxmem.study import STUDIES

    builtin = {k: v for k, v in STUDIES.items() if k in STUDY_NAMES}
    assert list(builtin) == list(STUDY_NAMES)
    for name, study in builtin.items():
        assert STUDY_NAMES[name] == (study.title, tuple(study.presets)), name
    r = subprocess.run([JAXMEM, "study", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and all(name in r.stdout for name in STUDY_NAMES), r.stdout


@pytest.mark.parametrize(
    "name, preset, units",
    [
        ("scaling", None, 61),
        ("scaling", "more", 26),
        ("scaling", "accelerator", 12),
        ("rank", None, 27),
        ("peer", None, 25),
        ("mechanism", None, 2),
        ("tail", None, 32),
    ],
)
def test_plan_counts_units_and_writes_nothing(tmp_path, capsys, name, preset, units):
    out = tmp_path / name
    argv = ["study", name, "--out", str(out), "--plan"] + (["--preset", preset] if preset else [])
    assert main(argv) == 0
    assert f"\n{units} units of work" in "\n" + capsys.readouterr().out
    assert main(argv + ["--json", "--shard", "1/4"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["units"] == units and got["shard"] == "1/4" and got["shard_units"] == len(range(1, units, 4))
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, says",
    [
        (
            ["study", "nope", "--plan"],
            "study must be one of demo, mechanism, peer, rank, scaling, sweep, tail",
        ),
        (["study", "scaling", "--preset", "huge", "--plan"], "preset of study scaling must be one of"),
        (["study", "rank", "--shard", "3/2", "--plan"], "--shard"),
        (["study", "rank", "--plan", "--report", "x"], "--report"),
    ],
)
def test_bad_study_arguments_exit_2_with_one_line(tmp_path, capsys, argv, says, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err
    assert os.listdir(tmp_path) == []


def test_plan_works_from_an_installed_package_outside_the_repo(tmp_path):
    for name in ("scaling", "rank"):
        r = subprocess.run(
            [JAXMEM, "study", name, "--plan", "--json"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        assert r.returncode == 0 and json.loads(r.stdout)["study"] == name, r.stderr[-2000:]
    assert os.listdir(tmp_path) == []


def test_report_copies_the_presets_own_units_and_writes_nothing_in_out(tmp_path, capsys):
    """`--report DIR` copies the preset's record files from `--out` unchanged and writes their
    report in DIR alone; a folder missing a unit, or a DIR holding other units' records, is
    refused (exit 2, one line naming `--report`) with nothing written."""
    from jaxmem.study import register, Scaling, scaling_points, ScalingSpec, Store, STUDIES

    class Part(Scaling):
        name: ClassVar[str] = "scaling-part"
        page: ClassVar[str] = "scaling"
        presets: ClassVar[dict] = dict(
            default=ScalingSpec(op=((16, 64),), dp=((16, 32),)),
            more=ScalingSpec(op=((16, 64), (32, 16)), dp=((16, 32),)),
        )

    register(Part(band_samples=64))
    try:
        units = scaling_points(Part.presets["default"])
        beyond = scaling_points(ScalingSpec(op=((24, 16),), dp=()))[0]  # a unit src holds beyond it
        committed = Store(os.path.join(ROOT, "docs", "scaling"))
        src = tmp_path / "src"
        for u in units + [beyond]:
            Store(str(src)).copy_from(committed, u)
        before = {p.name: p.read_bytes() for p in src.rglob("*") if p.is_file()}
        dest = tmp_path / "dest"
        assert main(["study", "scaling-part", "--out", str(src), "--report", str(dest)]) == 0
        assert "report:" in capsys.readouterr().out
        assert sorted(p.name for p in (dest / "records").iterdir()) == sorted(
            os.path.basename(committed.path(u)) for u in units
        )
        for p in (dest / "records").iterdir():
            assert p.read_bytes() == (src / "records" / p.name).read_bytes()
        assert (dest / "scaling.md").exists() and (dest / "studies" / "scaling-part.json").exists()
        assert {p.name: p.read_bytes() for p in src.rglob("*") if p.is_file()} == before, "--out is read only"

        shutil.rmtree(dest)
        for argv, says in (
            (["--preset", "more", "--report", str(dest)], "1 of 7 units"),
            (["--report", str(src)], "other than"),
        ):
            assert main(["study", "scaling-part", "--out", str(src), *argv]) == 2
            err = capsys.readouterr().err
            assert "--report" in err and says in err, err
        assert not dest.exists()
        other = tmp_path / "other"
        Store(str(other)).copy_from(Store(str(src)), beyond)
        assert main(["study", "scaling-part", "--out", str(src), "--report", str(other)]) == 2
        assert "other units" in capsys.readouterr().err
    finally:
        STUDIES.pop("scaling-part")


def test_a_toy_study_is_one_class_and_one_register_line(tmp_path, capsys):
    """A study defined here (not shipped) runs from `jaxmem study`, resumes, and `jaxmem report`
    writes its page, because both read the registry."""
    import equinox as eqx
    from jaxmem.study import AbstractStudy, point_configs, register, STUDIES, threshold_rows
    from jaxmem.study._study import by_kind

    class ToySpec(eqx.Module):
        d: int
        seeds: int

    class Toy(AbstractStudy):
        name: ClassVar[str] = "toy"
        title: ClassVar[str] = "the certified OP capacity at one d"
        presets: ClassVar[dict] = dict(default=ToySpec(d=6, seeds=4))
        page: ClassVar[str] = "toy"

        def units(self, spec):
            return point_configs(d=spec.d, problem="op", seeds=spec.seeds, group=spec.seeds)

        def tables(self, records):
            thr = by_kind(records)[0]
            return threshold_rows(thr, theory=False) if thr else None

        def figures(self, rows, out):
            return {}

        def report(self, rows, figures, out):
            return "# toy\n\n" + "\n".join(f"- d={r['d']}: p_c = {r['p_c']}" for r in rows)

    register(Toy())
    try:
        out = tmp_path / "toy"
        assert main(["study", "toy", "--out", str(out), "--quiet"]) == 0
        assert "report:" in capsys.readouterr().out
        text = (out / "toy.md").read_text()
        assert text.startswith("# toy") and "d=6: p_c" in text
        (out / "toy.md").unlink()
        stamp = {p.name: p.stat().st_mtime_ns for p in (out / "records").iterdir()}
        assert main(["report", str(out), "--json"]) == 0
        got = json.loads(capsys.readouterr().out)
        assert got["studies"] == ["toy"] and (out / "toy.md").read_text() == text
        assert main(["study", "toy", "--out", str(out), "--quiet"]) == 0, "resumes: reads, runs nothing"
        assert {p.name: p.stat().st_mtime_ns for p in (out / "records").iterdir()} == stamp
    finally:
        STUDIES.pop("toy")
    assert main(["report", str(out)]) == 2, "a folder of an unregistered study"
    assert "not registered" in capsys.readouterr().err


def _copy(tmp_path, name):
    dest = tmp_path / name
    shutil.copytree(os.path.join(ROOT, "docs", name), dest)
    for f in dest.iterdir():
        if f.is_file() and f.suffix in (".md", ".json", ".png", ".pdf") and f.name != "meta.json":
            f.unlink()
    return dest


def test_report_of_the_rank_folder_is_its_study_page_and_nothing_blank(tmp_path, capsys):
    """`jaxmem report` on a copy of docs/rank writes the rank study's page, exactly the committed
    one, its JSON and its figure, and nothing else (no blank demo figures, no empty section)."""
    dest = _copy(tmp_path, "rank")
    before = set(os.listdir(dest))
    assert main(["report", str(dest), "--quiet"]) == 0
    assert sorted(set(os.listdir(dest)) - before) == ["rank.json", "rank.md", "rank.pdf", "rank.png"]
    committed = os.path.join(ROOT, "docs", "rank")
    with open(os.path.join(committed, "rank.md")) as f:
        assert (dest / "rank.md").read_text() == f.read().replace("docs/rank", str(dest))
    with open(os.path.join(committed, "rank.json")) as f:
        assert same_json(json.loads((dest / "rank.json").read_text()), json.loads(f.read()))


def test_a_toy_decider_is_one_class_and_one_register_line(tmp_path, capsys):
    """A decider defined here (not shipped; the dense one, counting its conclusions) is accepted
    by `DecideConfig`, `jm.decide` and `jaxmem capacity --decider`, through the registry, and its
    thresholds are the dense decider's, seed by seed; an unknown name is refused with one line."""
    import jax
    import jaxmem as jm
    from jaxmem.solvers import DECIDERS, Dense, register_decider

    seen = []

    class Counting(Dense):
        name: ClassVar[str] = "counting"

        def conclude(self, solver, inst, state):
            seen.append(1)
            return super().conclude(solver, inst, state)

    register_decider(Counting)
    try:
        tasks = jm.make_tasks(jax.random.key(0), n=4, d=6, p=12)
        toy = jm.decide(tasks, config=jm.DecideConfig(decider="counting"))
        dense = jm.decide(tasks, config=jm.DecideConfig(decider="dense"))
        assert seen and (toy.status == dense.status).all()
        argv = ["capacity", "--d", "6", "--seeds", "4", "--json", "--quiet", "--no-cache"]
        rows = {}
        for name in ("counting", "dense"):
            assert main(argv + ["--decider", name, "--out", str(tmp_path / name)]) == 0
            (rows[name],) = json.loads(capsys.readouterr().out)["rows"]
        assert rows["counting"]["settings"]["decide.decider"] == "counting"
        assert rows["counting"]["p_c"] == rows["dense"]["p_c"] and len(seen) > 1
    finally:
        DECIDERS.pop("counting")
    assert main(["capacity", "--d", "6", "--decider", "counting"]) == 2
    err = capsys.readouterr().err
    assert "decider must be one of auto, dense, working-set" in err and len(err.splitlines()) == 1


def test_the_capacity_page_of_a_plain_folder_has_no_blank_figure_or_empty_section(tmp_path, capsys):
    """A `jaxmem capacity --out` folder of certified OP thresholds alone: `jaxmem report` writes the
    capacity page with the two figures that have data (the transition's OP panel, the capacity
    against d) and only sections with rows."""
    out = tmp_path / "c"
    argv = ["capacity", "--d", "6", "8", "--seeds", "4", "--out", str(out), "--quiet", "--no-cache"]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["report", str(out), "--json", "--quiet"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["studies"] == ["demo"] and got["report"].endswith("report.md")
    pngs = sorted(p.name for p in out.iterdir() if p.suffix == ".png")
    assert pngs == ["fig1_transition.png", "fig2_finite_size.png"]
    text = (out / "report.md").read_text()
    heads = [line for line in text.splitlines() if line.startswith("## ")]
    assert heads == ["## Capacity", "## Finite size", "## Figures"], heads
    blocks = text.split("\n## ")
    assert all(b.strip().count("\n") >= 2 for b in blocks[1:]), "a section without a body"


def test_the_mechanism_units_sit_at_fractions_of_each_seeds_certified_threshold():
    """`mechanism_configs` reads each seed's certified threshold from the records and asks for
    the max-margin memories at `floor(load p*)` of it, the tasks drawn at the largest `p*`; it
    asks for nothing while a seed's threshold is missing."""
    from jaxmem.study import mechanism_configs, MechanismSpec, point_configs

    spec = MechanismSpec(d=8, seeds=3, loads=(0.5, 0.9), kappa=0.5, rank_load=0.75, rank_problems=("op",))
    recs = []
    for problem, p_stars in (("op", [20, 25, 22]), ("dp", [19, 21, 23])):
        (cfg,) = point_configs(d=8, problem=problem, seeds=3)
        recs += [dict(kind="threshold", config=cfg, seed=s, p_star=p) for s, p in enumerate(p_stars)]
    units = mechanism_configs(spec, recs)
    got = [(u["problem"], u["model"], u["load"], u["p"], u["p_max"]) for u in units]
    assert got == [
        ("op", "full", 0.5, [10, 12, 11], 25),
        ("op", "full", 0.9, [18, 22, 19], 25),
        ("op", "factored", 0.75, [15, 18, 16], 25),
        ("dp", "full", 0.5, [9, 10, 11], 23),
        ("dp", "full", 0.9, [17, 18, 20], 23),
    ]
    assert mechanism_configs(spec, recs[:-1])[-1]["problem"] == "op", "DP seed 2 has no threshold yet"
    with pytest.raises(ValueError, match="seeds"):
        MechanismSpec(seeds=1)


@pytest.mark.slow
def test_the_mechanism_study_runs_as_units_and_resumes(tmp_path, capsys):
    """The quick preset end to end: thresholds, then the mechanism units, then its page; a second
    run reads every unit and measures nothing."""
    out = tmp_path / "m"
    assert main(["study", "mechanism", "--preset", "quick", "--out", str(out), "--quiet"]) == 0
    text = (out / "mechanism.md").read_text()
    for head in ("## Max-margin memories against the theory", "## OP - DP, max_margin", "## Spectra"):
        assert head in text, head
    stamp = {p.name: p.stat().st_mtime_ns for p in (out / "records").iterdir()}
    assert len(stamp) == 2 + 3
    assert main(["study", "mechanism", "--preset", "quick", "--out", str(out), "--quiet"]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in (out / "records").iterdir()} == stamp


def test_report_of_the_mechanism_folder_is_its_committed_page(tmp_path):
    """docs/mechanism holds the mechanism study's records; `jaxmem report` on a copy writes its
    page, exactly the committed one, and its figure."""
    dest = _copy(tmp_path, "mechanism")
    assert main(["report", str(dest), "--quiet"]) == 0
    with open(os.path.join(ROOT, "docs", "mechanism", "mechanism.md")) as f:
        assert (dest / "mechanism.md").read_text() == f.read().replace("docs/mechanism", str(dest))
    assert (dest / "mechanism.png").stat().st_size > 10_000


def test_report_of_the_tail_folder_is_its_committed_page(tmp_path):
    """docs/tail holds the tail-average study's records; `jaxmem report` on a copy writes its
    page and JSON, exactly the committed ones, and its figure; `jaxmem capacity` reads the same
    rows as the committed JSON's."""
    dest = _copy(tmp_path, "tail")
    assert main(["report", str(dest), "--quiet"]) == 0
    committed = os.path.join(ROOT, "docs", "tail")
    with open(os.path.join(committed, "tail.md")) as f:
        assert (dest / "tail.md").read_text() == f.read().replace("docs/tail", str(dest))
    with open(os.path.join(committed, "tail.json")) as f:
        assert same_json(json.loads((dest / "tail.json").read_text()), json.loads(f.read()))
    assert (dest / "tail.png").stat().st_size > 10_000
