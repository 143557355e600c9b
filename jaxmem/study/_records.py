"""Records: typed, one frozen type per kind, in one `Store`, with one upgrade of older versions.

A record is one JSON object per seed of a unit of work: `v` (the record version), `kind` (which
of `KINDS` it is), `id` (the hash of `config`, also the name of the unit's file), `config`
(every setting the unit ran with), `seed`, and the fields its kind adds. A `Store` is a results
folder: one atomically written JSON-lines file per unit, merged on reading; every record it
reads is upgraded to the current version (`upgrade`) and built as its kind's type.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import sys
import time
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import optax

from .._files import atomic_write, clean_stale
from .._provenance import device_info, versions
from .._validate import InvalidArgument
from ..solvers._adam import TrainConfig
from ..solvers._decide import DecideConfig


RECORD_VERSION = 2


KIND = "threshold"


MARGIN_KIND = "maxmargin"


MECHANISM_KIND = "mechanism"


# a fixed-`p` Adam (or Hebbian) ensemble of `jaxmem sweep`; its config has no `kind`
ENSEMBLE_KIND = "ensemble"


def config_id(cfg: dict) -> str:
    return hashlib.sha1(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]


def expected_seeds(cfg: dict) -> list[int]:
    """The seeds a config's file must hold, each once: `range(s0, s1)` for a seed range
    `[s0, s1]`, `range(n)` for a count."""
    seeds = cfg["seeds"]
    return list(range(*seeds)) if isinstance(seeds, list) else list(range(int(seeds)))


def _plain(x):
    return x.item() if isinstance(x, np.generic) else x


def decide_fields(cfg: DecideConfig) -> dict:
    """Every field of a `DecideConfig`, as a record stores it."""
    return {f.name: _plain(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}


def train_fields(cfg: TrainConfig) -> dict:
    """Every field of a `TrainConfig`, as a record stores it (`TrainConfig.identity`): the
    optimizer by its `optax` name (one that `optax` does not name cannot be recorded, so it is
    refused)."""
    name = getattr(cfg.optimizer, "__name__", None)
    if name is None or getattr(optax, name, None) is not cfg.optimizer:
        raise InvalidArgument(
            f"adam_config.optimizer must be an optax function (a record names it); got {cfg.optimizer!r}"
        )
    return cfg.identity()


def kind_of(x: Mapping) -> str:
    """The kind of a record or of a unit's config (`ENSEMBLE_KIND` where it names none)."""
    return x.get("kind", ENSEMBLE_KIND)


class _Absent:
    """The value of a field that a row or record does not have (not None: None is a value)."""

    def __repr__(self):
        return "ABSENT"


ABSENT = _Absent()


