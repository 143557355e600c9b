"""One loop that runs units of work into a `Store`: serial, or by worker processes that share
the folder; a `shard` of the units per process; finished units skipped.

A serial study leaves cores idle where its units are mostly compilation, whose steps are too
small to spread over threads (docs/decisions.md, "jaxmem demo --jobs"). Workers (spawned processes,
each with its own JAX) take whole *families* of units, the units that differ only in their
seeds, hence share every compiled program, from one queue, the costliest first, and write each
unit's record file atomically as soon as it finishes. A unit runs the same batches whichever
process runs it, so a study run by any number of workers, or resumed after an interruption,
has the same records as a serial one.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing
import os
import sys
import time

import numpy as np

from .._validate import check_int, check_memory, InvalidArgument
from ._records import config_id, expected_seeds, Store
from ._units import run_one


def default_jobs() -> int:
    """Worker processes for a study on this host: on the CPU backend one per core, at most 4
    (each worker holds its own compiled programs, about 2 GB); on an accelerator 1 (the workers
    would share one device's memory)."""
    import jax

    return max(1, min(4, os.cpu_count() or 1)) if jax.default_backend() == "cpu" else 1


# What one worker process holds (its JAX runtime and compiled programs; measured 0.7 to 2 GB
# on the demo): `jobs` workers need `jobs` times this.
WORKER_BYTES = 2**30


def check_jobs(jobs: int) -> int:
    """`jobs` worker processes, refused where their memory exceeds the machine's."""
    jobs = check_int("jobs", jobs, 1)
    check_memory("jobs", jobs * WORKER_BYTES)
    return jobs


def family(cfg: dict) -> str:
    """The identity of a unit less its seeds: units of one family compile the same programs."""
    return json.dumps({k: v for k, v in cfg.items() if k != "seeds"}, sort_keys=True)


def _cost(cfg: dict) -> float:
    """A rough cost of a unit in seconds on one CPU core, used only to start the costliest
    families first: the decisions' passes over the constraints, `seeds p_max^2 d` times a
    per-solver factor fitted to the demo's own units (the DP's candidates are per input;
    Adam takes thousands of steps; the Hebbian scan is one pass)."""
    p = cfg["plan"]["p_max"] if "plan" in cfg else max(np.atleast_1d(cfg.get("p", 2)))
    seeds = len(expected_seeds(cfg))
    factor = {"adam": 7.0, "hebbian": 0.01}.get(cfg.get("solver"), 3.5 if cfg["problem"] == "dp" else 1.0)
    return 1e-7 * factor * seeds * p * p * cfg["d"]


def _family_cost(cfgs: list[dict]) -> float:
    """`_cost` summed, plus the family's compilation (about 20 s; 1 s for the Hebbian scan)."""
    return (1.0 if cfgs[0].get("solver") == "hebbian" else 20.0) + sum(map(_cost, cfgs))


def _label(cfg: dict) -> str:
    seeds = expected_seeds(cfg)
    what = cfg.get("solver", cfg.get("kind", "sweep"))
    what += f" {cfg['criterion']}" if "criterion" in cfg else ""
    at = f" p={cfg['p']}" if "p" in cfg and "kind" not in cfg else ""
    return (
        f"d={cfg['d']}{at} {cfg['problem']} {cfg['model']} kappa={cfg['kappa']:.2f} {what} "
        f"{cfg.get('embedding', 'gaussian')} seeds {seeds[0]}..{seeds[-1]}"
    )


def _run_here(store, cfgs: list[dict], *, log=None, trace: bool = False) -> tuple[int, list[dict]]:
    """Run the units of `cfgs` in this process into `store` (None: keep nothing), skipping
    finished ones; a line per unit to `log`, and with `trace` the unit's own progress lines.

    **Returns:** how many units ran, and their records."""
    ran, recs = 0, []
    for k, cfg in enumerate(cfgs):
        if store is not None and store.done(cfg):
            continue
        if log is not None and trace:
            print(f"[{k + 1}/{len(cfgs)}] {_label(cfg)}", file=log, flush=True)
        t = time.perf_counter()
        unit = run_one(cfg, log=log if trace else None)
        if store is not None:
            store.write(cfg, unit)
        ran += 1
        recs += unit
        if log is not None:
            print(f"  {_label(cfg)}: done in {time.perf_counter() - t:.0f} s", file=log, flush=True)
    return ran, recs


def _work(out: str, cfgs: str, verbose: bool) -> int:
    """Worker: run the units of one family (JSON text) into the store `out`; returns how many
    it ran (finished ones, written by an earlier or concurrent run, are skipped)."""
    return _run_here(Store(out), json.loads(cfgs), log=sys.stderr if verbose else None)[0]


def _die_with(parent: int) -> None:
    """Worker initializer: exit as soon as `parent` is gone (killed, even by SIGKILL, its
    workers would otherwise compute and write on), and leave SIGINT to the parent, which ends
    its workers itself."""
    import signal
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="jaxmem-parent").start()


