"""Measurements that cannot silently lie: distinct settings never merge, an unbracketed threshold
is censored (not exact), decisions finished at their start are concluded, and every estimate is
independent of the order in which records are read."""

import json
import os
import random
import socket
import subprocess
import sys

import jax
import jax.numpy as jnp
import jaxmem as jm
import jaxmem.theory as th
import numpy as np
import pytest
from jaxmem.cli import main
from jaxmem.solvers import AbstractEnsembleSolver, run_ensemble
from jaxmem.study import (
    adam_vs_certified,
    compare,
    decide_fields,
    measure,
    normal_config,
    point_configs,
    Store,
    threshold_rows,
    unit_settings,
    verdict,
)


def _units(**kw):
    base = dict(d=8, problem="op", seeds=4, group=2)
    return point_configs(**(base | kw))


@pytest.fixture(scope="module")
def d8_records():
    """d = 8, 4 seeds, at seed0 0 and 100, OP and DP, and Adam on the first."""
    recs = []
    for seed0 in (0, 100):
        for problem in ("op", "dp"):
            recs += measure(_units(seed0=seed0, problem=problem))
    return recs


def test_settings_that_differ_make_different_rows(d8_records):
    rows = threshold_rows([r for r in d8_records if r["config"]["problem"] == "op"])
    assert len(rows) == 2, "seed0 0 and seed0 100 are two measurements"
    assert sorted(r["settings"]["seed0"] for r in rows) == [0, 100]
    assert all(r["seeds"] == 4 and set(r["differs"]) == {"seed0"} for r in rows)
    alone = [
        threshold_rows(
            [r for r in d8_records if r["config"]["problem"] == "op" and r["config"]["seed0"] == s]
        )[0]
        for s in (0, 100)
    ]
    assert [r["p_c"] for r in rows] == [r["p_c"] for r in alone]


def test_a_tolerance_is_a_setting_of_its_own():
    a = _units(decide_config=jm.DecideConfig(tol=1e-5))
    b = _units(decide_config=jm.DecideConfig(tol=1e-3))
    recs = [
        dict(
            v=1,
            kind="threshold",
            config=c,
            seed=s,
            p_star=20,
            p_hi=21,
            exact=True,
            undecided=False,
            decisions=[],
            seconds=0.0,
        )
        for c in a + b
        for s in range(*c["seeds"])
    ]
    rows = threshold_rows(recs, theory=False)
    assert len(rows) == 2 and {r["settings"]["decide.tol"] for r in rows} == {1e-5, 1e-3}
    assert all(r["differs"] == {"decide.tol": r["settings"]["decide.tol"]} for r in rows)


def test_settings_are_recorded_whole_and_run_as_recorded(tmp_path):
    dcfg = jm.DecideConfig(max_iter=3, chunk=2, block=4, stream=True, rank_window=5)
    acfg = jm.TrainConfig(steps=7, lr=0.3, precision="bf16", chunk=5, compact=False)
    (unit,) = point_configs(d=8, problem="op", solver="adam", seeds=2, decide_config=dcfg, adam_config=acfg)
    assert unit["decide"] == decide_fields(dcfg) and unit["adam"]["precision"] == "bf16"
    assert unit_settings(json.loads(json.dumps(unit))) == (dcfg, acfg), "through JSON, unchanged"

    out = str(tmp_path / "m")
    est = jm.capacity(d=8, problem="op", seeds=2, decide_config=dcfg, out=out)
    (rec, *_) = Store(out).records()
    assert rec["config"]["decide"] == dict(decide_fields(dcfg), decider="dense")
    assert rec["config"]["decide"]["max_iter"] == 3
    assert est.undecided > 0, "3 iterations leave decisions undecided: the budget ran"
    assert jm.capacity(d=8, problem="op", seeds=2).undecided == 0


