"""The working-set decider: storable only after a full pass, its unstorable certificate
re-derived in float64 numpy from the working set, the same thresholds as the dense decider, and
its settings recorded and run as recorded."""

import json
import os

import equinox as eqx
import jax
import jax.numpy as jnp
import jaxmem as jm
import numpy as np
import pytest
from jaxmem import search_thresholds, SearchPlan
from jaxmem.solvers import (
    _decider,
    _runner,
    _working_set,
    batch_constraints,
    decide,
    DecideConfig,
    init_states,
    run_ensemble,
)
from jaxmem.solvers._status import STORABLE
from jaxmem.solvers._working_set import (
    cast64,
    conclude_working_set,
    drop_candidates,
    hold_candidates,
    verify_working_set,
    working_set_instances,
)
from jaxmem.study import point_configs, run_unit


def _solver(tasks, p, k, W0=None):
    cons = batch_constraints(tasks, np.full(tasks.inputs.shape[0], p), p, stream=True)
    return working_set_instances(cons, W0=W0, config=DecideConfig(decider="working-set", working_set=k))


def test_storable_is_never_issued_without_a_full_pass():
    """A memory that satisfies every constraint of its working set but violates one outside it
    (the Hebbian memory, beyond its own capacity) is not called storable: the step's outer pass
    sees the violation and brings it into the working set."""
    d, p = 8, 24
    tasks = jm.make_tasks(jax.random.key(3), n=1, d=d, p=p, problem="op")
    E, U = np.asarray(tasks.inputs[0], np.float64), np.asarray(tasks.targets[0], np.float64)
    W = U.T @ E
    S = (E @ W.T) @ U.T
    M = np.diag(S)[:, None] - S
    np.fill_diagonal(M, np.inf)
    assert M.min() < 0, "the Hebbian memory fails at this p"
    solver, inst = _solver(tasks, p, k=4, W0=jnp.asarray(W[None], jnp.float32))
    one = lambda x: x[0]
    st0 = jax.tree.map(one, init_states(solver, inst))
    cons0 = jax.tree.map(one, inst.cons)
    # the working set: each input's 4 competitors of highest margin, every one of them positive
    best = np.argsort(np.where(np.isinf(M), -np.inf, M), axis=1)[:, -4:]
    assert np.take_along_axis(M, best, axis=1).min() > 0
    J = jnp.asarray(best, jnp.int32)
    opt, C, valid = solver.swap(cons0, st0.opt, J)
    assert bool(opt.stored), "every margin of the working set is positive"
    st0 = eqx.tree_at(lambda s: (s.opt, s.J, s.C, s.valid), st0, (opt, J, C, valid))
    after = solver.step(jax.tree.map(one, inst), st0)
    assert int(after.status) != STORABLE
    worst = int(np.argmin(M.min(axis=1)))
    assert int(M[worst].argmin()) in np.asarray(after.J[worst]).tolist(), "the violation joins the set"
    # run to the end from there: the decision is the dense decider's
    batch = jax.tree.map(lambda x: x[None], after)
    st_end, _ = run_ensemble(solver, inst, state=batch, chunk=1)
    dec = conclude_working_set(solver, inst, st_end)
    assert dec.status[0] == decide(tasks, p=p).status[0]


def test_unstorable_certificate_is_the_working_sets_multipliers():
    """The bound of an unstorable decision, re-derived in float64 numpy from its memory and its
    working set alone (the residuals on the set, zero elsewhere), is below tol."""
    d, p = 8, 26
    tasks = jm.make_tasks(jax.random.key(5), n=2, d=d, p=p, problem="dp")
    solver, inst = _solver(tasks, p, k=12)  # 12 of the 25 competitors of each input
    st, _ = run_ensemble(solver, inst, chunk=1)
    assert (np.asarray(st.status) == 1).all(), "unstorable on the working set itself (k never grew)"
    status, margin, bound = verify_working_set(inst, st, solver.config.tol)
    assert (status == 1).all()
    for i in range(2):
        E = np.asarray(tasks.inputs[i], np.float64)
        C = np.asarray(tasks.materialised[i], np.float64)
        W = np.asarray(st.opt.X[i], np.float64)
        J, valid = np.asarray(st.J[i]), np.asarray(st.valid[i])
        G, rsum, norms = np.zeros((d, d)), 0.0, []
        for mu in range(p):
            for rho in range(p):
                if rho != mu:
                    norms.append(np.sum(np.outer(C[mu, mu] - C[mu, rho], E[mu]) ** 2))
            for j in range(J.shape[1]):
                if valid[mu, j]:
                    A = np.outer(C[mu, mu] - C[mu, J[mu, j]], E[mu])
                    r = max(1.0 - np.sum(W * A), 0.0)
                    G += r * A
                    rsum += r
        a = np.sqrt(np.mean(norms))
        assert np.linalg.norm(G) / (a * rsum) == pytest.approx(bound[i], rel=1e-6)
        assert bound[i] < solver.config.tol


