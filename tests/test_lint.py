"""ruff (rules as optimistix's, configured in pyproject.toml) is clean on the whole repo."""

import os
import subprocess
import sys


ROOT = os.path.join(os.path.dirname(__file__), "..")


def test_ruff_check_is_clean():
    r = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stdout[-3000:]


def test_ruff_format_is_clean():
    r = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-3000:]
