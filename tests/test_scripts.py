"""Every benchmark and script imports against the current library (their names resolve), so a
rename cannot leave one broken unnoticed."""

import glob
import os
import subprocess
import sys


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


def test_a_rerun_unit_gives_its_folders_records(tmp_path):
    """`scripts/rerun_units.py` runs a folder's unit again into another folder, and
    `scripts/compare_records.py` finds its records equal, iterations included."""
    import jaxmem as jm

    src, out = str(tmp_path / "a"), str(tmp_path / "b")
    jm.capacity(d=6, problem="op", seeds=4, out=src)
    unit = sorted(os.listdir(os.path.join(src, "records")))[0][: -len(".jsonl")]
    script = lambda name, *args: subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", name), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    r = script("rerun_units.py", src, out, unit)
    assert r.returncode == 0 and os.listdir(os.path.join(out, "records")) == [f"{unit}.jsonl"], r.stderr
    r = script("compare_records.py", src, out)
    assert r.returncode == 0 and "0 in one folder only; 0 differ" in r.stdout, r.stdout
    r = script("rerun_units.py", src, out, "nosuchunit")
    assert r.returncode == 2 and "nosuchunit.jsonl" in r.stderr
