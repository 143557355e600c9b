"""The one finish of every decider: the float64 verdict of a certificate, near-ties continued in
float64, and the `Decision` of a batch (docs/science.md, 2.7).

A decider's iterations run in the task's dtype; what counts is recomputed in float64 from the
memory it returns. A certificate the float64 recheck refutes (float32 said storable or
unstorable, float64 disagrees) is continued in float64 from where it stopped; one refuted again
is undecided. Each decider supplies its own float64 certificate (`margin`, `bound`) and its own
float64 rerun; the rules here are shared.
"""

from __future__ import annotations

import jax
import numpy as np

from ._status import STORABLE, UNDECIDED, UNSTORABLE


def certified_status(margin, bound, tol: float) -> np.ndarray:
    """The status that float64 certificates give: storable where the least normalised margin is
    positive, else unstorable where the Gordan bound is below `tol`, else undecided."""
    return np.where(margin > 0, STORABLE, np.where(bound < tol, UNSTORABLE, UNDECIDED))


def refuted(solver_status, status) -> np.ndarray:
    """Instances whose solver concluded (storable or unstorable) where float64 disagrees."""
    return ((solver_status == STORABLE) | (solver_status == UNSTORABLE)) & (status != solver_status)


def continue_in_float64(again, status, margin, bound, iterations, W, rerun):
    """Instances `again` (a refuted certificate, or one float32 cannot resolve) continue in
    float64 from their `W`. `rerun(idx)`, called with x64 on, returns the float64 run's
    `(status, iterations, W, (status, margin, bound) of its float64 certificate)`; a certificate
    that its recheck refutes again leaves the instance undecided. `margin`, `bound` and
    `iterations` are updated in place.

    **Returns:** `(status, W)`, `W` in float64."""
    idx = np.flatnonzero(again)
    with jax.enable_x64(True):
        s64, it64, W64, (st_, m_, b_) = rerun(idx)
    iterations[idx] += it64
    status = status.copy()
    status[idx] = np.where(refuted(s64, st_), UNDECIDED, st_)
    margin[idx], bound[idx] = m_, b_
    W = W.astype(np.float64)
    W[idx] = W64
    return status, W


def settle(status, margin, bound, iterations, W, solver_status, *, rerun, can_rerun, unresolved=None):
    """The float64 outcome of a batch: refuted certificates and `unresolved` instances (float32
    could not resolve their margins) continue in float64 where `can_rerun`; otherwise a refuted
    one is undecided and an unresolved one keeps its float64 certificate.

    **Arguments:** the float64 certificates (`status`, `margin`, `bound`, from
    `certified_status`), the iterations and memories of the batch, the solver's own statuses,
    `rerun` as in `continue_in_float64`, `can_rerun` (False in float64 already), `unresolved`
    (a boolean per instance, or None).

    **Returns:** `(status, W)`."""
    unresolved = np.zeros(status.shape, bool) if unresolved is None else unresolved
    again = refuted(solver_status, status) | unresolved
    if again.any() and can_rerun:
        return continue_in_float64(again, status, margin, bound, iterations, W, rerun)
    return np.where(again & ~unresolved, UNDECIDED, status), W
