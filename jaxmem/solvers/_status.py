"""How a solver's instance ended: one enumeration for the deciders and the max-margin solver.

A decider's instance is `STORABLE` (a memory with every margin positive, certified in float64),
`UNSTORABLE` (a Gordan bound below the tolerance, certified in float64) or `UNDECIDED` (the
budget ran out first; never counted as either). The max-margin solver ends `STORABLE` when its
margin is certified within its gap of the best one ("converged"), `UNSTORABLE` likewise, and
`UNDECIDED` ("unconverged") otherwise. Inside a solver's loop an instance still being solved is
`RUNNING`; why a solver stopped early for its own reasons (a working set to grow, float32 that
no longer resolves a margin) is kept in its own state, never in the status.
"""

from __future__ import annotations

import enum


class Status(enum.IntEnum):
    """The status of a decided instance (an integer in the solvers' arrays)."""

    STORABLE = 0
    UNSTORABLE = 1
    UNDECIDED = 2


STORABLE, UNSTORABLE, UNDECIDED = Status.STORABLE, Status.UNSTORABLE, Status.UNDECIDED

# an instance still being solved (inside a solver's loop only)
RUNNING = -1

# the words a record stores, by status: a decider's and the max-margin solver's
STATUS = ("storable", "unstorable", "undecided")
MARGIN_STATUS = ("converged", "unstorable", "unconverged")