class FieldMapping(Mapping):
    """A frozen dataclass whose fields also read as a mapping (`x["name"]`, `x.get`, `dict(x)`):
    how tables select and read records and rows by name. A field whose value is `ABSENT` (or
    that `absent` says is absent) is not in the mapping, nor in `to_json`."""

    def absent(self, name: str, value) -> bool:
        return value is ABSENT

    def _names(self):
        return [
            f.name
            for f in dataclasses.fields(self)
            if f.repr and not self.absent(f.name, getattr(self, f.name))
        ]

    def __getitem__(self, name: str) -> Any:
        if name in self.__dataclass_fields__ and name in self._names():
            return getattr(self, name)
        raise KeyError(name)

    def __iter__(self):
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def to_json(self) -> dict:
        """The fields as a JSON object (in declaration order, absent ones left out)."""
        return {k: getattr(self, k) for k in self._names()}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Record(FieldMapping):
    """A record of one seed of one unit of work: the envelope its kinds share.

    A record is frozen and typed; it also reads as a mapping of its fields (`r["p_star"]`,
    `r.get("hebbian_target")`), which is how tables select and read them. A field of `OPTIONAL`
    that is None is absent from the record (and from its JSON).

    **Fields:** `v` (record version), `kind`, `id` (`config_id(config)`), `config` (every setting
    the unit ran with), `seed`."""

    KIND: ClassVar[str] = ""
    # the config fields that an older record of this kind may lack, at what it ran with
    DEFAULTS: ClassVar[dict] = {}
    # what the config of a record of this kind must carry
    CONFIG: ClassVar[frozenset[str]] = frozenset({"d", "seeds"})
    # fields that some records of the kind do not have (None: absent)
    OPTIONAL: ClassVar[frozenset[str]] = frozenset()

    v: int
    kind: str
    id: str
    config: dict
    seed: int

    def __post_init__(self):
        hints = _hints(type(self))
        for f in dataclasses.fields(self):
            x = getattr(self, f.name)
            if x is None and f.name in self.OPTIONAL:
                continue
            if not _is(x, hints[f.name]):
                raise InvalidArgument(f"record: {self.kind} field {f.name} is not {hints[f.name]}: {x!r}")
        if self.kind != self.KIND or not self.CONFIG <= set(self.config):
            raise InvalidArgument(f"record: not a valid {self.KIND} record (kind {self.kind!r})")

    def absent(self, name: str, value) -> bool:
        return value is None and name in self.OPTIONAL

    @classmethod
    def from_json(cls, obj: Mapping) -> Record:
        """The record of a current-version JSON object; `ValueError` naming the field that is
        missing, unknown or of the wrong type."""
        names = {f.name for f in dataclasses.fields(cls)}
        extra = set(obj) - names
        missing = names - set(obj) - cls.OPTIONAL
        if extra or missing:
            raise InvalidArgument(
                f"record: a {cls.KIND} record has fields {sorted(names)}; missing {sorted(missing)}, "
                f"unknown {sorted(extra)}"
            )
        return cls(**{k: obj.get(k) for k in names})


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _is(x, hint) -> bool:
    """Whether a JSON value fits a field's type (a float field takes an integer, not a bool;
    a float field may be None where the value was not finite)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_is(x, h) for h in typing.get_args(hint))
    if hint is type(None):
        return x is None
    if hint is float:
        return isinstance(x, int | float) and not isinstance(x, bool)
    if hint is int:
        return isinstance(x, int) and not isinstance(x, bool)
    if hint is Any:
        return True
    return isinstance(x, origin or hint)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ThresholdRecord(Record):
    """One seed's threshold search: its storability bracket `[p_star, p_hi)` (`exact` where
    `p_hi = p_star + 1`; `censored` where no `p` tried up to `p_max` failed; `undecided` where the
    search stopped at an undecided instance) and every decision it made (`p`, `status`, `margin`,
    `margin_bound`, `iterations`)."""

    KIND: ClassVar[str] = KIND
    CONFIG: ClassVar[frozenset[str]] = frozenset(
        {"d", "problem", "model", "kappa", "solver", "seeds", "seed0", "embedding", "plan"}
    )
    # a config without `criterion` is top-1 (`all`)
    DEFAULTS: ClassVar[dict] = {"criterion": "all"}
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"rebound"})

    p_star: int
    p_hi: int
    exact: bool
    censored: bool
    p_max: int | None
    undecided: bool
    decisions: list
    seconds: float
    rebound: bool | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class MaxMarginRecord(Record):
    """One seed's max-margin memory at `p`: its certified margin and bound, status, iterations,
    active competitors per input, normalised singular values, and the target and best-competitor
    scores of it and (full-rank OP) of the Hebbian memory of the same task."""

    KIND: ClassVar[str] = MARGIN_KIND
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"hebbian_target", "hebbian_best"})

    p: int
    margin: float | None
    margin_bound: float | None
    gap: float | None
    status: str
    iterations: int
    active: list
    singular_values: list
    seconds: float
    max_margin_target: list
    max_margin_best: list
    hebbian_target: list | None = None
    hebbian_best: list | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class MechanismRecord(Record):
    """One seed of the mechanism study: the max-margin memory at a fraction `load` of its
    certified threshold, summarised (`max_margin`), beside the Hebbian memory and the theory's
    margin, water-level law and pooled count at the same `(p, alpha)` (full rank), or its gap to
    the full-rank margin (rank `m`)."""

    KIND: ClassVar[str] = MECHANISM_KIND
    _FULL = (
        "alpha", "status", "gap_certified", "margin_field", "margin_theory", "active", "pooled_theory",
        "law_target", "law_target_sd", "law0_target", "threshold", "hebbian", "hebbian_singular_values",
        "targets", "active_per_input", "law_targets",
    )  # fmt: skip
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"rank", "gap_to_full", *_FULL})

    p: int
    seconds: float
    margin: float
    load: float
    rank: int | None = None
    gap_to_full: float | None = None
    alpha: float | None = None
    status: str | None = None
    gap_certified: float | None = None
    margin_field: float | None = None
    margin_theory: float | None = None
    active: float | None = None
    pooled_theory: float | None = None
    law_target: float | None = None
    law_target_sd: float | None = None
    law0_target: float | None = None
    threshold: float | None = None
    max_margin: dict
    hebbian: dict | None = None
    singular_values: list
    hebbian_singular_values: list | None = None
    targets: list | None = None
    active_per_input: list | None = None
    law_targets: list | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnsembleRecord(Record):
    """One instance of a fixed-`(d, p)` ensemble (`jaxmem sweep`): trained by Adam or built by
    the Hebbian rule, its accuracy, whether all were stored and when, and its scores."""

    KIND: ClassVar[str] = ENSEMBLE_KIND
    DEFAULTS: ClassVar[dict] = dict(train_fields(TrainConfig()), embedding="gaussian")
    CONFIG: ClassVar[frozenset[str]] = frozenset({"d", "p", "problem", "model", "kappa", "seeds", "seed0"})

    alpha: float
    accuracy: float
    all_stored: bool
    steps_to_store: int | None
    diverged: bool
    final_loss: float | None
    target_score: list
    best_score: list
    singular_values: list
    seconds: float


# the record types by kind: what a `Store` builds from each line
KINDS: dict[str, type[Record]] = {
    t.KIND: t for t in (ThresholdRecord, MaxMarginRecord, MechanismRecord, EnsembleRecord)
}


def upgrade(obj: Mapping) -> dict:
    """A record's JSON object in the current version. Version 1 becomes version 2: an ensemble
    record gets its `kind`; a threshold record gets its config in today's form (`normal_config`,
    its `id` with it) and its `censored` and `p_max` where it lacked them (from its plan).

    **Returns:** a new dict; `ValueError` for a version this one does not know."""
    v = obj.get("v")
    if v == RECORD_VERSION:
        return dict(obj)
    if v != 1:
        raise InvalidArgument(f"record: version {v!r} is not one this jaxmem reads (1 or {RECORD_VERSION})")
    rest = {k: x for k, x in obj.items() if k not in ("v", "kind")}
    out = dict(v=RECORD_VERSION, kind=kind_of(obj), **rest)
    if out["kind"] == KIND:
        cfg = normal_config(obj["config"])
        p_max = out.get("p_max", cfg.get("plan", {}).get("p_max"))
        out.update(id=config_id(cfg), config=cfg)
        out.setdefault("censored", p_max is not None and out["p_hi"] > p_max)
        out.setdefault("p_max", p_max)
        # in declaration order
        names = [f.name for f in dataclasses.fields(ThresholdRecord)]
        out = {k: out[k] for k in names if k in out} | {k: x for k, x in out.items() if k not in names}
    return out


def as_record(obj: Mapping) -> Record:
    """`obj` as its kind's typed record (a typed record as it is; a JSON object of any known
    version upgraded first); `ValueError` where it is not a valid record."""
    if isinstance(obj, Record):
        return obj
    obj = upgrade(obj)
    kind = obj.get("kind")
    if kind not in KINDS:
        raise InvalidArgument(f"record: kind must be one of {sorted(KINDS)}; got {kind!r}")
    return KINDS[kind].from_json(obj)


class Store:
    """A results folder: one atomically written JSON-lines file per config, merged reading.

    Nothing is created until something is written. A file whose lines do not parse, whose
    records do not carry its config, or whose count is wrong is invalid: its config counts as
    not done (and is rerun by a run), and readers skip it with a warning naming the file.
    """

    def __init__(self, out: str):
        self.out = out
        self.records_dir = os.path.join(out, "records")
        self._cleaned = False

    def path(self, cfg: dict) -> str:
        return os.path.join(self.records_dir, config_id(cfg) + ".jsonl")

    def _read(self, path: str, cfg: dict | None = None) -> list[Record] | None:
        """The typed records of one file (each upgraded to the current version), or None where
        the file is invalid: a line that does not parse or is not a record of its config's kind,
        records of another config, a seed missing or twice, or a name other than its config's
        id."""
        try:
            with open(path) as f:
                recs = [json.loads(line) for line in f if line.strip()]
        except (OSError, ValueError):
            return None
        if not recs or not all(isinstance(r, dict) and isinstance(r.get("config"), dict) for r in recs):
            return None
        want = recs[0]["config"] if cfg is None else cfg
        if (
            any(r["config"] != want or kind_of(r) != kind_of(want) for r in recs)
            or sorted(r.get("seed", -1) for r in recs) != expected_seeds(want)  # none missing, none twice
            or os.path.basename(path) != config_id(want) + ".jsonl"
        ):
            return None
        try:
            return [as_record(r) for r in recs]
        except (InvalidArgument, KeyError, TypeError):
            return None

    def unit(self, unit_id: str) -> list[Record] | None:
        """The records of the unit whose file is `unit_id` (`config_id` of its config, as
        written), if that file is there and valid, else None."""
        return self._read(os.path.join(self.records_dir, f"{unit_id}.jsonl"))

    def find(self, cfg: dict) -> tuple[str, list[dict]] | None:
        """`(path, records)` of `cfg`'s valid record file (found as by `get`), else None."""
        for c in (cfg, sweep_legacy_config(cfg), threshold_legacy_config(cfg)):
            if c is not None and os.path.exists(self.path(c)):
                recs = self._read(self.path(c), c)
                return None if recs is None else (self.path(c), recs)
        return None

    def get(self, cfg: dict) -> list[dict] | None:
        """The records of `cfg` if its file is there and valid, else None. A config is also
        found under the older form it had where it ran the same (`sweep_legacy_config`,
        `threshold_legacy_config`), so a resumed folder runs nothing twice."""
        found = self.find(cfg)
        return None if found is None else found[1]

    def copy_from(self, source: Store, cfg: dict) -> None:
        """Copy `cfg`'s valid record file (found as by `get`) from the folder `source` into
        this one, under its own name; `ValueError` where `source` has none."""
        found = source.find(cfg)
        if found is None:
            raise InvalidArgument(f"cfg: no valid records of this unit under {source.out!r}")
        self._clean()
        with open(found[0]) as f:
            atomic_write(os.path.join(self.records_dir, os.path.basename(found[0])), f.read())

    def done(self, cfg: dict) -> bool:
        return self.get(cfg) is not None

    def _clean(self) -> None:
        """Once per store, before its first write: the temp files that writers which died
        mid-write left in the folder, its `records/` and its `commands/`."""
        if not self._cleaned:
            for folder in (self.out, self.records_dir, os.path.join(self.out, "commands")):
                clean_stale(folder)
            self._cleaned = True

    def write(self, cfg: dict, recs: list[Record | dict]) -> None:
        """Write a unit's records (typed, or JSON objects of any known version, written in the
        current one) as its file, atomically."""
        recs = [as_record(r).to_json() for r in recs]
        if any(r["config"] != cfg for r in recs):
            raise InvalidArgument("recs: every record written under a config must be of that config")
        self._clean()
        atomic_write(self.path(cfg), "".join(json.dumps(r, allow_nan=False) + "\n" for r in recs))

    def records(self, warn: bool = True) -> list[Record]:
        """Every valid record in the folder (all processes' files merged), typed and in the
        current version; an invalid file is skipped with a warning on stderr naming it (unless
        `warn` is false)."""
        out = []
        if not os.path.isdir(self.records_dir):
            return out
        for name in sorted(os.listdir(self.records_dir)):
            if name.endswith(".jsonl"):
                path = os.path.join(self.records_dir, name)
                recs = self._read(path)
                if recs is None:
                    if warn:
                        print(f"jaxmem: warning: skipping invalid record file {path}", file=sys.stderr)
                    continue
                out += recs
        return out

    def rewrite(self) -> int:
        """Rewrite every valid record file of the folder in the current version, atomically (a
        file whose config's id changed with its upgrade is written under the new id, then the old
        one removed); invalid files are left as they are.

        **Returns:** how many files were rewritten."""
        n = 0
        names = sorted(os.listdir(self.records_dir)) if os.path.isdir(self.records_dir) else []
        for name in names:
            path = os.path.join(self.records_dir, name)
            recs = self._read(path) if name.endswith(".jsonl") else None
            if recs is None:
                continue
            self.write(recs[0].config, recs)
            if self.path(recs[0].config) != path:
                os.remove(path)
            n += 1
        return n

    def note_command(self, argv: list[str]) -> None:
        """Log a command: `meta.json` (versions, device; written once, rewritten only if
        unreadable) and one new file per command under `commands/`, so concurrent commands
        never lose each other's entries."""
        import uuid

        self._clean()
        path = os.path.join(self.out, "meta.json")
        try:
            with open(path) as f:
                json.load(f)
        except (OSError, ValueError):
            if os.path.exists(path):  # unreadable: kept beside, never silently replaced
                aside = f"{path}.invalid-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
                os.replace(path, aside)
                print(f"jaxmem: warning: unreadable {path} moved to {aside}", file=sys.stderr)
            meta = dict(
                created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                record_version=RECORD_VERSION,
                versions=versions(),
                device=device_info(),
            )
            atomic_write(path, json.dumps(meta, indent=1))
        at = time.strftime("%Y%m%dT%H%M%S")
        entry = dict(argv=list(argv), pid=os.getpid(), at=at, versions=versions(), device=device_info())
        atomic_write(
            os.path.join(self.out, "commands", f"{at}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json"),
            json.dumps(entry, indent=1),
        )

    def commands(self) -> list[dict]:
        """Every logged command, oldest first."""
        folder = os.path.join(self.out, "commands")
        out = []
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            if name.endswith(".json"):
                with open(os.path.join(folder, name)) as f:
                    out.append(json.load(f))
        return out


