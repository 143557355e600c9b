"""Study commands: `jaxmem demo` (until the full study lands: OP/DP/Hebbian at one d)."""

from __future__ import annotations


def _demo(a):
    import numpy as np

    from ._cli import _print_json, _table
    from ._experiment import run_experiment

    rows = []
    for alpha in a.alphas:
        for problem, model in (("op", "full"), ("dp", "full"), ("op", "hebbian")):
            r = run_experiment(d=a.d, alpha=alpha, problem=problem, model=model, seeds=a.seeds)
            rows.append(dict(alpha=f"{r['alpha']:.3f}", p=r["p"], problem=problem, model=model,
                             accuracy=f"{np.mean(r['accuracy']):.4f}",
                             all_stored=f"{r['fraction_all_stored']:.3f}"))
    if a.json:
        _print_json(dict(d=a.d, seeds=a.seeds, rows=rows))
    else:
        print(f"d = {a.d}, {a.seeds} seeds per point")
        print(_table(rows, ["alpha", "p", "problem", "model", "accuracy", "all_stored"]))


def add_study_commands(sub, add_train_knobs, train_knobs):
    d = sub.add_parser("demo", help="the main job: a CPU-sized comparison of OP, DP and Hebbian")
    d.add_argument("--d", type=int, default=32)
    d.add_argument("--seeds", type=int, default=8)
    d.add_argument("--alphas", type=float, nargs="+", default=[0.3, 0.6, 0.9, 1.2])
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=_demo)
