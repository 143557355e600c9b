"""The command line shared by the study presets' scripts (`scaling.py`, `rank.py`): measure a
preset's units of work into `--out` (resumable, shardable for a SLURM array, `--plan` to list
them), then write its report once every unit is done. `--report DIR` writes the report of the
preset's units alone, from a folder that holds more."""

import argparse
import json
import os
import sys
import time

from jaxmem.study import atomic_write, measure, shard_units, Store


def run_preset(doc: str, units, quick_units, write, argv=None, more=None) -> None:
    """The script of a preset described by `doc`: `units` (or `quick_units` with `--quick`, or
    with `--NAME` the units of `more[NAME] = (units, help)`) are measured; `write(out)` writes the
    report of every record in `--out` and returns its path first."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="the minute-long check of the same path")
    ap.add_argument("--plan", action="store_true", help="print the units of work and stop")
    ap.add_argument("--json", action="store_true", help="with --plan: print one JSON object, the counts")
    ap.add_argument("--shard", default="0/1", help="i/n: run every n-th unit from the i-th")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument(
        "--report",
        metavar="DIR",
        help="measure nothing: copy the records of this preset's units from --out (which must hold "
        "them all) into DIR and write their report there; --out is only read",
    )
    more = more or {}
    for name, (_, text) in more.items():
        ap.add_argument(f"--{name}", action="store_true", help=text)
    a = ap.parse_args(argv)
    chosen = [name for name in more if getattr(a, name)] + (["quick"] if a.quick else [])
    if len(chosen) > 1:
        ap.error(f"argument --{chosen[0]}: not with --{chosen[1]}")
    try:
        i, n = (int(x) for x in a.shard.split("/"))
        if not 0 <= i < n:
            raise ValueError
    except ValueError:
        ap.error(f"argument --shard: want i/n with 0 <= i < n, got {a.shard!r}")
    if a.jobs < 1:
        ap.error(f"argument --jobs: want at least 1, got {a.jobs}")
    units = quick_units if a.quick else more[chosen[0]][0] if chosen else units
    if a.report is not None:
        _report(ap, a, units, write)
        return
    if a.plan:
        fields = ("d", "problem", "model", "kappa", "solver", "seeds")
        mine = shard_units(units, (i, n))
        if a.json:
            counts = (
                dict(units=len(units))
                if n == 1
                else dict(units=len(units), shard=a.shard, shard_units=len(mine))
            )
            print(json.dumps(counts))
            return
        for u in mine:
            print(json.dumps({f: u[f] for f in fields}))
        print(
            f"{len(units)} units of work" + ("" if n == 1 else f"; shard {i}/{n} runs the {len(mine)} above")
        )
        return
    t0 = time.perf_counter()
    store = Store(a.out)
    store.note_command(sys.argv)
    measure(units, store=store, shard=(i, n), log=sys.stderr, jobs=a.jobs)
    left = sum(not store.done(u) for u in units)
    if left:
        print(f"{left} of {len(units)} units left (other shards); the report is written once all are done")
        return
    path = write(a.out)[0]
    print(f"report: {path}   ({time.perf_counter() - t0:.0f} s)")


def _report(ap, a, units, write) -> None:
    """`--report DIR`: the preset's records copied from `--out` into `DIR`, and their report."""
    if a.plan:
        ap.error("argument --report: not with --plan")
    if os.path.realpath(a.report) == os.path.realpath(a.out):
        ap.error("argument --report: want a folder other than --out")
    source, dest = Store(a.out), Store(a.report)
    found = [source.find(u) for u in units]
    missing = sum(f is None for f in found)
    if missing:
        ap.error(f"argument --report: {missing} of {len(units)} units of this preset are not done in {a.out}")
    held = set(os.listdir(dest.records_dir)) if os.path.isdir(dest.records_dir) else set()
    other = sorted(n for n in held - {os.path.basename(path) for path, _ in found} if n.endswith(".jsonl"))
    if other:
        ap.error(
            f"argument --report: {a.report} holds records of other units "
            f"({other[0]} and {len(other) - 1} more)"
        )
    meta = os.path.join(a.out, "meta.json")
    if os.path.exists(meta) and not os.path.exists(os.path.join(a.report, "meta.json")):
        with open(meta) as f:  # the versions and device the records were measured with
            atomic_write(os.path.join(a.report, "meta.json"), f.read())
    dest.note_command(sys.argv)
    for u in units:
        dest.copy_from(source, u)
    seconds = sum(r["seconds"] for _, recs in found for r in recs)
    print(f"report: {write(a.report)[0]}   ({len(units)} units, {seconds:.0f} s of search in their records)")


if __name__ == "__main__":  # a module of the preset scripts, not one itself
    sys.exit("study_preset.py is the command line that scaling.py and rank.py share: run one of those")