def finite_or_none(x):
    """`float(x)`, or None where `x` is not finite (JSON has no infinities)."""
    return float(x) if math.isfinite(x) else None


def envelope(cfg: dict, seed: int, **fields) -> Record:
    """One record of `cfg`'s kind: the envelope (`v`, `kind`, `id`, `config`, `seed`) and its
    kind's `fields`; `ValueError` where a field is missing, unknown or of the wrong type."""
    kind = kind_of(cfg)
    return KINDS[kind].from_json(
        dict(v=RECORD_VERSION, kind=kind, id=config_id(cfg), config=cfg, seed=seed, **fields)
    )


# The fields of `TrainConfig` beside `steps`, `lr` and `init_scale`: a sweep config holds them
# all; one written before held `precision` only when not "highest", and none of the others.
_SWEEP_EXTRA = ("optimizer", "chunk", "stream", "block", "precision", "early_stop", "compact", "accuracy")


def sweep_settings(cfg: dict) -> TrainConfig:
    """The `TrainConfig` a sweep ensemble runs with: exactly its config's training fields (an
    older config's missing fields at their defaults, which are what it ran with)."""
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    train = {k: v for k, v in cfg.items() if k in fields}
    if "optimizer" in train:
        train["optimizer"] = getattr(optax, train["optimizer"])
    return TrainConfig(**train)


