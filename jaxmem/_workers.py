"""Units of work run by parallel worker processes that share one `Store` folder.

On the 2-core CPU a serial study keeps only about 1.5 cores busy: most of its units are
compilation, and their steps are too small to spread over threads. Workers (spawned processes,
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
    from ._validate import check_int, check_memory

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
    p = cfg.get("plan", {}).get("p_max") or max(cfg.get("p", [2]))
    seeds = cfg["seeds"][1] - cfg["seeds"][0]
    factor = {"adam": 7.0, "hebbian": 0.01}.get(cfg.get("solver"), 3.5 if cfg["problem"] == "dp" else 1.0)
    return 1e-7 * factor * seeds * p * p * cfg["d"]


def _family_cost(cfgs: list[dict]) -> float:
    """`_cost` summed, plus the family's compilation (about 20 s; 1 s for the Hebbian scan)."""
    return (1.0 if cfgs[0].get("solver") == "hebbian" else 20.0) + sum(map(_cost, cfgs))


def run_one(cfg: dict) -> list[dict]:
    """The records of one unit of work, threshold search or max-margin solve."""
    from ._measure import _release_compiled, run_unit
    from ._study import MARGIN_KIND, run_margin_unit

    _release_compiled()
    if cfg.get("kind") == MARGIN_KIND:
        return run_margin_unit(cfg)
    return run_unit(cfg)


def _label(cfg: dict) -> str:
    s0, s1 = cfg["seeds"]
    what = cfg.get("solver", cfg.get("kind"))
    return (
        f"d={cfg['d']} {cfg['problem']} {cfg['model']} kappa={cfg['kappa']:.2f} {what} "
        f"{cfg.get('embedding', 'gaussian')} seeds {s0}..{s1 - 1}"
    )


def _work(out: str, cfgs: str, verbose: bool) -> int:
    """Worker: run the units of one family (JSON text) into the store `out`; returns how many
    it ran (finished ones, written by an earlier or concurrent run, are skipped)."""
    from ._sweep import Store

    store, ran = Store(out), 0
    for cfg in json.loads(cfgs):
        if store.done(cfg):
            continue
        t = time.perf_counter()
        store.write(cfg, run_one(cfg))
        ran += 1
        if verbose:
            print(f"  {_label(cfg)}: done in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    return ran


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
    from ._sweep import Store

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
