"""Every benchmark and script imports against the current library (their names resolve), so a
rename cannot leave one broken unnoticed."""

import glob
import os
import subprocess
import sys

import pytest


ROOT = os.path.join(os.path.dirname(__file__), "..")
CODE = """
import importlib.util, sys
for path in sys.argv[1:]:
    sys.path.insert(0, __import__("os").path.dirname(path))
    spec = importlib.util.spec_from_file_location("m", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    sys.path.pop(0)
"""


def test_every_benchmark_and_script_imports():
    paths = sorted(
        glob.glob(os.path.join(ROOT, "benchmarks", "*.py")) + glob.glob(os.path.join(ROOT, "scripts", "*.py"))
    )
    assert len(paths) >= 10
    r = subprocess.run(
        [sys.executable, "-c", CODE, *paths], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]


def _script(name):
    """A script of `scripts/` as a module (its sibling `study_preset` importable)."""
    import importlib.util

    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        spec = importlib.util.spec_from_file_location(
            f"script_{name}", os.path.join(ROOT, "scripts", f"{name}.py")
        )
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.pop(0)
    return mod


@pytest.mark.parametrize(
    "script, extra, units",
    [
        ("scaling", (), 61),
        ("scaling", ("--more",), 26),
        ("scaling", ("--accelerator",), 12),
        ("rank", (), 27),
    ],
)
def test_preset_scripts_plan_and_refuse_bad_arguments_without_writing(tmp_path, capsys, script, extra, units):
    out = tmp_path / script
    main = _script(script).main
    refused = [("--shard", "3/2")] if not extra else []  # the shard check is the same code with --more
    refused += (
        [("--more", "--accelerator"), ("--quick", "--more")] if script == "scaling" and not extra else []
    )
    for bad in refused:
        with pytest.raises(SystemExit, match="^2$") as e:
            main(["--out", str(out), *extra, *bad])
        assert e.value.code == 2 and bad[0] in capsys.readouterr().err
    main(["--out", str(out), *extra, "--plan"])
    printed = capsys.readouterr().out
    assert printed.strip().endswith(f"{units} units of work"), printed[-500:]
    assert not out.exists(), "--plan and a refused run write nothing"


def test_preset_report_copies_its_own_units_and_writes_nothing_in_out(tmp_path, capsys):
    """`--report DIR` copies the preset's record files from `--out` unchanged and writes their
    report in DIR alone; a folder missing a unit, or a DIR holding other units' records, is
    refused (exit 2, one line naming `--report`) with nothing written."""
    import shutil

    from jaxmem.study import scaling_points, ScalingSpec, Store

    run_preset = _script("study_preset").run_preset
    units = scaling_points(ScalingSpec(op=((16, 64),), dp=((16, 32),)))
    beyond = scaling_points(ScalingSpec(op=((24, 16),), dp=()))[0]  # a unit src holds beyond the preset
    committed = Store(os.path.join(ROOT, "docs", "scaling"))
    src = tmp_path / "src"
    for u in units + [beyond]:
        Store(str(src)).copy_from(committed, u)
    before = {p.name: p.read_bytes() for p in src.rglob("*") if p.is_file()}
    written = []

    def write(out):
        written.append(out)
        return (os.path.join(out, "report.md"),)

    run_preset("doc", units, [], write, ["--out", str(src), "--report", str(tmp_path / "dest")])
    assert "report:" in capsys.readouterr().out and written == [str(tmp_path / "dest")]
    dest = tmp_path / "dest" / "records"
    assert sorted(p.name for p in dest.iterdir()) == sorted(
        os.path.basename(committed.path(u)) for u in units
    )
    for p in dest.iterdir():
        assert p.read_bytes() == (src / "records" / p.name).read_bytes()
    assert {p.name: p.read_bytes() for p in src.rglob("*") if p.is_file()} == before, "--out is only read"

    more = units + scaling_points(ScalingSpec(op=((32, 16),), dp=()))  # a unit src lacks
    shutil.rmtree(tmp_path / "dest")
    for argv, says in (
        (["--out", str(src), "--report", str(tmp_path / "dest")], "1 of 7 units"),
        (["--out", str(src), "--report", str(src)], "other than --out"),
    ):
        with pytest.raises(SystemExit, match="^2$"):
            run_preset("doc", more, [], write, argv)
        assert "--report" in (err := capsys.readouterr().err) and says in err, err
    assert not (tmp_path / "dest").exists() and len(written) == 1
    Store(str(tmp_path / "other")).copy_from(Store(str(src)), beyond)
    with pytest.raises(SystemExit, match="^2$"):
        run_preset("doc", units, [], write, ["--out", str(src), "--report", str(tmp_path / "other")])
    assert "other units" in capsys.readouterr().err and len(written) == 1
