"""Resumable sweeps and capacity estimates.

Store layout (`out/`):
    meta.json                   versions and device (written once, atomically)
    commands/<time-pid-id>.json one file per command run (never read-modified-written)
    records/<config-id>.jsonl   one JSON line per seed of one config, written atomically
                                (temp file + rename) once its vmapped ensemble has finished

A config's file either exists whole or not at all, so a run killed at any moment (even
`kill -9`) and restarted skips what is done and redoes only the unfinished config: the final
record set equals an uninterrupted run's. Several processes (hosts) may run disjoint slices
(`shard=(i, n)`) into one shared folder; readers merge every file.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from ._experiment import run_experiment
from ._files import atomic_write, clean_stale
from ._models import MODELS, resolve_kappa
from ._provenance import device_info, versions
from ._tasks import alpha_of, EMBEDDINGS, p_from_alpha, PROBLEMS
from ._train import DEFAULT_INIT_SCALE, DEFAULT_LR, DEFAULT_STEPS, NO_TRAINING, TrainConfig
from ._validate import check_choice, check_int, InvalidArgument


RECORD_VERSION = 1


@dataclass(frozen=True)
class Knobs:
    """Training knobs shared by every config of a sweep."""

    steps: int = DEFAULT_STEPS
    lr: float = DEFAULT_LR
    init_scale: float = DEFAULT_INIT_SCALE
    seeds: int = 8
    seed0: int = 0
    embedding: str = "gaussian"
    precision: str = "highest"

    def train_config(self) -> TrainConfig:
        """The validated `TrainConfig` these knobs describe."""
        return TrainConfig(steps=self.steps, lr=self.lr, init_scale=self.init_scale, precision=self.precision)


def make_config(*, d, p, problem, model, kappa, knobs: Knobs) -> dict:
    """Canonical config dict (the record's identity). Validates every field."""
    d = check_int("d", d, 2)
    p = check_int("p", p, 2)
    check_choice("problem", problem, PROBLEMS)
    check_choice("model", model, MODELS)
    _, kappa = resolve_kappa(model, d, kappa)
    hebb = model == "hebbian"
    check_int("seeds", knobs.seeds, 1, 1_000_000)
    check_int("seed0", knobs.seed0, 0, 2**31 - 1)  # keys alias beyond 32 bits
    check_choice("embedding", knobs.embedding, EMBEDDINGS)
    # validated for the Hebbian rule too (a bad value is refused, not ignored); the rule has no
    # training knobs, and its records store zeros for them
    train = knobs.train_config().identity()
    return dict(
        d=d,
        p=p,
        problem=problem,
        model=model,
        kappa=kappa,
        **(NO_TRAINING if hebb else train),
        seeds=knobs.seeds,
        seed0=knobs.seed0,
        embedding=knobs.embedding,
    )


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

    def done(self, cfg: dict) -> bool:
        return os.path.exists(self.path(cfg)) and self._read(self.path(cfg), cfg) is not None

    def load(self, cfg: dict) -> list[dict]:
        recs = self._read(self.path(cfg), cfg)
        if recs is None:
            raise RuntimeError(f"invalid record file {self.path(cfg)}")
        return recs

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

    def get_or_run(self, cfg: dict, *, progress: bool = False, detail: bool = True) -> list[dict]:
        """The records of `cfg`: read if finished, else run its ensemble and write atomically."""
        if self.done(cfg):
            return self.load(cfg)
        recs = run_records(cfg, progress=progress, detail=detail)
        self.write(cfg, recs)
        return recs

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


def _knobs_of(cfg: dict) -> dict:
    # precision is in a config only when it is not the default (old records stay readable)
    return {k: cfg[k] for k in ("steps", "lr", "init_scale", "precision") if k in cfg}


def run_records(cfg: dict, *, progress: bool = False, detail: bool = True) -> list[dict]:
    """Run one config's vmapped ensemble; one record per seed, config embedded."""
    res = run_experiment(
        d=cfg["d"],
        p=cfg["p"],
        problem=cfg["problem"],
        model=cfg["model"],
        kappa=cfg["kappa"] if cfg["model"] == "factored" else None,
        seeds=cfg["seeds"],
        seed0=cfg["seed0"],
        # exactly the config's knobs (the Hebbian rule has none)
        config=None if cfg["model"] == "hebbian" else TrainConfig(**_knobs_of(cfg)),
        embedding=cfg["embedding"],
        progress=progress,
    )
    recs = []
    for s, outcome in enumerate(res.outcomes):
        recs.append(
            dict(
                v=RECORD_VERSION,
                id=config_id(cfg),
                config=cfg,
                seed=s,
                alpha=alpha_of(cfg["d"], cfg["p"]),
                **outcome.to_json(detail),
                seconds=res.seconds / cfg["seeds"],
            )
        )
    return recs


# ---------------------------------------------------------------- grids and sweeps


@dataclass
class SweepSpec:
    ds: list[int]
    problems: list[str] = field(default_factory=lambda: ["op"])
    models: list[str] = field(default_factory=lambda: ["full"])
    kappas: list[float] | None = None  # factored only; default 1
    alphas: list[float] | None = None
    ps: list[int] | None = None
    knobs: Knobs = Knobs()

    def configs(self) -> list[dict]:
        if (self.alphas is None) == (self.ps is None):
            raise InvalidArgument("give exactly one of alphas and ps")
        if self.kappas is not None and "factored" not in self.models:
            raise InvalidArgument(f"kappa applies to the factored model only, got kappa={self.kappas}")
        out, seen = [], set()
        for d in self.ds:
            ps = self.ps if self.ps is not None else [p_from_alpha(d, a) for a in self.alphas]
            for problem in self.problems:
                for model in self.models:
                    for kappa in (self.kappas or [1.0]) if model == "factored" else [None]:
                        for p in ps:
                            cfg = make_config(
                                d=d, p=p, problem=problem, model=model, kappa=kappa, knobs=self.knobs
                            )
                            if config_id(cfg) not in seen:
                                seen.add(config_id(cfg))
                                out.append(cfg)
        return out


def run_sweep(
    spec: SweepSpec, out: str, *, shard: tuple[int, int] = (0, 1), progress: bool = True, log=sys.stderr
) -> Store:
    """Run every config of `spec` (this process's `shard` of them) into `out`, skipping done ones."""
    i, n = shard
    if not (0 <= i < n):
        raise InvalidArgument(f"shard must be i/n with 0 <= i < n, got {i}/{n}")
    store = Store(out)
    cfgs = spec.configs()[i::n]
    for k, cfg in enumerate(cfgs):
        cached = store.done(cfg)
        recs = store.get_or_run(cfg, progress=progress)
        if log is not None:
            frac = np.mean([r["all_stored"] for r in recs])
            print(
                f"[{k + 1}/{len(cfgs)}] d={cfg['d']} p={cfg['p']} {cfg['problem']} {cfg['model']}"
                f" kappa={cfg['kappa']:.2f}: all stored {frac:.2f}{' (cached)' if cached else ''}",
                file=log,
                flush=True,
            )
    return store