def test_old_flat_records_read_as_the_settings_they_ran_with(d8_records):
    new = [r for r in d8_records if r["config"]["problem"] == "op" and r["config"]["seed0"] == 0]
    flat = {k: v for k, v in new[0]["config"].items() if k != "decide"}
    flat.update(tol=1e-5, max_iter=20_000, memory=50)  # the old form: no decider meant dense
    old = [dict(r, config=flat, seed=r["seed"] + 4) for r in new]
    assert normal_config(flat) == new[0]["config"]
    (row,) = threshold_rows(new + old, theory=False)
    assert row["seeds"] == 8, "old and new records of one setting are one point"


def test_compare_pairs_by_setting_and_ignores_record_order(d8_records):
    cmp = compare(d8_records, dict(problem="op"), dict(problem="dp"))
    assert len(cmp) == 2, "one comparison per seed0, never a mixture"
    assert sorted(c["setup"] for c in cmp) == ["seed0 0", "seed0 100"]
    shuffled = list(d8_records)
    random.Random(1).shuffle(shuffled)
    assert compare(shuffled, dict(problem="op"), dict(problem="dp")) == cmp
    assert [dict(r) for r in threshold_rows(shuffled)] == [dict(r) for r in threshold_rows(d8_records)]


def _fake(cfgs, p_star):
    """Threshold records of `cfgs` with the given per-seed thresholds (no decisions)."""
    return [
        dict(
            v=1,
            kind="threshold",
            config=c,
            seed=s,
            p_star=int(p_star[s]),
            p_hi=int(p_star[s]) + 1,
            exact=True,
            undecided=False,
            decisions=[],
            seconds=0.0,
        )
        for c in cfgs
        for s in range(*c["seeds"])
    ]


def test_op_against_dp_does_not_depend_on_record_order():
    rng = np.random.default_rng(0)
    plan = jm.SearchPlan(p0=100, p_max=300)
    recs = []
    for problem in ("op", "dp"):
        units = point_configs(
            d=14,
            problem=problem,
            seeds=16,
            group=4,
            plan=plan,
            decide_config=jm.DecideConfig(decider="dense"),
        )
        recs += _fake(units, rng.integers(100, 200, 16))
    cmp = compare(recs, dict(problem="op"), dict(problem="dp"))
    for order in (recs[::-1], sorted(recs, key=lambda r: (r["p_star"], r["seed"]))):
        assert compare(order, dict(problem="op"), dict(problem="dp")) == cmp


def test_adam_is_paired_with_certified_by_seed_and_task(d8_records):
    adam = measure(_units(seeds=4, solver="adam", seed0=100, adam_config=jm.TrainConfig(steps=200)))
    avc = adam_vs_certified(adam + d8_records)
    assert len(avc) == 1 and avc[0]["seed0"] == 100 and avc[0]["seeds"] == 4
    cert = {
        r["seed"]: r["p_star"]
        for r in d8_records
        if r["config"]["seed0"] == 100 and r["config"]["problem"] == "op"
    }
    assert avc[0]["per_seed"]["certified"] == [cert[s] for s in range(4)]


@pytest.mark.slow
def test_an_unbracketed_threshold_is_censored_not_exact():
    plan = jm.SearchPlan(p0=6, p_max=8, step=1.5)  # searched to 16 at most: d = 8's are ~22
    recs = measure(_units(seeds=8, group=4, plan=plan))
    assert all(r["censored"] and not r["exact"] and r["p_star"] == 16 and r["p_max"] == 16 for r in recs)
    row = threshold_rows(recs)[0]
    assert row["censored"] == 8 and row["exact"] == 0
    assert row["ci_high"] == float("inf") and "censored" in row["theory_verdict"]
    # a p_max that is too small is raised until the seeds bracket
    est = jm.capacity(d=8, seeds=4, plan=jm.SearchPlan(p0=8, p_max=12, step=1.5))
    wide = jm.capacity(d=8, seeds=4, plan=jm.SearchPlan(p0=8, p_max=40, step=1.5))
    assert (est.p_star == wide.p_star).all() and (est.p_hi == wide.p_hi).all()


