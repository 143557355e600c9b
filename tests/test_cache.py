"""The persistent compilation cache of the command line: on by default in `JAXMEM_CACHE_DIR`,
off with `--no-cache` or `JAXMEM_NO_CACHE=1`, shared safely by processes writing at once, and
never a change of result."""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import jaxmem


# a command whose compile takes well over the cache's 0.1 s on any machine
COMMAND = ["theory", "saddle", "--alpha", "0.5", "--p", "1e12", "--json"]


def _run(cache: str, *extra: str, no_cache: bool = False) -> subprocess.CompletedProcess:
    # as a user's shell runs it: `import jax` in this process set TF_CPP_MIN_LOG_LEVEL
    env = {k: v for k, v in os.environ.items() if k not in ("JAXMEM_NO_CACHE", "TF_CPP_MIN_LOG_LEVEL")}
    env["JAXMEM_CACHE_DIR"] = cache
    if no_cache:
        env["JAXMEM_NO_CACHE"] = "1"
    code = "import sys; from jaxmem.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *COMMAND, *extra], capture_output=True, text=True, env=env, timeout=600
    )


def test_processes_share_one_cache_and_get_the_same_result(tmp_path):
    cache = str(tmp_path / "cache")
    with ThreadPoolExecutor(3) as pool:  # three cold processes writing the same entries at once
        cold = list(pool.map(lambda _: _run(cache), range(3)))
    assert all(r.returncode == 0 for r in cold), [r.stderr for r in cold]
    assert len({r.stdout for r in cold}) == 1
    entries = os.listdir(cache)
    assert entries and not [e for e in entries if "tmp" in e.lower()], entries
    warm = _run(cache)
    assert warm.returncode == 0 and warm.stdout == cold[0].stdout
    assert "cpu_aot_loader" not in warm.stderr, "no XLA log line for a program read back"
    assert sorted(os.listdir(cache)) == sorted(entries)  # read back, nothing new


def test_the_cache_can_be_turned_off(tmp_path):
    for i, (extra, off) in enumerate([(("--no-cache",), False), ((), True)]):
        cache = str(tmp_path / f"cache{i}")
        r = _run(cache, *extra, no_cache=off)
        assert r.returncode == 0, r.stderr
        assert not os.path.exists(cache)


def test_the_library_turns_it_on_with_one_call(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXMEM_CACHE_DIR", str(tmp_path / "c"))
    assert jaxmem.cache_dir() == str(tmp_path / "c")
    monkeypatch.delenv("JAXMEM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert jaxmem.cache_dir() == str(tmp_path / "x" / "jaxmem" / "xla")
    code = (
        "import sys, jax, jax.numpy as jnp, jaxmem as jm; "
        "assert jm.enable_compilation_cache(sys.argv[1], min_compile_seconds=0) == sys.argv[1]; "
        "jax.jit(lambda x: jnp.sin(x) @ x)(jnp.ones((64, 64))).block_until_ready()"
    )
    path = str(tmp_path / "lib")
    r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert os.listdir(path)