@pytest.mark.parametrize("problem", ["op", pytest.param("dp", marks=pytest.mark.slow)])
def test_thresholds_equal_the_dense_deciders(problem):
    """Seed by seed, the search finds the same thresholds with either decider."""
    d, seeds = 12, 4
    plan = SearchPlan(p0=36, p_max=60)
    tasks = jm.make_tasks(jax.random.key(4), n=seeds, d=d, p=plan.p_max, problem=problem)
    dense = search_thresholds(tasks, plan=plan)
    ws = search_thresholds(tasks, plan=plan, decide_config=DecideConfig(decider="working-set", working_set=8))
    assert dense.exact.all() and ws.exact.all()
    np.testing.assert_array_equal(ws.lo, dense.lo)


@pytest.mark.parametrize("decider", ["dense", "working-set"])
def test_warm_started_searches_find_the_same_thresholds(decider):
    """Seed by seed, a search whose decisions start from the best multiple of the seed's last
    storable memory finds the thresholds of one that starts each from `W = 0`."""
    d, seeds = 12, 4
    plan = SearchPlan(p0=36, p_max=60)
    tasks = jm.make_tasks(jax.random.key(4), n=seeds, d=d, p=plan.p_max, problem="op")
    cfg = lambda warm: DecideConfig(decider=decider, working_set=8, warm_start=warm)
    cold = search_thresholds(tasks, plan=plan, decide_config=cfg(False))
    warm = search_thresholds(tasks, plan=plan, decide_config=cfg(True))
    assert cold.exact.all() and warm.exact.all()
    np.testing.assert_array_equal(warm.lo, cold.lo)
    ps = lambda t: [[x[0] for x in dec] for dec in t.decisions]
    assert ps(warm) == ps(cold), "the same proposals, decided alike"
    it = lambda t: [x[4] for dec in t.decisions for x in dec]
    assert it(warm) != it(cold), "the warm starts ran"


def test_records_without_warm_start_read_as_cold():
    from jaxmem.study import normal_config, point_key

    plan = SearchPlan(p0=20, p_max=40)
    unit = point_configs(d=8, problem="op", seeds=2, decide_config=DecideConfig(decider="dense"), plan=plan)[
        0
    ]
    assert unit["decide"]["warm_start"] is False, "cold by default"
    old = dict(unit, decide={k: v for k, v in unit["decide"].items() if k != "warm_start"})
    assert normal_config(old)["decide"]["warm_start"] is False
    assert point_key(old) == point_key(unit), "written before the setting, the same point"
    warm = point_configs(d=8, problem="op", seeds=2, decide_config=DecideConfig(warm_start=True), plan=plan)[
        0
    ]
    assert warm["decide"]["warm_start"] is True and point_key(warm) != point_key(unit)
    with pytest.raises(ValueError, match="warm_start"):
        DecideConfig(warm_start=1)


def test_a_folder_written_before_warm_start_resumes_without_running_again(tmp_path):
    from jaxmem.study import config_id, Store

    plan = SearchPlan(p0=20, p_max=40)
    unit = point_configs(d=8, problem="op", seeds=2, group=2, plan=plan)[0]
    old = dict(unit, decide={k: v for k, v in unit["decide"].items() if k != "warm_start"})
    recs = run_unit(unit)
    store = Store(str(tmp_path))
    os.makedirs(store.records_dir)
    with open(store.path(old), "w") as f:  # as a version-1 writer wrote it
        f.writelines(json.dumps(dict(r.to_json(), v=1, config=old, id=config_id(old))) + "\n" for r in recs)
    assert store.get(unit) == recs, "the cold unit is found under its older form, read as today's"
    warm = dict(unit, decide=dict(unit["decide"], warm_start=True))
    assert store.get(warm) is None, "a warm unit is another measurement"


@pytest.mark.slow
def test_the_record_says_which_decider_ran_and_runs_it():
    auto = point_configs(d=128, problem="op", seeds=2, decide_config=DecideConfig(decider="auto"))[0]
    assert auto["decide"]["decider"] == "working-set" and auto["decide"]["working_set"] == 64
    small = point_configs(d=8, problem="op", seeds=2, decide_config=DecideConfig(decider="auto"))[0]
    assert small["decide"]["decider"] == "dense", "the record names the decider auto chose"
    cfg = DecideConfig(decider="working-set", working_set=2, outer_every=3)
    unit = point_configs(d=8, problem="op", seeds=2, group=2, decide_config=cfg)[0]
    assert [unit["decide"][k] for k in ("decider", "working_set", "outer_every")] == ["working-set", 2, 3]
    dense = run_unit(dict(unit, decide=dict(unit["decide"], decider="dense")))
    ws = run_unit(unit)
    assert [r["p_star"] for r in ws] == [r["p_star"] for r in dense]
    it = lambda recs: [x["iterations"] for r in recs for x in r["decisions"]]
    assert it(ws) != it(dense), "the recorded decider is the one that ran"


