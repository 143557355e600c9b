import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from jaxmem.cli import main
from jaxmem.cli._args import ArgumentError, grid
from jaxmem.study import atomic_write, estimate, Knobs, run, Store, Sweep, SweepSpec
from jaxmem.study._stats import logistic_fit


def _records(out):
    recs = Store(out).records()
    return sorted(json.dumps({k: v for k, v in r.items() if k != "seconds"}, sort_keys=True) for r in recs)


def _cli(args):
    return subprocess.Popen(
        [sys.executable, "-m", "jaxmem.cli", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


@pytest.mark.slow
def test_concurrent_shards_one_killed_lose_and_duplicate_nothing(tmp_path):
    """The multi-host path, and kill -9 resume: three processes write their slices into one
    folder at once; one of them is killed with kill -9 mid-run and rerun. The merged records
    equal a single process's run, each (config, seed) exactly once, every command's log entry
    survives, and a further rerun adds nothing."""
    shared, one = str(tmp_path / "shared"), str(tmp_path / "one")
    args = ["sweep", "--d", "8", "--alpha", "0.3:1.6:4", "--problem", "op", "dp", "--seeds", "2"]
    args += ["--steps", "150", "--quiet"]
    procs = [_cli(args + ["--out", shared, "--shard", f"{i}/3"]) for i in range(3)]
    rec_dir = os.path.join(shared, "records")
    t0 = time.time()
    while time.time() - t0 < 120:
        if os.path.isdir(rec_dir) and len([f for f in os.listdir(rec_dir) if f.endswith(".jsonl")]) >= 2:
            break
        time.sleep(0.02)
    assert procs[0].poll() is None, "shard 0 must still be running when it is killed"
    procs[0].send_signal(signal.SIGKILL)
    assert [p.wait() for p in procs] == [-signal.SIGKILL, 0, 0]
    assert 0 < len(_records(shared)) < 16, "the killed shard left its slice unfinished"
    assert _cli(args + ["--out", shared, "--shard", "0/3"]).wait() == 0
    assert _cli(args + ["--out", one]).wait() == 0
    recs = Store(shared).records()
    assert len({(r["id"], r["seed"]) for r in recs}) == len(recs) == 16, "none lost, none duplicated"
    assert _records(shared) == _records(one)
    assert len(Store(shared).commands()) == 4, "every command's log entry survives"
    assert _cli(args + ["--out", shared]).wait() == 0  # a rerun skips everything, adds nothing
    assert _records(shared) == _records(one)
    assert not [
        f
        for f in os.listdir(rec_dir)
        if f.endswith(".jsonl") and Store(shared)._read(os.path.join(rec_dir, f)) is None
    ]


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    path = str(tmp_path / "f.json")
    atomic_write(path, "old")

    with pytest.raises(TypeError, match="must be str"):
        atomic_write(path, 123)  # write fails midway
    with open(path) as f:
        assert f.read() == "old"
    assert [f for f in os.listdir(tmp_path) if f.startswith(".tmp")] == []


def test_parse_grid():
    assert grid("--alpha", ["0.3:1.2:4"], integral=False, low=0.0) == pytest.approx([0.3, 0.6, 0.9, 1.2])
    assert grid("--alpha", ["0.5", "0.7"], integral=False, low=0.0) == [0.5, 0.7]
    assert grid("--p", ["10:20:3"], integral=True, low=2) == [10, 15, 20]
    for spec in (["1:2"], ["0.1:1:100000000"], ["a"]):
        with pytest.raises(ArgumentError, match="--alpha"):
            grid("--alpha", spec, integral=False, low=0.0)


def test_logistic_fit_recovers_transition():
    rng = np.random.default_rng(0)
    x = np.repeat(np.log(np.arange(50, 150, 10)), 200)
    true = 1 / (1 + np.exp(-(-8.0 * (x - np.log(100)))))
    y = (rng.random(x.size) < true).astype(float)
    c0, c1 = logistic_fit(x, y)
    assert abs(np.exp(-c0 / c1) - 100) < 3


@pytest.mark.slow
def test_capacity_json_rows(tmp_path, capsys):
    out = str(tmp_path / "c")
    spec = SweepSpec(ds=[8], problems=["op"], alphas=[0.4, 0.9, 1.4, 1.9], knobs=Knobs(seeds=4, steps=300))
    run(Sweep(), spec, out)
    assert main(["capacity", out, "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    row = obj["rows"][0]
    for k in ("p_c", "alpha_c", "ci_low", "ci_high", "theory_alpha_c", "n_runs"):
        assert k in row
    assert row["n_runs"] == 16 and row["ci_low"] <= row["alpha_c"] <= row["ci_high"]
    rows = estimate(Store(out).records())
    assert rows[0]["alpha_c"] == pytest.approx(row["alpha_c"])


def test_capacity_of_empty_folder_exits_2(tmp_path, capsys):
    assert main(["capacity", str(tmp_path)]) == 2


def test_report_draws_a_sweep_folder(tmp_path, capsys):
    """`jaxmem report` on a folder of fixed-p ensembles: the logistic estimate's table and the
    sweep's figure, and nothing else written."""
    out = str(tmp_path / "s")
    args = [
        "sweep",
        "--d",
        "8",
        "--p",
        "6",
        "12",
        "30",
        "--seeds",
        "4",
        "--steps",
        "300",
        "--out",
        out,
        "--quiet",
    ]
    assert main(args) == 0
    recs = sorted(json.dumps(r.to_json(), sort_keys=True) for r in Store(out).records())
    capsys.readouterr()
    assert main(["report", out, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(r["d"], r["problem"], r["n_runs"]) for r in got["rows"]] == [(8, "op", 12)]
    assert got["studies"] == ["sweep"] and got["report"] == os.path.join(out, "sweep.md")
    with open(os.path.join(out, "sweep.md")) as f:
        text = f.read()
    assert "# jaxmem sweep report" in text and "| 8 | OP | full |" in text
    assert os.path.exists(os.path.join(out, "fig_sweep.png"))
    assert sorted(json.dumps(r.to_json(), sort_keys=True) for r in Store(out).records()) == recs
    empty = str(tmp_path / "e")
    os.makedirs(empty)
    assert main(["report", empty]) == 2
    assert "no threshold or sweep records" in capsys.readouterr().err


def test_a_sweep_record_holds_every_training_setting_and_runs_with_exactly_those(tmp_path, monkeypatch):
    """A sweep config stores every `TrainConfig` field; its ensemble runs with that config (a
    non-default `precision` reaches `train`), and a resumed folder whose unit was written in
    the older form (`precision` only when not "highest", no other extra field) runs nothing
    again."""
    import dataclasses

    from jaxmem import TrainConfig
    from jaxmem.study import _units, make_config, measure

    cfg = make_config(
        d=8, p=10, problem="op", model="full", kappa=None, knobs=Knobs(seeds=2, precision="bf16")
    )
    # `tail` is named only where given (a top-1 config keeps its identity)
    assert {f.name for f in dataclasses.fields(TrainConfig)} - {"tail"} <= set(cfg)
    assert cfg["precision"] == "bf16" and cfg["optimizer"] == "adam" and cfg["chunk"] == 100
    seen = []
    real = _units.run_experiment
    monkeypatch.setattr(_units, "run_experiment", lambda **k: seen.append(k["config"]) or real(**k))
    store = Store(str(tmp_path / "new"))
    measure([cfg], store=store)
    assert [c.identity() for c in seen] == [TrainConfig(precision="bf16").identity()]
    assert all(r["config"] == cfg for r in store.records())

    old = {k: v for k, v in cfg.items() if k not in ("optimizer", "chunk", "stream", "block", "early_stop")}
    old = {k: v for k, v in old.items() if k not in ("compact", "accuracy")}
    legacy = Store(str(tmp_path / "old"))
    legacy.write(old, [dict(r, config=old) for r in store.records()])
    seen.clear()
    measure([cfg], store=legacy)
    assert seen == [] and legacy.get(cfg) is not None
    other = make_config(d=8, p=10, problem="op", model="full", kappa=None, knobs=Knobs(seeds=2))
    assert legacy.get(other) is None  # "highest" is another unit


def test_sweeps_with_different_settings_are_never_pooled():
    """Ensembles that differ in a training setting or the embedding are separate rows (with
    their `setup`); an older config and a whole one that ran the same are one point."""
    from jaxmem.study import make_config

    def recs(knobs, p, stored, legacy=False):
        cfg = make_config(d=8, p=p, problem="op", model="full", kappa=None, knobs=knobs)
        if legacy:
            cfg = {
                k: v for k, v in cfg.items() if k in ("d", "p", "problem", "model", "kappa", "steps", "lr")
            }
            cfg.update(init_scale=Knobs().init_scale, seeds=2, seed0=0, embedding="gaussian")
        return [
            dict(config=cfg, seed=s, all_stored=ok, accuracy=1.0 if ok else 0.9)
            for s, ok in enumerate(stored)
        ]

    base, short = Knobs(seeds=2), Knobs(seeds=2, steps=300)
    records = []
    for p, ok in ((10, [True, True]), (20, [True, False]), (40, [False, False])):
        records += recs(base, p, ok) + recs(short, p, ok) + recs(base, p, ok, legacy=True)
    rows = estimate(records, n_boot=20, theory=False)
    assert sorted((r["setup"], r["n_runs"]) for r in rows) == [("steps 300", 6), ("—", 12)]
