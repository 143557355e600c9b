"""Ensemble solvers: an abstract interface, the compacting runner, and the decision solver."""

from ._constraints import batch_constraints, Constraints, constraints
from ._decide import decide, decide_constraints, DecideConfig, Decider, Decision, STATUS, verify
from ._runner import AbstractEnsembleSolver, bucket, run_ensemble
