"""The tail-average criterion: its certified decisions against an exact LP (the top-k-sum
reformulation, HiGHS) at every `p` a threshold search tries (so near the threshold, where the
ties are), the search's handling of non-monotone storability, the criterion's parsing, the
score-matrix check against the decider's float64 margins, and the setting in records and rows."""

import dataclasses
import json
import os
import subprocess
import sys

import jax
import jaxmem as jm
import numpy as np
import pytest
from helpers import arrays, lp_tail, tail_margins64
from jaxmem._plan import tail_plan
from jaxmem._threshold import Brackets
from jaxmem.solvers import Status, tail_k


# Every d of 6 to 10 with both problems, every r with both problems (the rest: -m slow).
CASES = [("op", 6, 0.1), ("dp", 6, 0.25), ("op", 8, 0.25), ("dp", 8, 0.1), ("op", 10, 0.1), ("dp", 10, 0.25)]
SLOW = [("dp", 6, 0.1), ("op", 6, 0.25), ("op", 8, 0.1), ("dp", 8, 0.25), ("dp", 10, 0.1), ("op", 10, 0.25)]


def _search(problem, d, r, seeds=2):
    plan = dataclasses.replace(tail_plan(d, r), step=1.15)  # brackets in few decisions
    tasks = jm.make_tasks(jax.random.key(5), n=seeds, d=d, p=plan.p_max, problem=problem)
    return tasks, jm.search_thresholds(tasks, plan=plan, criterion=f"tail:{r}")


def _check_against_lp(problem, d, r):
    tasks, th = _search(problem, d, r)
    checked, verdicts, ties = 0, set(), 0
    for s, decisions in enumerate(th.decisions):
        task = jax.tree.map(lambda x: x[s], tasks)
        for p, status, margin, bound, _ in decisions:
            assert status != Status.UNDECIDED, (s, p, margin, bound)
            g = lp_tail(*arrays(task, p), tail_k(p, r))
            lp = g > 1e-9
            assert (status == Status.STORABLE) == lp, (s, p, g, margin, bound)
            verdicts.add(lp)
            ties += abs(p - th.lo[s]) <= 1  # the closest calls: p* and p* + 1
            checked += 1
        # the threshold's definition: p* storable, p* + 1 and p* + 2 decided unstorable
        lo = int(th.lo[s])
        assert lo + 1 == th.hi[s] and not th.undecided[s]
        seen = {p: status for p, status, *_ in decisions}
        assert seen[lo] == Status.STORABLE and seen[lo + 1] == seen[lo + 2] == Status.UNSTORABLE
    assert verdicts == {True, False}, "the decisions span the transition"
    return checked, ties


@pytest.mark.parametrize("problem, d, r", CASES)
def test_tail_decisions_match_the_exact_lp(problem, d, r):
    checked, ties = _check_against_lp(problem, d, r)
    assert checked >= 7 and ties >= 4, (checked, ties)  # 6 cases: at least 42 instances


@pytest.mark.slow
@pytest.mark.parametrize("problem, d, r", SLOW)
def test_tail_decisions_match_the_exact_lp_everywhere(problem, d, r):
    _check_against_lp(problem, d, r)


def test_a_storable_certificate_has_every_tail_margin_positive_in_numpy():
    d, r, p = 8, 0.1, 20
    tasks = jm.make_tasks(jax.random.key(1), n=3, d=d, p=p, problem="dp")
    dec = jm.decide(tasks, criterion=f"tail:{r}")
    assert dec.storable.all()
    for s in range(3):
        task = jax.tree.map(lambda x: x[s], tasks)
        t = tail_margins64(*arrays(task, p), dec.weight[s], tail_k(p, r))
        assert t.min() > 0 and dec.margin[s] > 0
        # the score-matrix criterion (training's) agrees: every association stored
        S = task.score_matrix(task.inputs @ dec.weight[s].T.astype(np.float32), jax.lax.Precision.HIGHEST)
        assert int(jm.TailAverage(r).hits(S, p)) == p


def test_k_is_computed_in_integers():
    assert tail_k(31, 0.1) == 3  # 0.1 * 30 = 3.0000000000000004 in floating point
    assert tail_k(32, 0.1) == 4 and tail_k(2, 0.05) == 1 and tail_k(101, 0.25) == 25
    assert [int(x) for x in tail_k(np.array([31, 32]), 0.1)] == [3, 4]


def _oracle_search(storable, p_max=12):
    """`Brackets` driven by a storability pattern (`storable[p]`) instead of a decider."""
    plan = jm.SearchPlan(p0=3, p_max=p_max, step=1.5)
    b = Brackets(1, plan, monotone=False)
    while (seeds := b.searching()).size:
        ps = b.propose(seeds)
        st = np.array([Status.STORABLE if storable[int(p)] else Status.UNSTORABLE for p in ps])
        b.record(seeds, ps, st, np.zeros(1), np.zeros(1), np.zeros(1, int))
    return b


def test_the_search_goes_on_above_a_rebound_and_marks_it():
    # storable up to 5, not at 6, again at 7, then never
    pattern = {p: p <= 5 or p == 7 for p in range(2, 13)}
    b = _oracle_search(pattern)
    assert b.lo[0] == 7 and b.hi[0] == 8 and b.rebound[0]
    tried = {p for p, *_ in b.decisions[0]}
    assert {6, 7, 8, 9} <= tried
    # a gap of two unstorable p ends the search: what lies beyond is not established
    pattern = {p: p <= 5 or p == 9 for p in range(2, 13)}
    b = _oracle_search(pattern)
    assert b.lo[0] == 5 and b.hi[0] == 6 and not b.rebound[0]
    assert 9 not in {p for p, *_ in b.decisions[0]}


