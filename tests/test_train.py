import jax
import jaxmem as jm
import jaxmem.solvers
import numpy as np
import pytest


@pytest.mark.parametrize("problem", ["op", "dp"])
def test_stores_all_at_alpha_03_d24(problem):
    d = 24
    tasks = jm.make_tasks(jax.random.key(0), n=8, d=d, p=jm.p_from_alpha(d, 0.3), problem=problem)
    run = jm.train(jm.FullRank, tasks, progress=False)
    assert run.all_stored.all(), run.accuracy
    assert all(s is not None for s in run.steps_to_store)
    assert not run.diverged.any()


def test_vmapped_equals_loop_of_single_runs():
    d, p, n = 16, jm.p_from_alpha(16, 0.8), 4
    tasks = jm.make_tasks(jax.random.key(1), n=n, d=d, p=p)
    lrs = np.array([0.01, 0.03, 0.05, 0.1])
    batch = jm.train(jm.FullRank, tasks, lr=lrs, steps=600, chunk=50, progress=False)
    # compaction (the default) against the whole ensemble run to the end of every chunk
    whole = jm.train(jm.FullRank, tasks, lr=lrs, steps=600, chunk=50, compact=False)
    assert whole.steps_to_store == batch.steps_to_store
    np.testing.assert_allclose(whole.model.W, batch.model.W, rtol=1e-3, atol=1e-4)
    assert len(set(batch.steps_to_store)) > 2 and batch.computed_steps < whole.computed_steps
    assert whole.instance_steps == batch.instance_steps <= batch.computed_steps
    for i in range(n):
        one = jax.tree.map(lambda x: x[i : i + 1], tasks)
        single = jm.train(jm.FullRank, one, lr=lrs[i], steps=600, chunk=64, progress=False)
        assert single.steps_to_store[0] == batch.steps_to_store[i]
        assert single.all_stored[0] == batch.all_stored[i]
        assert single.accuracy[0] == batch.accuracy[i]
        np.testing.assert_allclose(single.final_loss[0], batch.final_loss[i], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(single.model.W[0], batch.model.W[i], rtol=1e-3, atol=1e-4)


@pytest.mark.slow
def test_factored_kappa1_matches_full_rank():
    d = 24
    for alpha, expect in ((0.3, True), (1.4, False)):
        tasks = jm.make_tasks(jax.random.key(2), n=4, d=d, p=jm.p_from_alpha(d, alpha))
        full = jm.train(jm.FullRank, tasks, progress=False)
        fac = jm.train(jm.Factored, tasks, kappa=1.0, progress=False)
        np.testing.assert_array_equal(full.all_stored, fac.all_stored)
        assert full.all_stored.all() == expect


def test_divergence_is_detected_and_never_stored():
    tasks = jm.make_tasks(jax.random.key(3), n=2, d=8, p=40)
    run = jm.train(jm.FullRank, tasks, lr=1e38, steps=50, init_scale=1e30, progress=False)
    assert run.diverged.all()
    assert not run.all_stored.any()
    assert run.steps_to_store == [None, None]


def test_same_seed_same_numbers():
    tasks = jm.make_tasks(jax.random.key(4), n=2, d=8, p=30, problem="dp")
    a = jm.train(jm.FullRank, tasks, steps=100, progress=False)
    b = jm.train(
        jm.FullRank, jm.make_tasks(jax.random.key(4), n=2, d=8, p=30, problem="dp"), steps=100, progress=False
    )
    np.testing.assert_array_equal(a.model.W, b.model.W)


def test_metrics_and_hebbian_scores_match_theory():
    """Hebbian DP: normalised competitor scores are exactly N(0, 1) given W e_mu; the normalised
    target's mean and spread match jaxmem.theory's finite-size law (tolerance: 5 standard errors
    of the simulated mean, 10% on the spread)."""
    d, p, n = 32, 72, 32
    tasks = jm.make_tasks(jax.random.key(5), n=n, d=d, p=p, problem="dp")
    W = jm.hebbian(tasks)
    met = jax.vmap(jm.metrics)(W, tasks)
    S = jax.vmap(lambda w, t: jm.dense_scores(w.project(t.inputs, precision=jax.lax.Precision.HIGHEST), t))(
        W, tasks
    )
    sigma = np.linalg.norm(np.asarray(jax.vmap(lambda w, t: w.project(t.inputs))(W, tasks)), axis=-1)
    Z = np.asarray(S) / sigma[..., None]
    comp = Z[:, ~np.eye(p, dtype=bool)]
    assert abs(comp.mean()) < 5 / np.sqrt(comp.size / p)  # correlated within a row
    assert abs(comp.std() - 1) < 0.02
    tgt = np.asarray(met.target).ravel()
    th = jm.theory.hebbian(d, p, "dp")
    assert abs(tgt.mean() - float(th.target_mean)) < 5 * tgt.std() / np.sqrt(tgt.size)
    assert abs(tgt.std() / float(th.target_std) - 1) < 0.1
    np.testing.assert_allclose(np.diagonal(Z, axis1=1, axis2=2), np.asarray(met.target), rtol=1e-4)
    assert met.singular_values.shape == (n, d)


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(d=1, p=5), "^d must"),
        (dict(d=8, p=1), "^p must"),
        (dict(d=8, p=5, problem="xp"), "^problem must"),
        (dict(d=8, p=5, embedding="cube"), "^embedding must"),
        (dict(d=2.5, p=5), "^d must"),
    ],
)
def test_invalid_tasks_raise(kwargs, name):
    with pytest.raises(ValueError, match=name):
        jm.make_task(jax.random.key(0), **kwargs)


