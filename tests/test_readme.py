"""Every python block of the README and of `docs/` runs as written, in a fresh interpreter with
x64 off, and ends in an `assert` on its result."""

import glob
import os
import re
import subprocess
import sys

import pytest


ROOT = os.path.join(os.path.dirname(__file__), "..")
PAGES = [
    "README.md",
    *sorted(
        os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
    ),
]


def _blocks():
    out = []
    for page in PAGES:
        with open(os.path.join(ROOT, page)) as f:
            text = f.read()
        for k, code in enumerate(re.findall(r"```python\n(.*?)```", text, flags=re.S)):
            out.append((f"{page}#{k}", code))
    return out


BLOCKS = _blocks()


def test_the_readme_and_the_docs_have_examples():
    pages = {name.split("#")[0] for name, _ in BLOCKS}
    assert {"README.md", "docs/measurement.md", "docs/theory.md"} <= pages


@pytest.mark.parametrize("name,code", BLOCKS, ids=[name for name, _ in BLOCKS])
def test_example_ends_in_an_assert(name, code):
    lines = [line for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert lines and lines[-1].startswith("assert "), f"{name} does not end in an assert"


@pytest.mark.parametrize("name,code", BLOCKS, ids=[name for name, _ in BLOCKS])
def test_example_runs(name, code):
    env = dict(os.environ, JAX_ENABLE_X64="0")
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=900,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]


def test_the_readme_is_a_guide():
    """At most 250 lines, and every page it links to exists."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    assert text.count("\n") <= 250
    for link in re.findall(r"\]\(([^)#\s]+)\)", text):
        if not link.startswith("http"):
            assert os.path.exists(os.path.join(ROOT, link)), link


def test_the_docs_links_resolve():
    for page in PAGES:
        with open(os.path.join(ROOT, page)) as f:
            text = f.read()
        for link in re.findall(r"\]\(([^)#\s]+)\)", text):
            if not link.startswith("http"):
                assert os.path.exists(os.path.join(ROOT, os.path.dirname(page), link)), (page, link)