def test_a_monotone_pattern_needs_two_extra_decisions_at_most():
    pattern = {p: p <= 6 for p in range(2, 13)}
    b = _oracle_search(pattern)
    assert b.lo[0] == 6 and b.hi[0] == 7 and not b.rebound[0]
    assert sorted(p for p, *_ in b.decisions[0])[-2:] == [7, 8]


@pytest.mark.parametrize("text", ["tail:0", "tail:1.5", "tail:x", "tail", "all:1", "top2", "accuracy:1"])
def test_bad_criteria_are_refused_naming_the_argument(text):
    with pytest.raises(ValueError, match="criterion"):
        jm.parse_criterion(text)


def test_the_criterion_round_trips_by_name():
    for text in ("all", "accuracy:0.99", "tail:0.1", "tail:1"):
        assert jm.parse_criterion(text).name == text
    assert jm.parse_criterion("tail:0.25") == jm.TailAverage(0.25)


def test_the_tail_criterion_is_refused_where_it_is_not_certified():
    tasks = jm.make_tasks(jax.random.key(0), n=2, d=6, p=12)
    with pytest.raises(ValueError, match="criterion"):
        jm.search_thresholds(tasks, plan=jm.SearchPlan(p0=4, p_max=12), solver="adam", criterion="tail:0.1")
    with pytest.raises(ValueError, match="full-rank"):
        jm.decide(tasks, model="factored", kappa=0.5, criterion="tail:0.1")
    with pytest.raises(ValueError, match="criterion"):
        jm.capacity(d=6, seeds=2, model="factored", kappa=0.5, criterion="tail:0.1")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "jaxmem.cli", *args], capture_output=True, text=True)


def test_the_command_line_measures_the_tail_capacity_in_its_own_rows(tmp_path):
    out = tmp_path / "c"
    r = _cli("capacity", "--d", "6", "--criterion", "tail:0.25", "--seeds", "4", "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)["rows"]
    assert row["criterion"] == "tail:0.25" and row["load"] == "p / d^2"
    assert row["alpha_c"] == pytest.approx(row["p_c"] / 36)
    assert row["undecided"] == 0 and "rebound" in row
    assert row["theory_alpha_c"] == pytest.approx(float(jm.theory.listwise_alpha_c(0.25)))
    assert row["theory_verdict"]
    recs = [json.loads(x) for f in (out / "records").iterdir() for x in f.read_text().splitlines()]
    assert recs and all(x["config"]["criterion"] == "tail:0.25" and "rebound" in x for x in recs)
    # the folder reads back to the same rows, and a top-1 point beside it is its own row
    again = _cli("capacity", str(out), "--json")
    assert json.loads(again.stdout)["rows"] == json.loads(r.stdout)["rows"]
    text = _cli("capacity", str(out)).stdout
    assert "tail:0.25 (alpha = p / d^2)" in text and "rebound" in text


@pytest.mark.parametrize(
    "args",
    [
        ["--criterion", "tail:0"],
        ["--criterion", "tail:0.1", "--solver", "adam"],
        ["--criterion", "tail:0.1", "--model", "factored", "--kappa", "0.5"],
    ],
)
def test_bad_tail_invocations_exit_2_with_one_line(args):
    r = _cli("capacity", "--d", "6", "--seeds", "2", *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_top1_configs_name_no_criterion():
    (cfg,) = jm.study.point_configs(d=8, problem="op", seeds=4)
    assert "criterion" not in cfg
    (tail,) = jm.study.point_configs(d=8, problem="op", seeds=4, criterion="tail:0.1")
    assert tail["criterion"] == "tail:0.1" and tail["plan"]["p0"] != cfg["plan"]["p0"]


def test_training_stops_on_the_tail_criterion_and_only_then():
    tasks = jm.make_tasks(jax.random.key(0), n=2, d=8, p=22)
    run = jm.train(jm.FullRank, tasks, config=jm.TrainConfig(tail=0.1, steps=1000))
    crit = jm.TailAverage(0.1)
    for s, step in enumerate(run.steps_to_store):
        task = jax.tree.map(lambda x: x[s], tasks)
        params = jax.tree.map(lambda x: x[s], run.model)
        S = task.score_matrix(
            params.project(task.inputs, precision=jax.lax.Precision.HIGHEST), jax.lax.Precision.HIGHEST
        )
        assert (int(crit.hits(S, 22)) == 22) == (step is not None), (s, step)
    assert any(s is not None for s in run.steps_to_store)
    # a top-1 configuration's identity (what records store) names no tail
    assert "tail" not in jm.TrainConfig().identity() and jm.TrainConfig(tail=0.1).identity()["tail"] == 0.1
    with pytest.raises(ValueError, match="tail"):
        jm.TrainConfig(tail=0.1, accuracy=0.9)


def test_a_folder_with_both_criteria_gives_the_top1_tables_top1_records_only():
    """docs/tail holds top-1 and tail-average points of the same tasks: the studies' tables read
    the top-1 ones (`by_kind`), the tail study all of them, and the full-rank thresholds that bound
    a rank-m row's gap are top-1 thresholds."""
    from jaxmem.study import by_kind, Store
    from jaxmem.study._analysis import full_rank_thresholds

    records = Store(os.path.join(os.path.dirname(__file__), "..", "docs", "tail")).records()
    top1 = by_kind(records)[0]
    every = by_kind(records, every_criterion=True)[0]
    assert top1 and all("criterion" not in r["config"] for r in top1)
    assert len(every) == 4 * len(top1)  # three values of r beside top-1
    full = full_rank_thresholds(records)
    assert sorted(full.values()) == sorted(r["p_star"] for r in top1 if r["exact"])
