"""The library's edges: every public array argument with a wrong shape, and every setting the
command line refuses, raise `InvalidArgument` naming the argument (never a raw JAX error, and
never a silent change of what was asked)."""

import jax
import jax.numpy as jnp
import jaxmem as jm
import numpy as np
import pytest


D, P, N = 10, 30, 4


@pytest.fixture(scope="module")
def tasks():
    return jm.make_tasks(jax.random.key(0), n=N, d=D, p=P)


@pytest.fixture(scope="module")
def task():
    return jm.make_task(jax.random.key(0), d=D, p=P)


@pytest.mark.parametrize(
    "W0, got",
    [
        (jnp.zeros((N, D - 1, D - 1)), r"got \(4, 9, 9\)"),
        (jnp.ones((D, D)), r"got \(10, 10\)"),
        (jnp.ones((N - 1, D, D)), r"got \(3, 10, 10\)"),
        ("W", "got str"),
    ],
)
def test_a_wrongly_shaped_warm_start_is_refused_naming_W0(tasks, W0, got):
    with pytest.raises(jm.InvalidArgument, match=r"^W0 must .*\(4, 10, 10\) \(n tasks, d, d\).*" + got):
        jm.decide(tasks, p=P, W0=W0)


@pytest.mark.parametrize("fn", [jm.cross_entropy, jm.dense_ce, jm.stream_ce, jm.dense_scores])
def test_projections_of_the_wrong_shape_are_refused_naming_V(task, fn):
    with pytest.raises(jm.InvalidArgument, match=r"^V must have shape \(30, 10\)"):
        fn(jnp.zeros((P, D - 1)), task)


def test_memories_of_another_dimension_are_refused(task, tasks):
    with pytest.raises(jm.InvalidArgument, match=r"^model must have shape \(10, 10\)"):
        jm.metrics(jm.FullRank(W=jnp.zeros((D - 1, D - 1))), task)
    with pytest.raises(jm.InvalidArgument, match=r"^models must have shape \(4, 10, 10\)"):
        jm.ensemble_metrics(jm.FullRank(W=jnp.zeros((N, D - 1, D - 1))), tasks)


def test_other_array_arguments_are_refused_naming_them():
    dp = jm.make_task(jax.random.key(0), d=D, p=P, problem="dp")
    with pytest.raises(jm.InvalidArgument, match="^mu and rho must broadcast"):
        jm.dp_candidates(dp, jnp.zeros((2, 2, 2), int), jnp.zeros(3, int))
    with pytest.raises(jm.InvalidArgument, match=r"^hi must have shape \(3,\)"):
        jm.median_capacity(np.array([5, 6, 7]), np.array([6, 7]), D)


def test_a_factored_capacity_needs_its_kappa():
    """The command line refuses `--model factored` without `--kappa`; so does the library."""
    with pytest.raises(jm.InvalidArgument, match="^kappa is required with model 'factored'"):
        jm.capacity(d=8, seeds=2, model="factored")


@pytest.mark.parametrize("kappa, d", [(0.01, 8), (0.03, 16), (0.0, 8), (0.0625, 8)])
def test_a_kappa_that_rounds_below_rank_one_is_refused(kappa, d):
    with pytest.raises(jm.InvalidArgument, match="^kappa"):
        jm.rank_of(d, kappa=kappa)
    with pytest.raises(jm.InvalidArgument, match="^kappa"):
        jm.capacity(d=d, seeds=2, model="factored", kappa=kappa)


def test_ranks_that_round_are_kept():
    """`round(kappa d)`, at least 1 where `kappa d >= 1/2`: the rank differs from `kappa d` by
    rounding alone."""
    assert jm.rank_of(8, kappa=0.07) == 1  # kappa d = 0.56
    assert jm.rank_of(8, kappa=0.125) == 1
    assert jm.rank_of(16, kappa=0.5) == 8
    assert jm.rank_of(32, kappa=0.75) == 24


# --- the command line's edges -------------------------------------------------------------

import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402