def test_bad_decider_settings_name_the_argument():
    with pytest.raises(ValueError, match="decider must be one of"):
        DecideConfig(decider="sparse")
    with pytest.raises(ValueError, match="working_set"):
        DecideConfig(working_set=0)
    with pytest.raises(ValueError, match="outer_every"):
        DecideConfig(outer_every=0)
    tasks = jm.make_tasks(jax.random.key(0), n=1, d=8, p=12)
    with pytest.raises(ValueError, match="decider 'working-set' decides full-rank memories only"):
        decide(tasks, model="factored", kappa=0.5, config=DecideConfig(decider="working-set"))


def test_the_working_set_size_follows_d_unless_set():
    from jaxmem.solvers import working_set_size

    assert working_set_size(DecideConfig(), 64) == 32
    assert working_set_size(DecideConfig(), 128) == 64
    assert working_set_size(DecideConfig(working_set=8), 128) == 8
    plan = SearchPlan(p0=500, p_max=800)
    auto = point_configs(d=64, problem="dp", seeds=2, decide_config=DecideConfig(), plan=plan)[0]
    assert auto["decide"]["working_set"] == 32, "the record holds the size that runs"


def test_a_dense_record_is_the_same_point_whatever_working_set_it_names():
    from jaxmem.study import normal_config, point_key

    plan = SearchPlan(p0=20, p_max=40)
    unit = point_configs(d=8, problem="op", seeds=2, decide_config=DecideConfig(decider="dense"), plan=plan)[
        0
    ]
    assert unit["decide"]["working_set"] is None
    old = dict(unit, decide=dict(unit["decide"], working_set=32))
    assert normal_config(old)["decide"]["working_set"] is None
    assert point_key(old) == point_key(unit)
    ws = dict(unit, decide=dict(unit["decide"], decider="working-set", working_set=32))
    assert normal_config(ws)["decide"]["working_set"] == 32


