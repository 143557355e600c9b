"""The certified max-margin solver against independent references: the primal QP by scipy's
SLSQP (the memory itself) and the min-norm point of the constraints' convex hull by an exact
active-set NNLS (the best margin, by duality); the rank-`m` memory against the full-rank bound
and the truncated SVD it starts from; bad arguments."""

import math

import jax
import jaxmem as jm
import numpy as np
import pytest
from scipy.optimize import minimize, nnls


def _A(E, C):
    """The `p (p - 1)` constraint matrices, flattened (OP: `C` is `(p, d)`; DP: `(p, p, d)`)."""
    p = E.shape[0]
    t = lambda m, r: (C[m] - C[r]) if C.ndim == 2 else (C[m, m] - C[m, r])
    return np.array([np.outer(t(m, r), E[m]).ravel() for m in range(p) for r in range(p) if r != m])


def _best_margin(A):
    """gamma* = max_{|W|_F = 1} min_i <W, A_i> / a, by duality the distance from 0 to the convex
    hull of the `A_i / a` (zero when unstorable): the min-norm point of the hull by NNLS
    (Lawson-Hanson), `min_{lam >= 0} |B^T lam|^2 + rho^2 (sum lam - 1)^2`."""
    a = math.sqrt(np.mean(np.sum(A * A, axis=1)))
    B = A / a
    rho = 1e4
    M = np.vstack([B.T, rho * np.ones((1, B.shape[0]))])
    lam, _ = nnls(M, np.r_[np.zeros(B.shape[1]), rho], maxiter=50 * B.shape[0])
    lam /= lam.sum()
    return np.linalg.norm(B.T @ lam), a


def _qp(A):
    """`min |w|^2 / 2` subject to `A w >= 1`, by SLSQP."""
    res = minimize(
        lambda w: 0.5 * w @ w,
        np.zeros(A.shape[1]),
        jac=lambda w: w,
        method="SLSQP",
        constraints=[dict(type="ineq", fun=lambda w: A @ w - 1.0, jac=lambda w: A)],
        options=dict(ftol=1e-15, maxiter=2000),
    )
    return res.x


def _tables(tasks, j):
    E = np.asarray(tasks.inputs[j], np.float64)
    C = np.asarray(tasks.targets[j] if tasks.problem == "op" else tasks.materialised[j], np.float64)
    return E, C


@pytest.mark.parametrize("problem", ["op", "dp"])
def test_max_margin_is_the_qp_solution_and_its_bounds_bracket_the_optimum(problem):
    d, p, n = 5, 9, 3
    tasks = jm.make_tasks(jax.random.key(0), n=n, d=d, p=p, problem=problem)
    mm = jm.max_margin(tasks, config=jm.MaxMarginConfig(gap=1e-9))
    for j in range(n):
        E, C = _tables(tasks, j)
        A = _A(E, C)
        g, a = _best_margin(A)
        if g < 1e-6:  # not storable: certified so, and nothing else claimed
            assert mm.status[j] == 1 and mm.margin_bound[j] < 1e-5, (mm.status[j], mm.margin_bound[j])
            continue
        assert mm.status[j] == 0 and mm.gap[j] <= 1e-9
        assert mm.margin[j] <= g * (1 + 1e-7) and g <= mm.margin_bound[j] * (1 + 1e-7)
        w = _qp(A)
        assert np.all(A @ w >= 1 - 1e-8), "the reference QP must be feasible"
        assert abs(1 / (np.linalg.norm(w) * a) - g) <= 1e-6 * g, "the two references must agree"
        W = mm.weight[j]
        assert np.linalg.norm(W - w.reshape(d, d)) <= 1e-4 * np.linalg.norm(w)
        M = A @ W.ravel()
        assert abs(M.min() - 1) < 1e-9, "the memory is scaled to least margin 1"
        act = (M < 1 + 1e-2).reshape(p, p - 1).sum(axis=1)
        assert np.array_equal(mm.active[j, :p], act)
    assert np.any(mm.status == 0)


def test_factored_max_margin_is_rank_m_and_below_the_full_rank_bound():
    d, p, n = 8, 12, 3
    tasks = jm.make_tasks(jax.random.key(1), n=n, d=d, p=p)
    full = jm.max_margin(tasks)
    fac = jm.max_margin(tasks, model="factored", kappa=0.5)
    m = d // 2
    for j in range(n):
        E, C = _tables(tasks, j)
        A = _A(E, C)
        a = math.sqrt(np.mean(np.sum(A * A, axis=1)))
        W = fac.weight[j]
        assert np.linalg.matrix_rank(W, tol=1e-8 * np.linalg.norm(W)) <= m
        M = A @ W.ravel()
        assert abs(M.min() - 1) < 1e-9
        assert abs(fac.margin[j] - 1 / (np.linalg.norm(W) * a)) <= 1e-9 * fac.margin[j]
        assert 0 < fac.margin[j] <= full.margin_bound[j] == fac.margin_bound[j]
        assert abs(fac.gap[j] - (1 - fac.margin[j] / full.margin_bound[j])) < 1e-12
        # better than the truncated SVD of the full-rank optimum it starts from
        U, s, Vt = np.linalg.svd(full.weight[j])
        Wt = (U[:, :m] * s[:m]) @ Vt[:m]
        assert fac.margin[j] > np.min(A @ Wt.ravel()) / (np.linalg.norm(Wt) * a)


def test_max_margin_bad_arguments_name_themselves():
    tasks = jm.make_tasks(jax.random.key(0), n=2, d=4, p=6)
    with pytest.raises(ValueError, match="^p "):
        jm.max_margin(tasks, p=1)
    with pytest.raises(ValueError, match="model"):
        jm.max_margin(tasks, model="deep")
    with pytest.raises(ValueError, match="kappa"):
        jm.max_margin(tasks, kappa=0.5)
    with pytest.raises(ValueError, match="gap"):
        jm.MaxMarginConfig(gap=0.0)
    with pytest.raises(ValueError, match="tasks"):
        jm.max_margin(jax.tree.map(lambda x: x[0], tasks))


def test_max_margin_refuses_what_does_not_fit_before_allocating():
    tasks = jm.make_tasks(jax.random.key(0), n=2, d=256, p=4)  # two 65536^2 Newton matrices
    with pytest.raises(ValueError, match="^d and the number of tasks"):
        jm.max_margin(tasks)