def sweep_legacy_config(cfg: dict) -> dict | None:
    """The form a sweep config had before records held their settings whole, where it ran the
    same (every other field at its default then, as now); None for any other config."""
    if "kind" in cfg or "optimizer" not in cfg:
        return None
    default = train_fields(TrainConfig())
    if any(cfg[k] != default[k] for k in _SWEEP_EXTRA if k != "precision"):
        return None
    drop = set(_SWEEP_EXTRA) - ({"precision"} if cfg["precision"] != "highest" else set())
    return {k: v for k, v in cfg.items() if k not in drop}


def threshold_legacy_config(cfg: dict) -> dict | None:
    """The form a threshold config had before `DecideConfig.warm_start`, where it ran the same
    (cold starts); None for any other config."""
    decide = cfg.get("decide") if cfg.get("kind") == KIND else None
    if not decide or decide.get("warm_start") is not False:
        return None
    return dict(cfg, decide={k: v for k, v in decide.items() if k != "warm_start"})


def unit_settings(cfg: dict) -> tuple[DecideConfig, TrainConfig]:
    """The settings a threshold unit runs with, rebuilt from its (normal) config: exactly the
    recorded fields (a solver that uses none gets the defaults)."""
    cfg = normal_config(cfg)
    decide = DecideConfig(**cfg.get("decide", {}))
    adam = dict(cfg.get("adam", {}))
    if "optimizer" in adam:
        adam["optimizer"] = getattr(optax, adam["optimizer"])
    return decide, TrainConfig(**adam)


