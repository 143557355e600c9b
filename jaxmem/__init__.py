"""jaxmem: how many facts a linear associative memory can store, by simulation and theory."""

from . import theory
from ._criteria import AbstractCriterion, Accuracy, AllStored, criterion_of
from ._experiment import Experiment, run_experiment
from ._footprint import step_footprint
from ._loss import cross_entropy, dense_ce, dense_scores, Scores, stream_ce, stream_pass
from ._metrics import ensemble_metrics, Metrics, metrics
from ._models import AbstractMemory, Factored, FullRank, hebbian, MEMORIES, rank_of
from ._precision import einsum, PRECISIONS
from ._provenance import VERSION as __version__
from ._tasks import (
    AbstractTask,
    alpha_of,
    dp_candidates,
    DPTask,
    make_task,
    make_tasks,
    OPTask,
    p_from_alpha,
    PROBLEM_CLASSES,
    Task,
)
from ._threshold import median_capacity, median_ci, search_thresholds, SearchPlan, Thresholds
from ._train import AdamProtocol, padded_size, Run, train, TrainConfig, TrainInstance
from ._validate import InvalidArgument
from .solvers import (
    AbstractEnsembleSolver,
    choose_decider,
    decide,
    DecideConfig,
    Decider,
    Decision,
    max_margin,
    MaxMargin,
    MaxMarginConfig,
    run_ensemble,
    WorkingSetDecider,
)
from .study import capacity, CapacityEstimate
