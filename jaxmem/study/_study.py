"""Studies as one protocol: a named set of measurements, its presets, and the report written
from its records alone.

A study is an `AbstractStudy` in one file under `studies/` and one `register(...)` line there:

- `units(spec)`: its units of work for a preset `spec` (configs of the record system), and
  `later_units(spec, records)`: those that depend on finished records (the demo's max-margin
  memories at each seed's certified threshold);
- `tables(records)`: its tables from a folder's records (pure; None when the records hold
  nothing of this study);
- `figures(tables, out)`: draw them (only those with data), returning `{key: file name}`;
- `report(tables, figures, out)`: its markdown page; `summary(tables)`: the JSON beside it.

`run` measures a preset into a folder (resumable, by shards and worker processes) and marks the
folder with the study's name; `write` writes a study's page from the records; `studies_of` says
which studies wrote a folder (its marks, or for an unmarked folder the studies that claim its
records), which is what `jaxmem report DIR` renders.
"""

from __future__ import annotations

import abc
import json
import os
import time
from typing import Any, ClassVar

import equinox as eqx

from .._files import atomic_write
from .._validate import InvalidArgument
from ._records import ENSEMBLE_KIND, KIND, kind_of, MARGIN_KIND, normal_records, Store, where
from ._runner import check_jobs, distinct_units, measure, run_units, shard_units


class AbstractStudy(eqx.Module):
    """A study: what it measures (`units`, by preset) and what it reports (`tables`,
    `figures`, `report`, `summary`), all from records.

    Class attributes: `name` (the registry key and `jaxmem study NAME`), `title` (one line for
    `--help`), `presets` (`{name: spec}`, the first the default), `page` (the report's file name
    without `.md`; default `name`) and `generic` (a study that any folder of threshold records
    can be reported as: an unmarked folder of threshold records gets its page)."""

    name: ClassVar[str]
    title: ClassVar[str]
    presets: ClassVar[dict[str, Any]]
    page: ClassVar[str | None] = None
    generic: ClassVar[bool] = False

    @abc.abstractmethod
    def units(self, spec) -> list[dict]:
        """The units of work of the preset `spec`."""

    def later_units(self, spec, records: list[dict]) -> list[dict]:
        """Units that depend on the records of `units(spec)` (run once those are all done)."""
        return []

    def claims(self, records: list[dict]) -> bool:
        """Whether an unmarked folder with these records was written by this study."""
        return False

    @abc.abstractmethod
    def tables(self, records: list[dict]):
        """The study's tables from a folder's records (pure), or None if they hold nothing of it."""

    @abc.abstractmethod
    def figures(self, tables, out: str) -> dict[str, str]:
        """Draw the figures that have data into `out`: `{key: file name}`."""

    @abc.abstractmethod
    def report(self, tables, figures: dict[str, str], out: str) -> str:
        """The markdown page."""

    def summary(self, tables) -> dict | None:
        """The JSON written beside the page (None: none)."""
        return None

    def file(self) -> str:
        return f"{self.page or self.name}.md"


# name -> study; `register` adds one (a new study is one file and one `register` line)
STUDIES: dict[str, AbstractStudy] = {}


def register(study: AbstractStudy) -> AbstractStudy:
    """Add `study` to `STUDIES` under its name (a second study of one name is refused).

    **Returns:** `study`."""
    if not isinstance(study, AbstractStudy):
        raise InvalidArgument(f"study must be an AbstractStudy, got {type(study).__name__}")
    held = STUDIES.get(study.name)
    if held is not None and type(held) is not type(study):
        raise InvalidArgument(f"study name {study.name!r} is taken by {type(held).__name__}")
    STUDIES[study.name] = study
    return study


def study_of(name: str) -> AbstractStudy:
    """The registered study `name` (`InvalidArgument` naming the registered ones otherwise)."""
    if name not in STUDIES:
        raise InvalidArgument(f"study must be one of {', '.join(STUDIES)}; got {name!r}")
    return STUDIES[name]


def preset_of(study: AbstractStudy, preset: str | None):
    """The spec of `study`'s preset (its first when `preset` is None)."""
    if preset is None:
        return next(iter(study.presets.values()))
    if preset not in study.presets:
        raise InvalidArgument(
            f"preset of study {study.name} must be one of {', '.join(study.presets)}; got {preset!r}"
        )
    return study.presets[preset]


def by_kind(
    records: list[dict], *, every_criterion: bool = False
) -> tuple[list[dict], list[dict], list[dict]]:
    """A folder's records by kind: threshold (normalised), max-margin, and fixed-`p` sweep. The
    threshold records are those of the top-1 criterion, which every study's tables but the tail
    study's are about, unless `every_criterion` (a folder may also hold `tail:r` points)."""
    of = lambda kind: [r for r in records if kind_of(r) == kind]
    thr = normal_records(of(KIND))
    if not every_criterion:
        thr = where(thr, criterion="all")
    return thr, of(MARGIN_KIND), of(ENSEMBLE_KIND)


_MARKS = "studies"


def mark(out: str, name: str) -> None:
    """Note in `out` that study `name` writes there (one file per study, so concurrent shards
    and studies never lose each other's marks)."""
    atomic_write(os.path.join(out, _MARKS, f"{name}.json"), json.dumps(dict(study=name)) + "\n")


