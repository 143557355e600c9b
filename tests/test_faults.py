"""Regressions for the faults issue: records that describe exactly what ran, lossless command
logs under concurrency, JSON without NaN, refused aliasing seeds, group-readable files, and
invalid record files rerun instead of counted."""

import json
import multiprocessing as mp
import os
import stat

import pytest
from jaxmem._cli import main
from jaxmem._sweep import Knobs, make_config, Store


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
        ("--init-scale", "0", "init_scale"),
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
        store.write(cfg, [dict(config=cfg, seed=0)])
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