def test_an_unbracketed_hebbian_scan_is_censored():
    # at d = 32 the rule first fails near p = 17
    recs = measure(_units(d=32, seeds=2, solver="hebbian", plan=jm.SearchPlan(p0=2, p_max=2)))
    assert all(r["censored"] and not r["exact"] for r in recs)


class _Countdown(AbstractEnsembleSolver):
    def init(self, n):
        return n

    def step(self, n, k):
        return k - 1

    def done(self, k):
        return k <= 0


def test_instances_finished_at_their_start_are_handed_to_refill():
    seen, queue = [], [0, 0, 3]  # new work finishing at once, then some that needs steps

    def refill(done, inst, st):
        seen.extend(int(i) for i in done)
        again = np.array([i for i in done if queue], int)
        for i in again:
            n = queue.pop(0)
            inst, st = inst.at[i].set(n), st.at[i].set(n)
        return inst, st, again

    run_ensemble(_Countdown(), jnp.array([0, 2]), refill=refill, chunk=5)
    assert seen == [0, 0, 0, 0, 1], seen  # three times at the start, then both in one chunk


def test_a_chunk_ends_once_all_or_with_early_one_of_its_instances_finished():
    # instances needing 3 and 7 steps, chunks of up to 50: one chunk of 7 steps for the pair;
    # with `early`, 3 steps for the pair, then 4 for the survivor alone
    for early, chunks, work in ((False, [7], 14), (True, [3, 4], 10)):
        steps = []
        st, w = run_ensemble(
            _Countdown(), jnp.array([3, 7]), chunk=50, early=early, progress=lambda a, n, s: steps.append(s)
        )
        assert steps == chunks and w == work and (np.asarray(st) == 0).all(), (early, steps, w)


def test_a_seed_without_decisions_is_undecided():
    from jaxmem._threshold import Brackets

    th = Brackets(2, jm.SearchPlan(p0=4, p_max=8)).result(0.0)
    assert th.undecided.all() and not th.exact.any()


@pytest.mark.parametrize("tol", ["0.3", "1"])
def test_a_tolerance_that_changes_the_threshold_is_refused(tol, capsys):
    assert main(["capacity", "--d", "8", "--tol", tol, "--json"]) == 2
    assert "--tol" in capsys.readouterr().err
    with pytest.raises(ValueError, match="tol"):
        jm.DecideConfig(tol=float(tol))


def test_the_measurement_and_its_rereading_print_the_same(tmp_path, capsys):
    out = str(tmp_path / "m")
    args = ["capacity", "--d", "8", "--problem", "op", "dp", "--seeds", "6", "--group", "2", "--json"]
    assert main(args + ["--out", out, "--quiet"]) == 0
    measured = json.loads(capsys.readouterr().out)
    assert main(["capacity", out, "--json"]) == 0
    reread = json.loads(capsys.readouterr().out)
    assert measured["op_vs_dp"] == reread["op_vs_dp"] and measured["rows"] == reread["rows"]


# ---------------------------------------------------------------- files and provenance


def _folder(tmp_path, name="f"):
    out = str(tmp_path / name)
    assert (
        main(["capacity", "--d", "8", "--seeds", "4", "--group", "2", "--out", out, "--quiet", "--json"]) == 0
    )
    return out


def _read(path):
    with open(path) as f:
        return f.read()


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def test_a_record_file_with_a_duplicated_or_missing_field_is_invalid(tmp_path, capsys):
    out = _folder(tmp_path)
    names = sorted(os.listdir(os.path.join(out, "records")))
    path = lambda name: os.path.join(out, "records", name)
    lines = _read(path(names[0])).splitlines()
    _write(path(names[0]), lines[0] + "\n" + lines[0] + "\n")  # seed 0 twice, seed 1 gone
    recs = [json.loads(x) for x in _read(path(names[1])).splitlines()]
    for r in recs:
        del r["config"]["d"]
    _write(path(names[1]), "".join(json.dumps(r) + "\n" for r in recs))
    capsys.readouterr()
    assert Store(out).records() == []
    err = capsys.readouterr().err
    assert names[0] in err and names[1] in err
    assert main(["capacity", out, "--json"]) == 2  # nothing valid is left to read