# the flat settings of threshold configs written before records held their settings whole
_OLD_DECIDE = ("tol", "max_iter", "memory", "decider", "working_set", "outer_every")
_OLD_ADAM = ("steps", "lr", "init_scale", "accuracy", "precision")


def normal_config(cfg: dict) -> dict:
    """A threshold config in the current form: settings whole under `decide` and `adam`. An
    older config (flat `tol`, `max_iter`, `memory`, Adam's `steps`, `lr`, `init_scale`,
    `accuracy`; no `decider` meant dense) becomes the settings it ran with, every other field
    at its default then, which is today's; a `decide` without `warm_start` started every
    decision from `W = 0`."""
    if cfg.get("kind") != KIND:
        return cfg
    if "decide" in cfg or "adam" in cfg:
        decide = cfg.get("decide", {})
        if decide.get("decider") == "dense" and decide.get("working_set") is not None:
            # the working set's size does not apply to the dense decider; records written while
            # it defaulted to 32 name it
            decide = dict(decide, working_set=None)
        if "decide" in cfg and "warm_start" not in decide:
            decide = dict(decide, warm_start=False)
        return dict(cfg, decide=decide) if "decide" in cfg else cfg
    out = {k: v for k, v in cfg.items() if k not in (*_OLD_DECIDE, *_OLD_ADAM)}
    if cfg["solver"] != "hebbian":
        old = {k: cfg[k] for k in _OLD_DECIDE if k in cfg}
        out["decide"] = decide_fields(DecideConfig(**{"decider": "dense", "warm_start": False, **old}))
    if cfg["solver"] == "adam":
        out["adam"] = train_fields(TrainConfig(**{k: cfg[k] for k in _OLD_ADAM if k in cfg}))
    return out