def run_units(cfgs: list[dict], out: str, *, jobs: int, log=None) -> int:
    """Run every unit of `cfgs` not yet done in the store `out`, by `jobs` worker processes
    (in this process when `jobs == 1`). Progress lines go to stderr when `log` is given.

    **Returns:** the number of units run."""
    store = Store(out)
    families: dict[str, list[dict]] = {}
    for cfg in cfgs:
        if not store.done(cfg):
            families.setdefault(family(cfg), []).append(cfg)
    if not families:
        return 0
    if jobs <= 1:
        return sum(_work(out, json.dumps(f), log is not None) for f in families.values())
    order = sorted(families.values(), key=_family_cost, reverse=True)
    if log is not None:
        n = sum(map(len, order))
        print(f"[{n} units in {len(order)} families, {jobs} worker processes]", file=log, flush=True)
    ctx = multiprocessing.get_context("spawn")  # never fork a process that runs JAX threads
    with cf.ProcessPoolExecutor(
        max_workers=min(jobs, len(order)), mp_context=ctx, initializer=_die_with, initargs=(os.getpid(),)
    ) as pool:
        futures = [pool.submit(_work, out, json.dumps(f), log is not None) for f in order]
        return sum(f.result() for f in futures)


def distinct_units(points: list[dict]) -> list[dict]:
    """Each unit of work once, in order (`--d 8 8`, or two kappas of one rank, name the same
    units)."""
    return list({config_id(c): c for c in points}.values())


def shard_units(points: list[dict], shard: tuple[int, int]) -> list[dict]:
    """The distinct units of `points` that shard `i/n` runs: every `n`-th from the `i`-th, in
    the order of `distinct_units` (what `measure` runs, and what a shard's plan counts)."""
    i, n = shard
    return [c for k, c in enumerate(distinct_units(points)) if k % n == i]


def measure(
    points: list[dict], *, store=None, shard: tuple[int, int] = (0, 1), log=None, jobs: int = 1
) -> list[dict]:
    """Run every unit of work of `points` (configs of any kind) for this `shard`, reading
    finished units from `store` (a `Store`, or None to keep nothing); returns the records of all
    units (this shard's run or read, the others' read if present). With `jobs > 1` (and a store)
    the units run in that many worker processes, with the same records."""
    i, n = shard
    if not (isinstance(i, int) and isinstance(n, int) and 0 <= i < n):
        raise InvalidArgument(f"shard must be i/n with 0 <= i < n, got {i}/{n}")
    check_int("jobs", jobs, 1)
    points = distinct_units(points)
    mine = shard_units(points, shard)
    if jobs > 1 and store is not None:
        run_units(mine, store.out, jobs=jobs, log=log)
    _, ran = _run_here(store, mine, log=log, trace=True)
    if store is None:
        return ran
    return [r for c in points for r in store.get(c) or []]
