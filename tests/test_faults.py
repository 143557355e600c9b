"""Faults a run must not have: records that describe exactly what ran, lossless command
logs under concurrency, JSON without NaN, refused aliasing seeds, group-readable files, and
invalid record files rerun instead of counted."""

import json
import multiprocessing as mp
import os
import stat

import pytest
from helpers import ensemble_records
from jaxmem.cli import main
from jaxmem.study import Knobs, make_config, Store


def _one_line_err(capsys, name):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and name in err[0], err


def test_fault_records_lie_steps_zero_is_run_as_zero(tmp_path, capsys):
    out = str(tmp_path / "x")
    assert (
        main(["sweep", "--d", "8", "--p", "10", "--seeds", "2", "--steps", "0", "--out", out, "--quiet"]) == 0
    )
    recs = Store(out).records()
    assert len(recs) == 2
    for r in recs:
        assert r["config"]["steps"] == 0
        assert r["steps_to_store"] in (None, 0) and (r["steps_to_store"] == 0) == r["all_stored"]


@pytest.mark.parametrize(
    "flag,value,name",
    [
        ("--lr", "0", "lr"),
        ("--init-scale", "0", "--init-scale"),
        ("--seed0", "4294967296", "seed0"),
        ("--seed0", "-1", "seed0"),
    ],
)
def test_fault_sweep_knob_out_of_range_exits_2(tmp_path, capsys, flag, value, name):
    out = tmp_path / "y"
    rc = main(["sweep", "--d", "8", "--p", "10", "--seeds", "2", flag, value, "--out", str(out), "--quiet"])
    assert rc == 2
    _one_line_err(capsys, name)
    assert not out.exists(), "a refused command writes nothing"


def _log(out):
    Store(out).note_command(["jaxmem", "sweep", str(os.getpid())])


