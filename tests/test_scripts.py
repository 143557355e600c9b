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
