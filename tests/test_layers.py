"""The package's shape: the import graph of `jaxmem/` (function-level imports included) has no
cycle, every layer imports only layers below it, no module imports another's private names,
and scripts and benchmarks use the public API only."""

import ast
import os
import pathlib
import tomllib

import jaxmem


ROOT = pathlib.Path(__file__).resolve().parent.parent
PKG = ROOT / "jaxmem"

# the layers, bottom first: a module may import its own layer's modules and those below
LAYERS = [
    {"_names", "_cache", "_validate", "_files", "_provenance", "_precision", "_parallel"},
    {"theory"},
    {"_tasks", "_models", "_loss", "_metrics", "solvers", "_criteria", "_plan", "_medians"},
    {"_train", "_threshold", "_experiment", "_footprint"},
    {"study"},
    {"cli"},
]


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for f in PKG.rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _imports(name: str, path: pathlib.Path, modules) -> list[tuple[str, str]]:
    """`(module, imported name)` for every import of jaxmem in the file, at any depth."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names if a.name.split(".")[0] == "jaxmem"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != "jaxmem":
                continue
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.append((sub, "") if sub in modules else (mod, a.name))
    return out


def _graph():
    modules = _modules()
    return modules, {
        m: {t for t, _ in _imports(m, f, modules) if t in modules and t != m} for m, f in modules.items()
    }


def _cycle(graph) -> list[str] | None:
    state, stack = {}, []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return stack[stack.index(w) :] + [w]
            if w not in state and (found := visit(w)):
                return found
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) == 1:
        return None  # the package's __init__: the public surface, above everything
    return next(i for i, names in enumerate(LAYERS) if parts[1] in names)


def test_the_import_graph_has_no_cycle():
    _, graph = _graph()
    # `import jaxmem.x` inside jaxmem runs the package's __init__ first, which imports most
    # modules: an edge to the package itself would close a circle
    assert not any("jaxmem" in targets for m, targets in graph.items() if m != "jaxmem"), {
        m: t for m, t in graph.items() if "jaxmem" in t
    }
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_every_module_belongs_to_a_layer_and_imports_only_downward():
    _, graph = _graph()
    wrong = []
    for m, targets in graph.items():
        lm = _layer(m)
        for t in targets:
            lt = _layer(t)
            if lm is not None and (lt is None or lt > lm):
                wrong.append(f"{m} -> {t}")
    assert not wrong, wrong


# the study layer's own layers, bottom first (the same rule inside `jaxmem.study`)
STUDY_LAYERS = [
    {"_stats"},
    {"_records", "_mechanism"},
    {"_units"},
    {"_runner"},
    {"_analysis"},
    {"_spec", "_tables", "_panels"},
    {"_figures"},
    {"_report", "_study"},
    {"studies"},
]


def test_the_study_layer_imports_only_downward_and_studies_never_import_each_other():
    _, graph = _graph()
    level = lambda m: next(i for i, names in enumerate(STUDY_LAYERS) if m.split(".")[2] in names)
    inside = lambda m: m.startswith("jaxmem.study.") and len(m.split(".")) > 2
    wrong = [
        f"{m} -> {t}"
        for m, targets in graph.items()
        if inside(m)
        for t in targets
        if inside(t) and level(t) > level(m)
    ]
    assert not wrong, wrong
    study_files = {m for m in graph if m.startswith("jaxmem.study.studies.")}
    assert len(study_files) >= 5
    crossing = [f"{m} -> {t}" for m in study_files for t in graph[m] if t in study_files]
    assert not crossing, crossing


def test_no_module_imports_another_modules_private_names():
    modules = _modules()
    wrong = [
        f"{m}: {mod}.{name}"
        for m, f in modules.items()
        for mod, name in _imports(m, f, modules)
        if name.startswith("_") and not name.startswith("__")
    ]
    assert not wrong, wrong


def test_scripts_and_benchmarks_use_the_public_api():
    wrong = []
    for folder in ("scripts", "benchmarks"):
        for f in (ROOT / folder).glob("*.py"):
            for mod, name in _imports(f.stem, f, {}):
                if any(p.startswith("_") for p in mod.split(".")) or name.startswith("_"):
                    wrong.append(f"{folder}/{f.name}: {mod} {name}")
    assert not wrong, wrong


def test_the_version_is_the_one_pyproject_declares():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        assert jaxmem.__version__ == tomllib.load(f)["project"]["version"]


def test_the_command_lines_names_are_the_registries():
    """The parser offers the names of `jaxmem._names`, a leaf; each is its registry's keys."""
    from jaxmem import _names
    from jaxmem._models import MEMORIES, MODELS
    from jaxmem._tasks import PROBLEM_CLASSES
    from jaxmem._threshold import SOLVERS

    assert tuple(MEMORIES) == _names.MEMORY_NAMES and MODELS == _names.MODELS
    assert tuple(PROBLEM_CLASSES) == _names.PROBLEMS
    assert tuple(SOLVERS) == _names.SOLVER_NAMES
    from jaxmem.solvers import DECIDERS

    assert ("auto", *list(DECIDERS)[:2]) == _names.DECIDER_NAMES


def test_help_and_import_load_nothing_heavy():
    """`import jaxmem` and building the whole parser (what `jaxmem --help` does) load neither jax
    nor matplotlib nor the study layer."""
    import subprocess
    import sys

    code = (
        "import sys, jaxmem; from jaxmem.cli import build_parser; build_parser(); "
        "heavy = [m for m in ('jax', 'matplotlib', 'equinox', 'jaxmem.study') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_the_architecture_page_names_every_module():
    """docs/architecture.md has a row for every module of the package (its path in backticks,
    relative to `jaxmem/`) and names no module that does not exist."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    files = {str(f.relative_to(PKG)) for f in PKG.rglob("*.py") if f.name != "__init__.py" or f.parent != PKG}
    import re

    named = set(re.findall(r"`((?:[a-z_]+/)?_?[a-z_]+\.py)`", text))
    missing = sorted(f for f in files if f not in named and f.replace("/__init__.py", "/") not in text)
    assert not missing, f"docs/architecture.md does not describe {missing}"
    ghosts = sorted(f for f in named if not f.startswith("tests/") and not (PKG / f).exists())
    assert not ghosts, f"docs/architecture.md names modules that do not exist: {ghosts}"


def test_the_study_layer_draws_without_pyplot(tmp_path):
    """Importing the study layer and drawing a figure leave the caller's matplotlib backend as it
    was and never load pyplot (figures draw on `matplotlib.figure.Figure`)."""
    import subprocess
    import sys

    code = (
        "import sys, matplotlib; matplotlib.use('svg'); import jaxmem.study; "
        "from jaxmem.study._figures import fig_peer_study; "
        "run = 'certified, all stored'; "
        "t = dict(runs=[run], ds=[8], cells={(run, 8): dict(p_c=20.0, p_ci_low=18.0, p_ci_high=22.0)}, "
        "guide={8: 17.0}); "
        f"name = fig_peer_study(t, {str(tmp_path)!r}); "
        "assert matplotlib.get_backend() == 'svg', matplotlib.get_backend(); "
        "assert 'matplotlib.pyplot' not in sys.modules; print(name)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / r.stdout.strip()).stat().st_size > 1000