def test_the_blocked_adjoint_is_the_sum_it_stands_for():
    from jaxmem.solvers._working_set import _weighted_sum

    R = jax.random.normal(jax.random.key(0), (5, 40))
    C = jax.random.normal(jax.random.key(1), (5, 40, 7))
    np.testing.assert_allclose(_weighted_sum(R, C), np.einsum("pk,pkd->pd", R, C), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("problem", ["op", "dp"])
def test_the_streamed_certificate_passes_are_the_dense_ones(problem, x64):
    # the least margin and the constraint norm `a` of padded prefixes, in float64, against the
    # dense margins and the norms |A|_F = |e_mu| |u_mu - c_mu,rho| summed one by one (the OP's
    # norm is a closed form, the DP's a pass over its candidates)
    tasks = jm.make_tasks(jax.random.key(3), n=3, d=12, p=80, problem=problem, dtype=jnp.float64)
    ps = np.array([80, 61, 33])
    W = jax.random.normal(jax.random.key(4), (3, 12, 12), jnp.float64)
    streamed = batch_constraints(tasks, ps, 80, stream=True, block=32)
    dense = batch_constraints(tasks, ps, 80, stream=False)
    least = jax.vmap(lambda c, w: c.least_margin(w))(streamed, W)
    M = jax.vmap(lambda c, w: jnp.min(jnp.where(c.mask, c.margins(w), jnp.inf)))(dense, W)
    np.testing.assert_allclose(least, M, rtol=1e-12)
    idx = jnp.arange(80)
    C = np.asarray(jax.vmap(lambda t: t.candidates(idx[:, None], idx[None, :]))(tasks))
    E, U = np.asarray(tasks.inputs), np.asarray(tasks.targets)
    ref = []
    for i, p in enumerate(ps):
        norms = (E[i, :p] ** 2).sum(1)[:, None] * ((U[i, :p, None] - C[i, :p, :p]) ** 2).sum(-1)
        ref.append(np.sqrt(norms[~np.eye(p, dtype=bool)].mean()))
    for cons in (streamed, dense):
        np.testing.assert_allclose(jax.vmap(lambda c: c.rms_norm())(cons), ref, rtol=1e-10)


def test_held_candidates_are_the_generated_ones_read_cast_and_dropped(monkeypatch):
    """`hold_candidates` holds exactly the candidates a streamed DP task generates (in one block
    of rows, or in blocks of 7 whose last one overlaps), within its budget only and never for the
    OP; the float64 recheck reads them cast tile by tile, not as a float64 copy; `drop` frees
    them."""
    from jaxmem.solvers import _working_set

    d, p, n = 6, 20, 3
    tasks = jm.make_tasks(jax.random.key(1), n=n, d=d, p=p, problem="dp", materialise_limit=0)
    assert tasks.streams_only
    cons = batch_constraints(tasks, np.full(n, p), p, stream=True)
    with monkeypatch.context() as m:
        m.setattr(_working_set, "HOLD_BLOCK", 7 * p * d)
        blocked = hold_candidates(cons)
    held = hold_candidates(cons)
    assert held.held and not cons.held and blocked.held
    for i in range(n):
        one = jax.tree.map(lambda x: x[i], tasks)
        np.testing.assert_array_equal(held.task.materialised[i], one.table(p))
        np.testing.assert_array_equal(blocked.task.materialised[i], one.table(p))
    assert hold_candidates(cons, budget=n * p * p * d * 4 - 1) is cons
    op = jm.make_tasks(jax.random.key(1), n=n, d=d, p=p, problem="op")
    op_cons = batch_constraints(op, np.full(n, p), p, stream=True)
    assert hold_candidates(op_cons) is op_cons
    with jax.enable_x64(True):
        c64 = cast64(held)
        assert c64.task.materialised.dtype == jnp.float32 and c64.task.inputs.dtype == jnp.float64
        tile = jax.vmap(lambda c: c.task.candidates(jnp.arange(p)[:, None], jnp.arange(p)[None, :]))(c64)
        assert tile.dtype == jnp.float64
        np.testing.assert_array_equal(tile, held.task.materialised.astype(jnp.float64))
    array = held.task.materialised
    drop_candidates(held)
    assert array.is_deleted()


@pytest.mark.slow
def test_a_search_that_holds_its_candidates_decides_as_one_that_generates_them(monkeypatch):
    """Seed by seed, a working-set search of streamed DP tasks makes the same proposals and finds
    the same thresholds whether its batch holds the candidates (run whole) or regenerates them
    at every pass (`HOLD_BYTES = 0`)."""
    d, seeds = 10, 4
    plan = SearchPlan(p0=28, p_max=44)
    tasks = jm.make_tasks(jax.random.key(5), n=seeds, d=d, p=plan.p_max, problem="dp", materialise_limit=0)
    cfg = DecideConfig(decider="working-set", working_set=8)
    held = []
    real = _decider.hold_candidates
    monkeypatch.setattr(_decider, "hold_candidates", lambda c: held.append((r := real(c)).held) or r)
    holding = search_thresholds(tasks, plan=plan, decide_config=cfg)
    assert held and all(held), "every batch held its candidates"
    monkeypatch.setattr(_working_set, "HOLD_BYTES", 0)
    held.clear()
    generating = search_thresholds(tasks, plan=plan, decide_config=cfg)
    assert held and not any(held)
    assert holding.exact.all() and generating.exact.all()
    np.testing.assert_array_equal(holding.lo, generating.lo)
    ps = lambda t: [[x[0] for x in dec] for dec in t.decisions]
    assert ps(holding) == ps(generating)
    # where steps are costly the held batch compacts once its running instances fit a smaller
    # bucket (here: one of four), and decides the same
    monkeypatch.setattr(_working_set, "HOLD_BYTES", 2**30)
    monkeypatch.setattr(_runner, "SMALL_WORK", 0)
    sizes, chunk = [], _runner._chunk
    monkeypatch.setattr(_runner, "_chunk", lambda *a: sizes.append((a[4].size, a[6])) or chunk(*a))
    compacting = search_thresholds(tasks, plan=plan, decide_config=cfg)
    # (a gathered bucket of one runs as (1, False); a continuation of a sub-batch runs whole)
    assert held[-1] and (1, False) in sizes and (seeds, True) in sizes, sorted(set(sizes))
    np.testing.assert_array_equal(compacting.lo, holding.lo)
    assert ps(compacting) == ps(holding)


def test_the_float64_certificate_of_held_candidates_is_that_of_generated_ones():
    """`verify_working_set` gives the same float64 margins and bounds whether the batch's DP
    candidates are held in float32 or regenerated in float64 from the same draws."""
    d, p, n = 8, 30, 3
    tasks = jm.make_tasks(jax.random.key(2), n=n, d=d, p=p, problem="dp", materialise_limit=0)
    cfg = DecideConfig(decider="working-set", working_set=6)
    cons = batch_constraints(tasks, np.full(n, p), p, stream=True)
    solver, inst = working_set_instances(cons, config=cfg)
    st, _ = run_ensemble(solver, inst, chunk=2, compact=False)
    held = eqx.tree_at(lambda i: i.cons, inst, hold_candidates(cons))
    a, b = verify_working_set(inst, st, cfg.tol), verify_working_set(held, st, cfg.tol)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-15)
