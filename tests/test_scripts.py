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
        ("scaling", (), 54),
        ("scaling", ("--large",), 16),
        ("scaling", ("--accelerator",), 12),
        ("rank", (), 27),
    ],
)
def test_preset_scripts_plan_and_refuse_bad_arguments_without_writing(tmp_path, capsys, script, extra, units):
    out = tmp_path / script
    main = _script(script).main
    refused = [("--shard", "3/2")] if not extra else []  # the shard check is the same code with --large
    refused += (
        [("--large", "--accelerator"), ("--quick", "--large")] if script == "scaling" and not extra else []
    )
    for bad in refused:
        with pytest.raises(SystemExit, match="^2$") as e:
            main(["--out", str(out), *extra, *bad])
        assert e.value.code == 2 and bad[0] in capsys.readouterr().err
    main(["--out", str(out), *extra, "--plan"])
    printed = capsys.readouterr().out
    assert printed.strip().endswith(f"{units} units of work"), printed[-500:]
    assert not out.exists(), "--plan and a refused run write nothing"