def normal_records(records: list[dict]) -> list[dict]:
    """`records` with every threshold config in its current form (`normal_config`)."""
    return [dict(r, config=normal_config(r["config"])) for r in records]


def criterion(cfg: dict) -> float | str:
    """What counts as stored in a threshold config: the fraction of associations Adam must
    store (1.0: all, top-1), or the name of another certified criterion (`"tail:0.1"`)."""
    if cfg.get("criterion", "all") != "all":
        return cfg["criterion"]
    return normal_config(cfg).get("adam", {}).get("accuracy", 1.0)


def flat_settings(cfg: dict) -> dict:
    """A config with its settings flattened (`decide.tol`, `adam.lr`), less the seed range."""
    out = {}
    for k, v in normal_config(cfg).items():
        if k in ("decide", "adam"):
            out.update({f"{k}.{f}": x for f, x in v.items()})
        elif k not in ("seeds", "id"):
            out[k] = v
    return out


@dataclasses.dataclass(frozen=True, order=True)
class PointKey:
    """What makes a measurement point: its kind, memory and solver, and every other field of
    its config but the seed range as `(name, JSON value)` pairs sorted by name (`settings`).
    Records that differ in any setting, `seed0` included, are different measurements, never
    merged. Hashable and ordered."""

    kind: str
    d: int
    problem: str
    model: str
    kappa: float
    solver: str
    settings: tuple[tuple[str, str], ...]


# the fields that name a point's memory and solver (the rest are its settings)
HEAD_FIELDS = ("kind", "d", "problem", "model", "kappa", "solver")


def point_key(cfg: dict) -> PointKey:
    """The `PointKey` of a (threshold) config."""
    flat = flat_settings(cfg)
    rest = tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in flat.items() if k not in HEAD_FIELDS))
    return PointKey(*(flat.get(k, "") for k in HEAD_FIELDS), rest)


def where(records: list[Mapping], **fields) -> list[Mapping]:
    """The records whose config, flattened (`flat_settings`), has every field of `fields` at its
    value; a field a config lacks takes its kind's default (`Record.DEFAULTS`: what the record
    ran with), else matches nothing. `kind` selects on the record's kind. A setting is named with
    `__` for the dot (`decide__tol=1e-5`); a float matches within 1e-6 (`kappa` is a ratio of
    integers). Rows of a table (mappings without a `config`) are selected on their own fields.

    **Returns:** the selected records (or rows), in their order."""
    want = {k.replace("__", "."): v for k, v in fields.items()}
    missing = object()

    def same(x, v):
        if isinstance(v, float) and isinstance(x, int | float) and not isinstance(x, bool):
            return abs(x - v) < 1e-6
        return x == v

    out = []
    for r in records:
        if "config" in r:
            kind = kind_of(r)
            cfg = KINDS[kind].DEFAULTS | flat_settings(r["config"]) | {"kind": kind}
        else:
            cfg = r
        if all(same(cfg.get(k, missing), v) for k, v in want.items()):
            out.append(r)
    return out