def test_invalid_training_knobs_raise():
    tasks = jm.make_tasks(jax.random.key(0), n=1, d=8, p=10)
    for bad in (dict(lr=0.0), dict(lr=-1.0), dict(lr=float("nan")), dict(init_scale=0.0), dict(steps=-1)):
        with pytest.raises(ValueError, match=f"^{next(iter(bad))} must"):
            jm.train(jm.FullRank, tasks, progress=False, **bad)
    for kappa in (0.0, 1.5, -0.2):
        with pytest.raises(ValueError, match="kappa"):
            jm.train(jm.Factored, tasks, kappa=kappa, progress=False)
    for alpha in (0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="alpha"):
            jm.p_from_alpha(8, alpha)
    with pytest.raises(ValueError, match="model"):
        jm.train("mlp", tasks, progress=False)


def test_near_ties_are_rechecked_in_float64():
    """With every margin called a near-tie, every instance is re-evaluated in float64: its stored
    flags are those of an independent float64 numpy evaluation."""
    d, p, n = 12, 30, 3
    tasks = jm.make_tasks(jax.random.key(3), n=n, d=d, p=p, problem="dp")
    run = jm.train(jm.FullRank, tasks, steps=40)
    met = jm.ensemble_metrics(run.model, tasks, tie_rtol=1e9)
    assert np.asarray(met.near_tie).all()
    for i in range(n):
        W = np.asarray(run.model.W[i], np.float64)
        E = np.asarray(tasks.inputs[i], np.float64)
        C = np.asarray(tasks.materialised[i], np.float64)
        s = np.einsum("md,mrd->mr", E @ W.T, C)
        best = np.where(np.eye(p, dtype=bool), -np.inf, s).max(axis=1)
        np.testing.assert_array_equal(np.asarray(met.stored[i]), np.diagonal(s) > best)
        # float64 margins rounded once to float32 (a float32 evaluation is several ulps off)
        ref = (np.diagonal(s) - best).astype(np.float32)
        np.testing.assert_array_max_ulp(np.asarray(met.margin[i]), ref, maxulp=1)


def test_criteria_say_what_counts_as_stored():
    assert jm.criterion_of(1.0) == jm.AllStored() and jm.criterion_of(0.99) == jm.Accuracy(0.99)
    assert jm.AllStored().met(5, 5) and not jm.AllStored().met(4, 5)
    assert jm.Accuracy(0.8).met(4, 5) and not jm.Accuracy(0.8).met(3, 5)
    with pytest.raises(ValueError, match="^accuracy"):
        jm.Accuracy(1.5)
    # the float64 judgements: all stored is a positive minimum margin; a fraction is counted
    tasks = jm.make_tasks(jax.random.key(1), n=2, d=8, p=12)
    cons = jm.solvers.batch_constraints(tasks, np.full(2, 12), 12)
    W = np.stack([np.eye(8), -np.eye(8)])
    status, margin, _ = jm.solvers.verify(cons, W, 1e-5)
    frac = jm.solvers.stored_fraction(cons, W)
    np.testing.assert_array_equal(jm.AllStored().met64(cons, W, margin), margin > 0)
    np.testing.assert_array_equal(jm.Accuracy(0.5).met64(cons, W, margin), frac >= 0.5)


def _tail_reference(W, E, U, n, k):
    s = (E[:n] @ W.T) @ U[:n].T
    comp = np.where(np.eye(n, dtype=bool), -np.inf, s)
    tail = -np.sort(-comp, axis=1)[:, :k].mean(axis=1)
    return np.all(np.diagonal(s) > tail)


def test_a_criterion_that_is_not_top1_is_judged_from_its_own_scores():
    """The criterion seam: a criterion with its own per-association test (the tail average,
    `k = ceil(0.2 * 15) = 3` of 16) reaches the trainer's early stop, its results and the
    float64 judgement (against numpy in float64), and it differs from all-stored where it should
    (a weaker test stops earlier)."""
    crit = jm.TailAverage(0.2)
    tasks = jm.make_tasks(jax.random.key(3), n=4, d=8, p=16)
    cons = jm.solvers.batch_constraints(tasks, np.full(4, 16), 16)
    W = np.asarray(jax.random.normal(jax.random.key(4), (4, 8, 8)), np.float64)
    W[0] = np.asarray(jm.hebbian(jax.tree.map(lambda x: x[:1], tasks)).W[0], np.float64)
    E, U = np.asarray(tasks.inputs, np.float64), np.asarray(tasks.targets, np.float64)
    want = [_tail_reference(W[i], E[i], U[i], 16, 3) for i in range(4)]
    np.testing.assert_array_equal(crit.met64(cons, W, None), want)

    run = jm.train("full", tasks, jm.TrainConfig(steps=1000, tail=0.2))
    Wt = np.asarray(run.model.W, np.float64)
    met = np.array([_tail_reference(Wt[i], E[i], U[i], 16, 3) for i in range(4)])
    stopped = np.array([s is not None for s in run.steps_to_store])
    np.testing.assert_array_equal(stopped, met)
    assert stopped.any()
    top1 = jm.train("full", tasks, jm.TrainConfig(steps=1000))
    steps = lambda r: [s if s is not None else 10**9 for s in r.steps_to_store]
    assert all(a <= b for a, b in zip(steps(run), steps(top1))) and steps(run) != steps(top1)
