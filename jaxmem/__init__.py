"""jaxmem: how many facts a linear associative memory can store, by simulation and theory."""

from . import theory
from ._loss import cross_entropy, dense_ce, dense_scores, Scores, stream_ce
from ._measure import capacity, CapacityEstimate
from ._metrics import ensemble_metrics, Metrics, metrics
from ._models import Factored, FullRank, hebbian, rank_of
from ._solvers import AbstractEnsembleSolver, decide, DecideConfig, Decider, Decision, run_ensemble
from ._solvers._adam import AdamConfig, AdamProtocol
from ._tasks import dp_candidates, load, make_task, make_tasks, p_from_alpha, Task
from ._threshold import median_ci, search_thresholds, SearchPlan, Thresholds
from ._train import Run, train


__version__ = "0.1.0"