@pytest.mark.slow
def test_a_report_draws_a_folder_without_adam_records(tmp_path, capsys):
    out = _folder(tmp_path)
    assert main(["report", out]) == 0
    assert os.path.exists(os.path.join(out, "report.md"))
    err = capsys.readouterr().err  # at most its progress line: no warning, no error
    assert all(line.startswith("jaxmem report: reading") for line in err.splitlines()), err


def test_stale_temp_files_are_removed_everywhere_in_the_folder(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = str(tmp_path / "s")
    stale = [
        os.path.join(out, sub, f".tmp-{socket.gethostname()}-{dead.pid}-abc.part")
        for sub in ("", "records", "commands")
    ]
    for path in stale:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _write(path, "")
    Store(out).note_command(["jaxmem", "test"])
    assert not any(map(os.path.exists, stale))


def test_the_library_logs_its_measurements_and_never_hides_a_bad_meta(tmp_path, capsys):
    out = str(tmp_path / "lib")
    jm.capacity(d=8, seeds=2, plan=jm.SearchPlan(p0=16, p_max=32), out=out)
    meta = json.loads(_read(os.path.join(out, "meta.json")))
    (cmd,) = Store(out).commands()
    assert cmd["argv"][0] == "jaxmem.capacity" and cmd["device"]["hostname"] == socket.gethostname()
    assert meta["device"]["hostname"] == socket.gethostname()
    _write(os.path.join(out, "meta.json"), "garbage")
    capsys.readouterr()
    Store(out).note_command(["jaxmem", "again"])
    assert "meta.json" in capsys.readouterr().err
    (aside,) = [n for n in os.listdir(out) if n.startswith("meta.json.invalid")]
    assert _read(os.path.join(out, aside)) == "garbage"


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda t: jm.decide(t, p=np.array([5, 10])), "^p must"),
        (
            lambda t: jm.decide(t, p=10, model="factored", kappa=0.5, config=jm.DecideConfig(stream=True)),
            "^config.stream",
        ),
        (lambda t: jm.train("full", t, stepz=5), "stepz"),
        (lambda t: jm.TrainConfig(optimizer=lambda learning_rate: 3), "optimizer"),
        (lambda t: th.saddle_path(jnp.array([]), 1000.0), "alphas"),
        (lambda t: th.status_name(99), "status"),
        (lambda t: point_configs(d=2048, problem="op", seeds=16), "d, seeds and group"),
        (lambda t: _study_jobs(), "jobs"),
    ],
)
def test_library_errors_name_the_argument(call, name):
    tasks = jax.tree.map(
        lambda *x: jnp.stack(x), *[jm.make_task(jax.random.key(i), d=8, p=12, problem="op") for i in range(3)]
    )
    with pytest.raises(ValueError, match=name):
        call(tasks)


def _study_jobs():
    from jaxmem.study import Demo, QUICK, run

    run(Demo(), QUICK, "never", jobs=64)


def test_repeated_values_do_not_multiply_the_work(capsys):
    assert main(["capacity", "--d", "8", "8", "--plan", "--json"]) == 0
    once = json.loads(capsys.readouterr().out)["units"]
    assert main(["capacity", "--d", "8", "--plan", "--json"]) == 0
    assert once == json.loads(capsys.readouterr().out)["units"]
    args = ["capacity", "--d", "8", "--model", "factored", "--plan", "--json", "--kappa"]
    assert main(args + ["0.5", "0.5000001"]) == 0
    twice = json.loads(capsys.readouterr().out)["units"]
    assert main(args + ["0.5"]) == 0
    assert twice == json.loads(capsys.readouterr().out)["units"]


