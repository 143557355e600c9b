"""Helpers shared by the tests."""

import math

import numpy as np
from scipy.optimize import linprog


def same_json(a, b, rel: float = 1e-12) -> bool:
    """Whether two JSON values are equal, floats to `rel` (the last bits of a float sum depend on
    the CPU's vector width, so a number computed on another machine may differ in them)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y, rel) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        if (
            isinstance(a, bool)
            or isinstance(b, bool)
            or not isinstance(a, int | float)
            or not isinstance(b, int | float)
        ):
            return False
        return a == b or math.isclose(a, b, rel_tol=rel, abs_tol=rel)
    return type(a) is type(b) and a == b


def ensemble_records(cfg: dict) -> list:
    """Valid (made-up) records of a sweep config `cfg`, one per seed, for tests of the files."""
    from jaxmem.study import envelope

    fields = dict(alpha=0.1, accuracy=1.0, all_stored=True, steps_to_store=1, diverged=False)
    fields |= dict(final_loss=0.0, target_score=[1.0], best_score=[0.0], singular_values=[1.0])
    return [envelope(cfg, s, **fields, seconds=0.0) for s in range(cfg["seeds"])]


def arrays(task, p):
    """float64 numpy inputs and candidates `(p, p, d)` of the first `p` associations."""
    E = np.asarray(task.inputs[:p], np.float64)
    if task.problem == "op":
        C = np.broadcast_to(np.asarray(task.targets[:p], np.float64), (p, p, E.shape[1]))
    else:
        C = np.asarray(task.materialised[:p, :p], np.float64)
    return E, C


def constraint_matrix(E, C):
    p, d = E.shape
    rows = [np.outer(C[m, m] - C[m, r], E[m]).ravel() for m in range(p) for r in range(p) if r != m]
    return np.array(rows)


def lp_storable(E, C):
    """Exact LP (HiGHS): max t s.t. <W, A_i> >= t, |W_ij| <= 1, t <= 1; storable iff t* > 0."""
    A = constraint_matrix(E, C)
    n = A.shape[1]
    c = np.zeros(n + 1)
    c[-1] = -1.0
    res = linprog(
        c,
        A_ub=np.hstack([-A, np.ones((A.shape[0], 1))]),
        b_ub=np.zeros(A.shape[0]),
        bounds=[(-1, 1)] * n + [(None, 1)],
        method="highs",
    )
    assert res.status == 0
    return -res.fun > 1e-9, -res.fun


def numpy_certificates(E, C, W):
    """Independent float64 check: the min margin of W, and the multiplier bound |sum lambda A|/a
    for lambda the normalised residuals (1 - <W, A>)_+."""
    A = constraint_matrix(E, C)
    M = A @ np.asarray(W, np.float64).ravel()
    a = math.sqrt(np.mean(np.sum(A * A, axis=1)))
    r = np.maximum(1 - M, 0)
    bound = np.linalg.norm(r @ A) / (r.sum() * a) if r.sum() > 0 else math.inf
    return M.min(), bound


def lp_tail(E, C, k):
    """Exact LP (HiGHS) of the tail-average criterion, by the top-k-sum reformulation
    `sum of the k smallest M_j = max_s k s - sum_j (s - M_j)_+`: max g s.t. for every input `mu`
    `s_mu - M_{mu j} - xi_{mu j} <= 0`, `g - s_mu + (1/k) sum_j xi_{mu j} <= 0`, `xi >= 0`,
    `|W_ij| <= 1`, `g <= 1`; storable iff `g* > 0`. **Returns:** `g*`."""
    from scipy.sparse import coo_matrix, csr_matrix, hstack, identity, vstack

    p, d = E.shape
    A = constraint_matrix(E, C)
    n, q = d * d, p * (p - 1)
    mu = np.repeat(np.arange(p), p - 1)
    first = hstack(
        [
            csr_matrix(-A),
            coo_matrix((np.ones(q), (np.arange(q), mu)), shape=(q, p)),
            -identity(q),
            csr_matrix((q, 1)),
        ]
    )
    second = hstack(
        [
            csr_matrix((p, n)),
            -identity(p),
            coo_matrix((np.full(q, 1.0 / k), (mu, np.arange(q))), shape=(p, q)),
            csr_matrix(np.ones((p, 1))),
        ]
    )
    c = np.zeros(n + p + q + 1)
    c[-1] = -1.0
    res = linprog(
        c,
        A_ub=vstack([first, second]).tocsr(),
        b_ub=np.zeros(q + p),
        bounds=[(-1, 1)] * n + [(None, None)] * p + [(0, None)] * q + [(None, 1)],
        method="highs",
    )
    assert res.status == 0, res.message
    return -res.fun


def tail_margins64(E, C, W, k):
    """Independent float64 check: per input, the mean of its `k` smallest margins under `W`."""
    p = E.shape[0]
    M = constraint_matrix(E, C) @ np.asarray(W, np.float64).ravel()
    return np.sort(M.reshape(p, p - 1), axis=1)[:, :k].mean(axis=1)
