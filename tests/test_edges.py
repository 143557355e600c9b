"""The library's edges: every public array argument with a wrong shape, and every setting the
command line refuses, raise `InvalidArgument` naming the argument (never a raw JAX error, and
never a silent change of what was asked)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmem as jm


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


@pytest.mark.parametrize("kappa, d", [(0.01, 8), (0.03, 16), (0.0, 8)])
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
