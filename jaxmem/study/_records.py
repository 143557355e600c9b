"""Records: one envelope, one `Store`, the normal form of a config and one `select`.

A record is one JSON object per seed of a unit of work: `v` (the envelope's version), `kind`
(absent for a `jaxmem sweep` ensemble), `id` (the hash of `config`, also the name of the unit's
file), `config` (every setting the unit ran with), `seed`, and the fields its kind adds. A
`Store` is a results folder: one atomically written JSON-lines file per unit, merged on reading.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sys
import time

import numpy as np
import optax

from .._files import atomic_write, clean_stale
from .._provenance import device_info, versions
from .._train import TrainConfig
from .._validate import InvalidArgument
from ..solvers._decide import DecideConfig


RECORD_VERSION = 1


KIND = "threshold"


MARGIN_KIND = "maxmargin"


MECHANISM_KIND = "mechanism"


def config_id(cfg: dict) -> str:
    return hashlib.sha1(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]


def expected_seeds(cfg: dict) -> list[int]:
    """The seeds a config's file must hold, each once: `range(s0, s1)` for a seed range
    `[s0, s1]`, `range(n)` for a count."""
    seeds = cfg["seeds"]
    return list(range(*seeds)) if isinstance(seeds, list) else list(range(int(seeds)))


# What every record of a kind must carry beside `config` and `seed` (a file missing any is
# invalid: skipped by readers, rerun by runs), and what its config must carry.
_FIELDS = {
    None: ({"all_stored"}, {"d", "p", "problem", "model", "kappa", "seeds", "seed0"}),
    "threshold": (
        {"p_star", "p_hi", "exact", "undecided", "decisions", "seconds"},
        {"d", "problem", "model", "kappa", "solver", "seeds", "seed0", "embedding", "plan"},
    ),
}


def _complete(recs: list[dict]) -> bool:
    kind = recs[0].get("kind")
    fields, cfg_fields = _FIELDS.get(kind, (set(), {"d", "seeds"}))
    cfg = recs[0]["config"]
    return (
        isinstance(cfg, dict)
        and cfg_fields <= set(cfg)
        and all({"seed", *fields} <= set(r) and r.get("kind") == kind for r in recs)
    )


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

    def _read(self, path: str, cfg: dict | None = None) -> list[dict] | None:
        try:
            with open(path) as f:
                recs = [json.loads(line) for line in f if line.strip()]
        except (OSError, ValueError):
            return None
        if not recs or not all(isinstance(r, dict) and "config" in r for r in recs):
            return None
        want = recs[0]["config"] if cfg is None else cfg
        if (
            not _complete(recs)
            or any(r["config"] != want for r in recs)
            or sorted(r["seed"] for r in recs) != expected_seeds(want)  # none missing, none twice
            or os.path.basename(path) != config_id(want) + ".jsonl"
        ):
            return None
        return recs

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

    def write(self, cfg: dict, recs: list[dict]) -> None:
        self._clean()
        atomic_write(self.path(cfg), "".join(json.dumps(r, allow_nan=False) + "\n" for r in recs))

    def records(self, warn: bool = True) -> list[dict]:
        """Every valid record in the folder (all processes' files merged); an invalid file is
        skipped with a warning on stderr naming it (unless `warn` is false)."""
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


def envelope(cfg: dict, seed: int, **fields) -> dict:
    """One record: the envelope (`v`, the config's `kind` where it has one, `id`, `config`,
    `seed`), then its kind's `fields`."""
    kind = {"kind": cfg["kind"]} if "kind" in cfg else {}
    return dict(v=RECORD_VERSION, **kind, id=config_id(cfg), config=cfg, seed=seed, **fields)


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


def criterion(cfg: dict) -> float:
    """What counts as stored in a threshold config: the fraction of associations (1.0: all)."""
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


def select(records: list[dict], **where) -> list[dict]:
    """The records whose config, in normal form and flattened (`flat_settings`), has every
    field of `where` at its value. A setting is named with `__` for the dot
    (`decide__tol=1e-5`); a float matches within 1e-6 (`kappa` is a ratio of integers); a
    field a config lacks matches nothing.

    **Returns:** the selected records, in their order."""
    want = {k.replace("__", "."): v for k, v in where.items()}
    missing = object()

    def same(x, v):
        if isinstance(v, float) and isinstance(x, int | float) and not isinstance(x, bool):
            return abs(x - v) < 1e-6
        return x == v

    out = []
    for r in records:
        cfg = flat_settings(r["config"])
        if all(same(cfg.get(k, missing), v) for k, v in want.items()):
            out.append(r)
    return out
