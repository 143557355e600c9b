"""Time to first answer: each item in a fresh process, with an empty compilation cache and
again with the cache the first run filled; and the saddle point's program split into tracing,
lowering and compiling (`jax.stages`).

    python benchmarks/latency.py [--items NAME ...] [--no-stages]   # -> benchmarks/results/latency.json

Wall times include the interpreter's start and every import, as a user meets them.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from _common import write


SADDLE = "import jaxmem.theory as th; th.saddle(0.5, 1000.0)"
GRAD = (
    "import jax, jaxmem.theory as th; th.saddle(0.5, 1000.0); jax.grad(lambda a: th.saddle(a, 1000.0).q)(0.5)"
)
# name -> the command (a list: argv; a string: Python code run with the library's cache call)
ITEMS = {
    "import jaxmem": "import jaxmem",
    "jaxmem --help": ["jaxmem", "--help"],
    "th.saddle(0.5, 1000.0)": SADDLE,
    "th.saddle, then its jax.grad": GRAD,
    "jaxmem theory saddle --alpha 0.5 --p 1e12": [
        "jaxmem",
        "theory",
        "saddle",
        "--alpha",
        "0.5",
        "--p",
        "1e12",
    ],
    "jaxmem capacity --d 12 --seeds 4": ["jaxmem", "capacity", "--d", "12", "--seeds", "4"],
}

STAGES = r"""
import json, sys, time
t0 = time.perf_counter()
import jax, jaxmem.theory as th
out = {"import": time.perf_counter() - t0}
for name, f in [("saddle", lambda a: th.saddle(a, 1000.0).q),
                ("grad", jax.grad(lambda a: th.saddle(a, 1000.0).q))]:
    t = time.perf_counter(); traced = jax.jit(f).trace(0.5); out[f"{name} trace"] = time.perf_counter() - t
    t = time.perf_counter(); lowered = traced.lower(); out[f"{name} lower"] = time.perf_counter() - t
    t = time.perf_counter(); compiled = lowered.compile(); out[f"{name} compile"] = time.perf_counter() - t
    t = time.perf_counter(); float(compiled(0.5)); out[f"{name} run"] = time.perf_counter() - t
    out[f"{name} HLO lines"] = lowered.as_text().count("\n")
print(json.dumps(out))
"""


def _run(cmd, cache: str | None) -> float:
    env = dict(os.environ)
    env.pop("JAXMEM_NO_CACHE", None)
    if cache is None:
        env["JAXMEM_NO_CACHE"] = "1"
    else:
        env["JAXMEM_CACHE_DIR"] = cache
    if isinstance(cmd, str):
        # the library's one call turns the cache on (not for the bare import, which compiles nothing)
        pre = (
            f"import jaxmem; jaxmem.enable_compilation_cache({cache!r}); "
            if cache and cmd != "import jaxmem"
            else ""
        )
        cmd = [sys.executable, "-c", pre + cmd]
    elif cmd[0] == "jaxmem":
        cmd = [os.path.join(os.path.dirname(sys.executable), "jaxmem"), *cmd[1:]]
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    seconds = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{cmd}: {r.stderr[-2000:]}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", nargs="+", default=list(ITEMS), choices=list(ITEMS), metavar="NAME")
    ap.add_argument("--no-stages", action="store_true", help="skip the trace/lower/compile split")
    a = ap.parse_args()
    rows = []
    for name in a.items:
        with tempfile.TemporaryDirectory() as cache:
            cold = _run(ITEMS[name], cache)
            warm = _run(ITEMS[name], cache)
        rows.append(dict(item=name, cold=cold, warm=warm))
        print(f"{name:45s} cold {cold:7.1f} s   warm cache {warm:7.1f} s", flush=True)
    stages = None
    if not a.no_stages:
        r = subprocess.run(
            [sys.executable, "-c", STAGES],
            capture_output=True,
            text=True,
            timeout=3600,
            env={k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"},
        )
        if r.returncode != 0:
            raise SystemExit(r.stderr[-2000:])
        stages = json.loads(r.stdout.strip().splitlines()[-1])
        for k, v in stages.items():
            print(f"  {k:20s} {v:9.1f}" + ("" if "lines" in k else " s"))
    print("wrote", write("latency", dict(command=" ".join(["python", *sys.argv]), rows=rows, stages=stages)))


if __name__ == "__main__":
    main()
