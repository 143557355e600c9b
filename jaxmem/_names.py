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
