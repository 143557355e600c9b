"""The names and defaults of the settings the command line offers, in a leaf that imports
nothing: building the parser (and `jaxmem --help`) loads no array library. The registries that
give these names their meaning (`MEMORIES`, `PROBLEM_CLASSES`, the search's `SOLVERS`) are
checked against them (`tests/test_layers.py`)."""

PROBLEMS = ("op", "dp")
MEMORY_NAMES = ("full", "factored")
# what a sweep can run: the trained memories, and the closed-form Hebbian rule
MODELS = (*MEMORY_NAMES, "hebbian")
EMBEDDINGS = ("gaussian", "sphere", "unit")
SOLVER_NAMES = ("certified", "adam", "hebbian")
# the certified deciders (`jaxmem.solvers.DECIDERS`), after "auto", which picks one of them
DECIDER_NAMES = ("auto", "dense", "working-set")
PRECISIONS = ("highest", "tf32", "bf16")
# the training defaults (docs/decisions.md, "Training")
DEFAULT_STEPS = 5000
DEFAULT_LR = 3e-2
DEFAULT_INIT_SCALE = 1e-3
# The largest `DecideConfig.tol`. Measured (`jaxmem capacity --d 12 20 --problem op dp --seeds
# 16 --tol T`): the median thresholds equal those of the default 1e-5 up to T = 1e-3, while 1e-2
# already lowers the DP's at d = 20; margins at the threshold shrink with `d`, so the default is
# far below the bound.
MAX_TOL = 1e-3
# the registered studies (`jaxmem.study.STUDIES`): name -> (title, presets), for `--help`
STUDY_NAMES = {
    "demo": (
        "the capacity study: certified, Adam, Hebbian, rank, spectra, scores, a peer's protocol",
        ("default", "quick", "paper"),
    ),
    "mechanism": (
        "the storage mechanism: max-margin and Hebbian spectra and scores against the laws",
        ("default", "quick"),
    ),
    "peer": (
        "a peer's protocol: Adam to accuracy 0.99 on unit-norm embeddings, beside certified",
        ("default", "quick"),
    ),
    "rank": (
        "rank-constrained memories W = Q R^T: certified lower bounds against kappa",
        ("default", "large", "quick"),
    ),
    "scaling": (
        "OP against DP against d (certified), and whether their difference shrinks",
        ("default", "more", "accelerator", "quick"),
    ),
    "sweep": ("fixed-p ensembles over a grid of loads, with a logistic estimate", ("default", "quick")),
    "tail": (
        "The tail-average capacity (certified) beside top-1, against alpha_G,c(r)",
        ("default", "quick"),
    ),
}
