"""The README's examples run as written, in a fresh interpreter with x64 off."""

import os
import re
import subprocess
import sys

import pytest


README = os.path.join(os.path.dirname(__file__), "..", "README.md")
# Sections whose python blocks are run here (every python block of the README).
SECTIONS = (
    "## Quickstart",
    "## Certified capacity",
    "## The optimal memory (`jm.max_margin`)",
    "## Theory (`jaxmem.theory`)",
)


def _blocks():
    with open(README) as f:
        text = f.read()
    out = []
    for title in SECTIONS:
        start = text.index(title + "\n")
        end = text.find("\n## ", start + len(title))
        body = text[start : end if end >= 0 else None]
        out += [(title, b) for b in re.findall(r"```python\n(.*?)```", body, flags=re.S)]
    return out


@pytest.mark.parametrize("title,code", _blocks(), ids=lambda x: x if x.startswith("##") else "")
def test_readme_example_runs(title, code):
    env = dict(os.environ, JAX_ENABLE_X64="0")
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=os.path.dirname(README),
        timeout=900,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
