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


def test_every_raises_in_the_tests_says_what_it_expects():
    """A `pytest.raises` without `match=` passes on any error of its type, the wrong one too."""
    import ast
    import pathlib

    loose = [
        f"{f.name}:{n.lineno}"
        for f in sorted(pathlib.Path(ROOT, "tests").glob("*.py"))
        for n in ast.walk(ast.parse(f.read_text()))
        if isinstance(n, ast.Call)
        and getattr(n.func, "attr", None) == "raises"
        and not any(k.arg == "match" for k in n.keywords)
    ]
    assert not loose, loose
