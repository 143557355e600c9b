"""jaxmem: how many facts a linear associative memory can store, by simulation and theory."""

from . import theory
from ._loss import Scores, cross_entropy, dense_ce, dense_scores, stream_ce
from ._measure import CapacityEstimate, capacity
from ._metrics import Metrics, ensemble_metrics, metrics
from ._models import Factored, FullRank, hebbian, rank_of
from ._tasks import Task, dp_candidates, load, make_task, make_tasks, p_from_alpha
from ._solvers import AbstractEnsembleSolver, DecideConfig, Decider, Decision, decide, run_ensemble
from ._solvers._adam import AdamConfig, AdamProtocol
from ._threshold import SearchPlan, Thresholds, median_ci, search_thresholds
from ._train import Run, train

__version__ = "0.1.0"
