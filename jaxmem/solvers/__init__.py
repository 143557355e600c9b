"""Ensemble solvers: the abstract interface and its compacting runner, the constraints of a
storability decision, the one L-BFGS under both deciders, the dense and working-set deciders
with their float64 certificates, and the max-margin solver. Exported: what users call and what
the rest of the package builds on; the step-level pieces stay in their modules."""

from ._constraints import batch_constraints, Constraints, constraints, StreamedConstraints
from ._decide import (
    decide_constraints,
    DecideConfig,
    Decider,
    DECIDERS,
    Decision,
    MAX_TOL,
    stored_fraction,
    to64,
    verify,
)
from ._decider import (
    AbstractDecider,
    choose_decider,
    criterion_decider,
    decide,
    decider_for,
    Dense,
    register_decider,
    Tail,
    WorkingSet,
)
from ._lbfgs import line_search, Linear
from ._margin import (
    max_margin,
    max_margin_constraints,
    MaxMargin,
    MaxMarginConfig,
)
from ._runner import AbstractEnsembleSolver, bucket, init_states, run_ensemble
from ._status import MARGIN_STATUS, STATUS, Status
from ._tail import tail_k, tail_margins, TailDecider
from ._working_set import (
    conclude_working_set,
    HOLD_BYTES,
    hold_candidates,
    outer_pass,
    verify_working_set,
    working_set_instances,
    working_set_size,
    WorkingSetDecider,
)