def test_fault_concurrent_commands_lose_no_metadata(tmp_path):
    out = str(tmp_path / "z")
    procs = [mp.get_context("spawn").Process(target=_log, args=(out,)) for _ in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    cmds = Store(out).commands()
    assert len(cmds) == 8 and len({c["argv"][2] for c in cmds}) == 8
    with open(os.path.join(out, "meta.json")) as f:
        assert "versions" in json.load(f)


def test_fault_json_output_has_no_nan(capsys):
    assert main(["theory", "capacity", "--p", "3", "--margin", "1e160", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)  # strict JSON: NaN would not parse as a number here
    assert all(v is None or isinstance(v, (int, float, str)) for k, v in obj.items() if k != "nonfinite")
    assert obj["alpha_c"] is None and "alpha_c" in obj["nonfinite"]


def test_fault_files_are_group_readable(tmp_path):
    old = os.umask(0o022)
    try:
        store = Store(str(tmp_path / "w"))
        cfg = make_config(d=8, p=10, problem="op", model="hebbian", kappa=None, knobs=Knobs(seeds=1))
        store.write(cfg, ensemble_records(cfg))
        mode = stat.S_IMODE(os.stat(store.path(cfg)).st_mode)
    finally:
        os.umask(old)
    assert mode == 0o644


def test_fault_empty_or_corrupt_record_file_is_rerun(tmp_path, capsys):
    out = str(tmp_path / "v")
    args = [
        "sweep",
        "--d",
        "8",
        "--p",
        "10",
        "12",
        "--model",
        "hebbian",
        "--seeds",
        "3",
        "--out",
        out,
        "--quiet",
    ]
    assert main(args) == 0
    store = Store(out)
    files = sorted(os.listdir(store.records_dir))
    assert len(files) == 2
    open(os.path.join(store.records_dir, files[0]), "w").close()  # emptied
    with open(os.path.join(store.records_dir, files[1]), "a") as f:
        f.write("{not json\n")  # a corrupted line
    capsys.readouterr()
    assert store.records(warn=False) == []
    assert main(["capacity", out]) == 2, "no valid records left"
    err = capsys.readouterr().err
    assert files[0] in err and files[1] in err, "the warning names the file"
    assert main(args) == 0
    assert len(store.records()) == 6, "both configs were rerun"


def _snapshot(folder):
    out = {}
    for root, _, files in os.walk(folder):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                out[os.path.relpath(os.path.join(root, f), folder)] = fh.read()
    return out


@pytest.mark.slow
def test_fault_report_on_diverged_records_reads_only(tmp_path, capsys):
    out = str(tmp_path / "dv")
    args = ["sweep", "--d", "8", "--p", "10", "14", "18", "--seeds", "2", "--steps", "50", "--lr", "1e37"]
    assert main(args + ["--out", out, "--quiet"]) == 0
    assert all(r["diverged"] for r in Store(out).records())
    before = {k: v for k, v in _snapshot(out).items() if k.startswith(("records", "commands", "meta"))}
    capsys.readouterr()
    assert main(["report", out, "--json"]) == 0  # the sweep's section only
    assert json.loads(capsys.readouterr().out)["report"].endswith("report.md")
    after = {k: v for k, v in _snapshot(out).items() if k.startswith(("records", "commands", "meta"))}
    assert after == before, "report trains nothing and writes no records"
    assert main(["capacity", out, "--json"]) == 0  # all runs diverged: no estimate, strict JSON
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows and all(r["alpha_c"] is None and "alpha_c" in r["nonfinite"] for r in rows)
    assert main(["sweep", "--d", "8", "--p", "10", "14", "--out", str(tmp_path / "plan"), "--plan"]) == 0
    assert capsys.readouterr().out.strip() == "2 units of work"
    assert not os.path.exists(tmp_path / "plan"), "--plan writes nothing"


def test_fault_stale_temp_files_of_dead_writers_are_removed(tmp_path):
    import socket
    import subprocess
    import sys

    from jaxmem._files import clean_stale

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store = Store(str(tmp_path / "s"))
    os.makedirs(store.records_dir)
    stale = os.path.join(store.records_dir, f".tmp-{socket.gethostname()}-{dead.pid}-abc.part")
    live = os.path.join(store.records_dir, f".tmp-{socket.gethostname()}-{os.getpid()}-abc.part")
    for path in (stale, live):
        open(path, "w").close()
    cfg = make_config(d=8, p=10, problem="op", model="hebbian", kappa=None, knobs=Knobs(seeds=1))
    store.write(cfg, ensemble_records(cfg))
    assert not os.path.exists(stale) and os.path.exists(live), "only a dead writer's file goes"
    assert clean_stale(store.records_dir) == []


def test_fault_figures_are_written_atomically_and_group_readable(tmp_path):
    import matplotlib.pyplot as plt
    from jaxmem.study import save_figure

    old = os.umask(0o022)
    try:
        fig, _ = plt.subplots()
        name = save_figure(fig, str(tmp_path), "f")
    finally:
        os.umask(old)
    assert name == "f.png"
    for ext in ("png", "pdf"):
        assert stat.S_IMODE(os.stat(tmp_path / f"f.{ext}").st_mode) == 0o644
    assert [f for f in os.listdir(tmp_path) if f.startswith(".tmp")] == []


def test_fault_python_api_refuses_bad_values_and_accepts_numpy_scalars():
    import jax
    import jax.numpy as jnp
    import jaxmem as jm
    import numpy as np
    from jaxmem import theory as th

    tasks = jm.make_tasks(jax.random.key(0), n=3, d=8, p=10)
    for kwargs, name in [
        (dict(lr=[0.1, 0.2]), "lr"),
        (dict(block=0), "block"),
        (dict(kappa=0.5), "kappa"),
    ]:
        with pytest.raises(ValueError, match=name):
            jm.train(jm.FullRank, tasks, progress=False, **kwargs)
    with pytest.raises(ValueError, match="key"):
        jm.make_tasks(0, n=2, d=8, p=10)
    with pytest.raises(ValueError, match="alpha"):
        jm.p_from_alpha(8, True)
    with pytest.raises(ValueError, match="alpha"):
        jm.p_from_alpha(8, 1e-12)
    assert jm.p_from_alpha(8, np.float32(0.5)) == jm.p_from_alpha(8, 0.5)
    assert jm.rank_of(8, kappa=np.float32(0.5)) == 4
    assert float(th.hebbian(np.int64(8), 10).accuracy) == float(th.hebbian(8, 10).accuracy)
    for args, name in [((8, 1), "^p must"), ((0, 10), "^d must"), ((8, 10, "xp"), "^problem must")]:
        with pytest.raises(ValueError, match=name):
            th.hebbian_scores(*args, samples=10)
    with jax.enable_x64(True):  # float64 tasks train in float64
        t64 = jm.make_tasks(jax.random.key(0), n=2, d=8, p=10, dtype=jnp.float64)
        run = jm.train(jm.FullRank, t64, steps=50, progress=False)
    assert run.model.W.dtype == jnp.float64


def test_fault_corrupt_meta_json_does_not_block_a_sweep(tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    (out / "meta.json").write_text("{not json")
    args = [
        "sweep",
        "--d",
        "8",
        "--p",
        "10",
        "--model",
        "hebbian",
        "--seeds",
        "2",
        "--out",
        str(out),
        "--quiet",
    ]
    assert main(args) == 0
    with open(out / "meta.json") as f:
        assert "versions" in json.load(f), "an unreadable meta.json is rewritten"
    assert len(Store(str(out)).records()) == 2
