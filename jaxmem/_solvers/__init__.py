"""Ensemble solvers: an abstract interface, the compacting runner, and the decision solver."""

from ._constraints import batch_constraints, Constraints, constraints
from ._decide import decide_constraints, DecideConfig, Decider, DECIDERS, Decision, STATUS, verify
from ._dispatch import choose_decider, decide, decider_parts, DeciderParts
from ._runner import AbstractEnsembleSolver, bucket, run_ensemble
from ._working_set import WorkingSetDecider
