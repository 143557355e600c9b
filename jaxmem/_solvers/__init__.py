"""Ensemble solvers: an abstract interface, the compacting runner, and the decision solver."""

from ._constraints import Constraints, batch_constraints, constraints
from ._decide import STATUS, DecideConfig, Decider, Decision, decide, decide_constraints, verify
from ._runner import AbstractEnsembleSolver, bucket, run_ensemble
