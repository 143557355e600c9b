import jax
import jax.numpy as jnp
import jaxmem as jm
import numpy as np
import optax
import pytest
from jaxmem._tasks import MATERIALISE_LIMIT


def _reference(V, task):
    """Independent reference: scores in float64 numpy, then optax's dense cross-entropy."""
    V = np.asarray(V, np.float64)
    if task.problem == "op":
        S = V @ np.asarray(task.targets, np.float64).T
    else:
        idx = jnp.arange(task.p)
        C = np.asarray(jm.dp_candidates(task, idx[:, None], idx[None, :]), np.float64)
        S = np.einsum("md,mrd->mr", V, C)
    loss = optax.softmax_cross_entropy_with_integer_labels(jnp.asarray(S), jnp.arange(task.p)).mean()
    return S, float(loss)


@pytest.mark.parametrize("problem", ["op", "dp"])
def test_dense_and_stream_match_optax(problem):
    task = jm.make_task(jax.random.key(1), d=8, p=37, problem=problem)
    V = 0.3 * jax.random.normal(jax.random.key(2), (37, 8))
    S, ref = _reference(V, task)
    loss_d, sc_d = jm.dense_ce(V, task)
    loss_s, sc_s = jm.stream_ce(V, task, block=8)  # 37 is not a multiple of 8: padding
    assert abs(float(loss_d) - ref) < 1e-5 * max(1, abs(ref))
    assert abs(float(loss_s) - ref) < 1e-5 * max(1, abs(ref))
    off = np.where(np.eye(37, dtype=bool), -np.inf, S).max(1)
    np.testing.assert_allclose(sc_s.best, off, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(sc_s.stored, np.diag(S) > off)
    np.testing.assert_array_equal(sc_d.stored, np.diag(S) > off)
    g_d = jax.grad(lambda v: jm.dense_ce(v, task)[0])(V)
    g_s = jax.grad(lambda v: jm.stream_ce(v, task, block=8)[0])(V)
    g_ref = jax.grad(
        lambda v: optax.softmax_cross_entropy_with_integer_labels(
            jm.dense_scores(v, task), jnp.arange(37)
        ).mean()
    )(V)
    np.testing.assert_allclose(g_d, g_ref, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(g_s, g_ref, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("problem", ["op", "dp"])
def test_stream_float64_exact(problem, x64):
    task = jm.make_task(jax.random.key(3), d=6, p=29, problem=problem, dtype=jnp.float64)
    V = jax.random.normal(jax.random.key(4), (29, 6), jnp.float64)
    ld, gd = jax.value_and_grad(lambda v: jm.dense_ce(v, task)[0])(V)
    ls, gs = jax.value_and_grad(lambda v: jm.stream_ce(v, task, block=5)[0])(V)
    assert abs(float(ld - ls)) < 1e-10
    np.testing.assert_allclose(gs, gd, atol=1e-10, rtol=0)


def test_dp_candidates_deterministic_and_regenerated():
    key = jax.random.key(5)
    t1 = jm.make_task(key, d=4, p=11, problem="dp")
    t2 = jm.make_task(key, d=4, p=11, problem="dp")
    big = jm.make_task(key, d=4, p=11, problem="dp", materialise_limit=0)
    assert t1.materialised is not None and big.materialised is None
    np.testing.assert_array_equal(t1.materialised, t2.materialised)
    idx = jnp.arange(11)
    np.testing.assert_array_equal(jm.dp_candidates(big, idx[:, None], idx[None, :]), t1.materialised)
    np.testing.assert_array_equal(t1.materialised[idx, idx], t1.targets)  # target slot
    V = jax.random.normal(jax.random.key(6), (11, 4))
    np.testing.assert_allclose(jm.cross_entropy(V, big)[0], jm.cross_entropy(V, t1)[0], rtol=1e-6)
    assert MATERIALISE_LIMIT * 4 <= 2**30  # never more than 1 GiB of candidates per task


def test_dp_candidates_independent_across_inputs():
    """Same slot rho, different inputs mu != nu: c^(mu)_rho . c^(nu)_rho / sqrt(d) must be N(0,1)
    (mean within 5 standard errors of 0, variance within 5 of its standard error of 1)."""
    d, p = 16, 64
    task = jm.make_task(jax.random.key(7), d=d, p=p, problem="dp")
    C = np.asarray(task.materialised, np.float64)
    mu, nu = np.triu_indices(p, 1)
    x = []
    for rho in range(p):
        keep = (mu != rho) & (nu != rho)
        x.append(np.einsum("kd,kd->k", C[mu[keep], rho], C[nu[keep], rho]) / np.sqrt(d))
    x = np.concatenate(x)
    # pairs sharing a vector are dependent; use a conservative effective n of p*p/2
    n_eff = p * p / 2
    assert abs(x.mean()) < 5 / np.sqrt(n_eff)
    assert abs(x.var() - 1) < 5 * np.sqrt(2 / n_eff) * 1.5
    # and not the same across inputs
    assert np.abs(C[0, 5] - C[1, 5]).max() > 0.1