# ---------------------------------------------------------------- stable types, independent keys


def test_metrics_and_weights_have_one_type_whatever_the_path():
    from jaxmem import ensemble_metrics

    tasks = jax.tree.map(
        lambda *x: jnp.stack(x), *[jm.make_task(jax.random.key(i), d=8, p=12, problem="op") for i in range(2)]
    )
    dec = jm.decide(tasks)
    assert dec.weight.dtype == np.float64
    W = jnp.asarray(dec.weight, jnp.float32)
    models = jm.FullRank(W)
    met = ensemble_metrics(models, tasks)
    assert all(isinstance(x, np.ndarray) for x in jax.tree.leaves(met))


def test_a_sweep_compiles_per_padded_size_not_per_p(tmp_path):
    """Four loads that pad to one size share every compiled program (the metrics included)."""
    env = dict(os.environ, JAX_LOG_COMPILES="1")
    out = str(tmp_path / "sw")
    args = ["sweep", "--d", "16", "--p", "40", "44", "48", "52", "--seeds", "2", "--steps", "50", "--quiet"]
    r = subprocess.run(
        [sys.executable, "-m", "jaxmem.cli", *args, "--out", out], env=env, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr[-2000:]
    compiled = [line for line in r.stderr.splitlines() if "Finished XLA compilation of" in line]
    per_p = [line for line in compiled if "_ensemble_metrics" in line or "dynamic_slice" in line]
    assert len(per_p) <= 2, per_p  # float32, and the float64 recheck of near-ties (8 when per p)


def test_an_output_that_cannot_be_a_folder_is_refused_before_any_work(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    (tmp_path / "bad" / "records").parent.mkdir()
    (tmp_path / "bad" / "records").write_text("")
    for out in (afile, tmp_path / "bad"):
        for args in (["capacity", "--d", "8"], ["sweep", "--d", "8", "--p", "10"], ["demo"]):
            assert main([*args, "--out", str(out)]) == 2, args
            assert "--out" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path / "bad")) == ["records"]


@pytest.mark.skipif(
    __import__("jaxmem._validate", fromlist=["x"]).available_bytes() >= 64 * 2**30,
    reason="a machine this big",
)
def test_workers_that_would_not_fit_are_refused(tmp_path, capsys):
    assert main(["demo", "--jobs", "64", "--out", str(tmp_path / "d")]) == 2
    assert "jobs" in capsys.readouterr().err and not (tmp_path / "d").exists()


def test_a_rank_m_row_is_a_lower_bound_with_its_uncertified_gap(d8_records):
    fac = measure(_units(model="factored", kappa=0.5, decide_config=jm.DecideConfig(max_iter=300)))
    row = next(r for r in threshold_rows(fac + d8_records) if r["model"] == "factored")
    full = {
        r["seed"]: r["p_star"]
        for r in d8_records
        if r["config"]["seed0"] == 0 and r["config"]["problem"] == "op"
    }
    below = [r["p_star"] < full[r["seed"]] for r in fac]
    assert row["lower_bound"] and row["gap_paired"] == 4 and row["gap_seeds"] == sum(below)
    assert all(r["p_star"] <= full[r["seed"]] for r in fac), "a rank-m memory is a full-rank one"
    assert "agrees" not in row["theory_verdict"] and "below" not in row["theory_verdict"]
    # the report's verdicts follow the same rule
    assert verdict(0.80, 0.96, 0.89, "theory", lower_bound=True).startswith("undecided")
    assert verdict(0.80, 0.96, 0.75, "theory", lower_bound=True) == "above theory"
    alone = next(r for r in threshold_rows(fac))
    assert alone["gap_paired"] == 0 and alone["gap_seeds"] is None
    assert not any(r.get("lower_bound") for r in threshold_rows(d8_records))
