"""Streaming path in the trainer and the sharded ensemble (2 simulated CPU devices, conftest)."""

import jax
import jax.numpy as jnp
import jaxmem as jm
import jaxmem._loss as loss_mod
import numpy as np
import pytest


@pytest.mark.parametrize("problem", ["op", "dp"])
def test_training_with_streaming_equals_dense(problem):
    tasks = jm.make_tasks(jax.random.key(0), n=2, d=12, p=jm.p_from_alpha(12, 0.8), problem=problem)
    a = jm.train(jm.FullRank, tasks, steps=200, progress=False, stream=False)
    b = jm.train(jm.FullRank, tasks, steps=200, progress=False, stream=True, block=16)
    assert a.steps_to_store == b.steps_to_store
    np.testing.assert_array_equal(a.all_stored, b.all_stored)
    np.testing.assert_allclose(a.model.W, b.model.W, rtol=2e-3, atol=2e-4)


def test_factored_gradients_stream_equal_dense():
    task = jm.make_task(jax.random.key(1), d=10, p=41, problem="dp")
    model = jm.Factored.init(jax.random.key(2), 10, kappa=0.5, init_scale=0.5)
    f = lambda m, stream: jm.cross_entropy(m.project(task.inputs), task, stream=stream, block=8)[0]
    gd = jax.grad(lambda m: f(m, False))(model)
    gs = jax.grad(lambda m: f(m, True))(model)
    np.testing.assert_allclose(gs.Q, gd.Q, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(gs.R, gd.R, rtol=1e-4, atol=1e-6)


def test_row_blocks_do_not_change_the_result(x64):
    task = jm.make_task(jax.random.key(3), d=5, p=23, problem="dp", dtype=jnp.float64)
    V = jax.random.normal(jax.random.key(4), (23, 5), jnp.float64)
    ref = jax.value_and_grad(lambda v: jm.dense_ce(v, task)[0])(V)
    for rb in (1, 4, 23):
        got = jax.value_and_grad(lambda v: jm.stream_ce(v, task, block=6, row_block=rb)[0])(V)
        assert abs(float(got[0] - ref[0])) < 1e-10
        np.testing.assert_allclose(got[1], ref[1], atol=1e-10, rtol=0)


def test_trainer_switches_to_streaming_above_threshold(monkeypatch):
    calls = []
    real = loss_mod.stream_ce
    monkeypatch.setattr(loss_mod, "stream_ce", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(loss_mod, "STREAM_THRESHOLD", 19 * 19 - 1)
    tasks = jm.make_tasks(jax.random.key(5), n=1, d=7, p=19)
    jm.train(jm.FullRank, tasks, steps=3, chunk=3, progress=False)
    assert calls


def test_sharded_ensemble_equals_single_device():
    assert len(jax.devices()) == 2
    tasks = jm.make_tasks(jax.random.key(6), n=3, d=12, p=jm.p_from_alpha(12, 0.8), problem="dp")  # 3: padded
    two = jm.train(jm.FullRank, tasks, steps=300, progress=False, devices=jax.devices())
    one = jm.train(jm.FullRank, tasks, steps=300, progress=False, devices=jax.devices()[:1])
    assert two.steps_to_store == one.steps_to_store
    np.testing.assert_array_equal(two.all_stored, one.all_stored)
    np.testing.assert_allclose(two.model.W, one.model.W, rtol=1e-5, atol=1e-6)
    assert two.model.W.shape[0] == 3


def test_early_stop_off_runs_the_whole_budget():
    tasks = jm.make_tasks(jax.random.key(7), n=2, d=8, p=10)
    run = jm.train(jm.FullRank, tasks, steps=120, chunk=40, progress=False, early_stop=False)
    assert run.steps_run == 120 and run.all_stored.all()