def marks(out: str) -> list[str]:
    folder = os.path.join(out, _MARKS)
    names = sorted(n[:-5] for n in os.listdir(folder) if n.endswith(".json")) if os.path.isdir(folder) else []
    return names


def studies_of(out: str, records: list[dict] | None = None) -> list[AbstractStudy]:
    """The studies whose report a folder gets: those marked in it (registry order); for an
    unmarked folder, the studies that claim its records and, where it holds threshold records,
    the generic one (the capacity page).
    `InvalidArgument` where none applies (or a mark names no registered study)."""
    records = Store(out).records() if records is None else records
    marked = marks(out)
    unknown = [n for n in marked if n not in STUDIES]
    if unknown:
        raise InvalidArgument(f"{out!r} was written by study {unknown[0]!r}, which is not registered")
    if marked:
        return [s for s in STUDIES.values() if s.name in marked]
    thresholds = any(r.get("kind") == KIND for r in records)
    claimed = [
        s for s in STUDIES.values() if (s.generic and thresholds) or (not s.generic and s.claims(records))
    ]
    if not claimed:
        raise InvalidArgument(f"no threshold or sweep records of any study under {out!r}")
    return claimed


def write(study: AbstractStudy, out: str, records: list[dict] | None = None):
    """Write `study`'s page (`out/<page>.md`), its figures and its summary JSON from the records
    in `out`; reads records, writes only those files.

    **Returns:** `(path of the page, tables)`."""
    records = Store(out).records() if records is None else records
    tables = study.tables(records)
    if tables is None:
        raise InvalidArgument(f"no records of study {study.name} under {out!r}")
    figures = study.figures(tables, out)
    path = os.path.join(out, study.file())
    atomic_write(path, study.report(tables, figures, out) + "\n")
    summary = study.summary(tables)
    if summary is not None:
        text = json.dumps(summary, indent=1, sort_keys=True) + "\n"
        atomic_write(os.path.join(out, f"{study.page or study.name}.json"), text)
    return path, tables


def plan(study: AbstractStudy, spec, shard: tuple[int, int] = (0, 1)) -> tuple[list[dict], list[dict]]:
    """The distinct units of `spec` and those that shard `i/n` runs."""
    units = distinct_units(study.units(spec))
    return units, shard_units(units, shard)


def run(
    study: AbstractStudy,
    spec,
    out: str,
    *,
    shard: tuple[int, int] = (0, 1),
    jobs: int = 1,
    log=None,
) -> dict:
    """Measure `spec` (a preset of `study`) into the folder `out`: this shard's units, then, once
    every shard's units are done, the units that depend on them (all of them, in this process).
    Resumable: finished units are read, not rerun; the records never depend on `shard` or
    `jobs`.

    **Returns:** `dict(seconds=..., units=..., left=...)`: the units of the preset and how many
    are not done yet (other shards')."""
    t0 = time.perf_counter()
    check_jobs(jobs)
    store = Store(out)
    mark(out, study.name)
    units = distinct_units(study.units(spec))
    recs = measure(units, store=store, shard=shard, log=log, jobs=jobs)
    left = sum(not store.done(u) for u in units)
    later = []
    if not left:
        later = study.later_units(spec, recs)
        todo = [c for c in later if not store.done(c)]
        if log is not None and todo:
            print(f"[{study.name}: {len(todo)} units that depend on the thresholds]", file=log, flush=True)
        # by whichever shard finds the others done (a unit is one atomic file: two shards that
        # both get here write the same records)
        run_units(later, out, jobs=jobs, log=log)
        left = sum(not store.done(c) for c in later)
    return dict(seconds=time.perf_counter() - t0, units=len(units) + len(later), left=left)


def copy_report(study: AbstractStudy, spec, source: str, dest: str):
    """Copy the records of `spec`'s units from the folder `source` (which must hold them all,
    and is only read) into `dest`, which must hold no other units' records, and write the
    study's page there.

    **Returns:** `(path of the page, number of units, seconds of search in their records)`."""
    if os.path.realpath(source) == os.path.realpath(dest):
        raise InvalidArgument(f"want a folder other than {source!r}, the one the study measured into")
    src, dst = Store(source), Store(dest)
    units = distinct_units(study.units(spec))
    units += study.later_units(spec, [r for u in units for r in src.get(u) or []])
    found = [src.find(u) for u in units]
    missing = sum(f is None for f in found)
    if missing:
        raise InvalidArgument(f"{missing} of {len(units)} units of this preset are not done in {source}")
    held = set(os.listdir(dst.records_dir)) if os.path.isdir(dst.records_dir) else set()
    other = sorted(n for n in held - {os.path.basename(p) for p, _ in found} if n.endswith(".jsonl"))
    if other:
        raise InvalidArgument(f"{dest} holds records of other units ({other[0]} and {len(other) - 1} more)")
    meta = os.path.join(source, "meta.json")
    if os.path.exists(meta) and not os.path.exists(os.path.join(dest, "meta.json")):
        with open(meta) as f:  # the versions and device the records were measured with
            atomic_write(os.path.join(dest, "meta.json"), f.read())
    for u in units:
        dst.copy_from(src, u)
    mark(dest, study.name)
    seconds = sum(r.get("seconds", 0.0) for _, recs in found for r in recs)
    return write(study, dest)[0], len(units), seconds