from jaxmem.cli import main  # noqa: E402
from jaxmem.study import config_id  # noqa: E402


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("shard, units", [("0/3", 3), ("1/3", 3), ("2/3", 2)])
def test_the_plan_of_a_shard_counts_its_own_units(shard, units, capsys):
    """8 units (d 16 and 24, OP and DP, two groups of 16 seeds): shards of 3, 3 and 2."""
    args = "capacity --d 16 24 --problem op dp --seeds 32 --group 16 --plan --json --shard"
    assert main([*args.split(), shard]) == 0
    assert json.loads(capsys.readouterr().out) == dict(units=8, shard=shard, shard_units=units)


def test_every_adam_vs_certified_line_names_its_kappa(capsys):
    assert main(["capacity", os.path.join(ROOT, "docs", "rank")]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("adam vs certified")]
    assert len(lines) == 3 and len(set(x.split(":")[0] for x in lines)) == 3
    assert all("kappa=" in x for x in lines), lines


def test_the_load_of_one_association_is_zero():
    assert jm.alpha_of(16, 1) == 0.0 and np.isnan(jm.alpha_of(16, 0.5))


def test_search_plan_says_a_record_may_exceed_its_p_max():
    assert "EXTEND" in jm.SearchPlan.__doc__ and "the largest `p` tried" not in jm.SearchPlan.__doc__


def _copy_with_other_decider(src: str, dest_dir: str, change_seed=None) -> str:
    """The records of `src` as if found by the working-set decider (another file), seed
    `change_seed`'s threshold one lower where given."""
    with open(src) as f:
        lines = [json.loads(x) for x in f]
    cfg = dict(lines[0]["config"], decide=dict(lines[0]["config"]["decide"], decider="working-set"))
    rid = config_id(cfg)
    with open(os.path.join(dest_dir, f"{rid}.jsonl"), "w") as f:
        for r in lines:
            r = dict(r, config=cfg, id=rid)
            if r["seed"] == change_seed:
                r = dict(r, p_star=r["p_star"] - 1, p_hi=r["p_hi"] - 1)
            f.write(json.dumps(r) + "\n")
    return rid


@pytest.mark.parametrize("disagree", [False, True])
def test_paired_records_of_one_seed_must_agree(tmp_path, capsys, disagree):
    """OP - DP pairs points that differ only in how thresholds were found: two records of one
    seed that disagree are refused, naming both; agreeing ones give the table of either."""
    rec = tmp_path / "records"
    rec.mkdir()
    src = os.path.join(ROOT, "docs", "scaling", "records")
    op, dp = "6781c1077bf17288", "76b1d7b425d68bd3"  # d = 16, seeds 0 to 15, dense
    for name in (op, dp):
        shutil.copy(os.path.join(src, f"{name}.jsonl"), rec)
    assert main(["capacity", str(tmp_path), "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    other = _copy_with_other_decider(
        os.path.join(src, f"{dp}.jsonl"), rec, change_seed=3 if disagree else None
    )
    rc = main(["capacity", str(tmp_path), "--json"])
    out, err = capsys.readouterr()
    if disagree:
        assert rc == 2 and len(err.strip().splitlines()) == 1, err
        assert dp in err and other in err and "seed 3" in err and "decide.decider" in err, err
    else:
        assert rc == 0, err
        both = json.loads(out)
        key = "op_dp" if "op_dp" in both else next(k for k in both if "op" in k and "dp" in k)
        assert both[key] == alone[key]


def test_a_seed_range_of_tasks_is_a_slice_of_the_ensemble():
    """`make_tasks(key, seeds=range(a, b))` is rows `a..b-1` of `make_tasks(key, n=b)`: the one
    seed-range builder the units use; `n` and `seeds` are exclusive."""
    import jax

    key = jax.random.key(3)
    whole = jm.make_tasks(key, n=4, d=6, p=10, problem="dp")
    part = jm.make_tasks(key, seeds=range(2, 4), d=6, p=10, problem="dp")
    for a, b in ((whole.inputs[2:], part.inputs), (whole.targets[2:], part.targets)):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    for bad in (dict(n=2, seeds=[1]), dict(), dict(seeds=[]), dict(seeds=[-1])):
        with pytest.raises(ValueError, match="seeds"):
            jm.make_tasks(key, d=6, p=10, **bad)
