"""jaxmem: how many facts a linear associative memory can store, by simulation and theory.

Importing `jaxmem` loads nothing heavy: each public name is imported from its module on first
use (PEP 562), so the command line's `--help` and `import jaxmem` take a fraction of a second,
and neither the study layer nor matplotlib is loaded until asked for. `jaxmem.theory` and
`jaxmem.study` are subpackages, imported the same way.
"""

import importlib

from ._provenance import VERSION as __version__


# public name -> the module that defines it
_WHERE = {
    "cache_dir": "._cache",
    "enable_compilation_cache": "._cache",
    "AbstractCriterion": "._criteria",
    "Accuracy": "._criteria",
    "AllStored": "._criteria",
    "criterion_of": "._criteria",
    "parse_criterion": "._criteria",
    "TailAverage": "._criteria",
    "Experiment": "._experiment",
    "run_experiment": "._experiment",
    "step_footprint": "._footprint",
    "cross_entropy": "._loss",
    "dense_ce": "._loss",
    "dense_scores": "._loss",
    "Scores": "._loss",
    "stream_ce": "._loss",
    "stream_pass": "._loss",
    "ensemble_metrics": "._metrics",
    "Metrics": "._metrics",
    "metrics": "._metrics",
    "AbstractMemory": "._models",
    "Factored": "._models",
    "FullRank": "._models",
    "hebbian": "._models",
    "MEMORIES": "._models",
    "rank_of": "._models",
    "einsum": "._precision",
    "PRECISIONS": "._names",
    "AbstractTask": "._tasks",
    "alpha_of": "._tasks",
    "dp_candidates": "._tasks",
    "DPTask": "._tasks",
    "make_task": "._tasks",
    "make_tasks": "._tasks",
    "OPTask": "._tasks",
    "p_from_alpha": "._tasks",
    "PROBLEM_CLASSES": "._tasks",
    "Task": "._tasks",
    "median_capacity": "._medians",
    "median_ci": "._medians",
    "search_thresholds": "._threshold",
    "SearchPlan": "._plan",
    "Thresholds": "._threshold",
    "AdamProtocol": ".solvers._adam",
    "padded_size": "._train",
    "Run": "._train",
    "train": "._train",
    "TrainConfig": ".solvers._adam",
    "TrainInstance": ".solvers._adam",
    "InvalidArgument": "._validate",
    "AbstractEnsembleSolver": ".solvers",
    "choose_decider": ".solvers",
    "decide": ".solvers",
    "DecideConfig": ".solvers",
    "Decider": ".solvers",
    "Decision": ".solvers",
    "max_margin": ".solvers",
    "MaxMargin": ".solvers",
    "MaxMarginConfig": ".solvers",
    "run_ensemble": ".solvers",
    "WorkingSetDecider": ".solvers",
    "capacity": ".study",
    "CapacityEstimate": ".study",
    "load": ".study",
    "read_tables": ".study",
    "Tables": ".study",
}
_SUBPACKAGES = ("theory", "study", "solvers")
__all__ = sorted([*_WHERE, *_SUBPACKAGES, "__version__"])


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        module = importlib.import_module(f".{name}", __name__)
    elif name in _WHERE:
        module = getattr(importlib.import_module(_WHERE[name], __name__), name)
    else:
        raise AttributeError(f"module 'jaxmem' has no attribute {name!r}")
    globals()[name] = module  # the next access is a plain lookup
    return module


def __dir__():
    return __all__
