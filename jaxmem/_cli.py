"""The `jaxmem` command. Every subcommand takes `--json` and then prints exactly one JSON
object on stdout. Bad arguments exit 2 with one readable line; other failures exit 1."""

from __future__ import annotations

import argparse
import json
import math
import sys


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _UsageError(f"{self.prog}: {message}")


class _UsageError(Exception):
    pass


def _float(s: str) -> float:
    if s.lower() in ("inf", "infinity"):
        return math.inf
    return float(s)


def _finite(obj):
    """`obj` with every non-finite float replaced by None (JSON has no NaN or infinity); a dict
    that had any gets a `nonfinite` list naming those keys, saying why they are null."""
    import numpy as np

    if isinstance(obj, dict):
        out = {k: _finite(v) for k, v in obj.items()}
        bad = [k for k, v in obj.items() if isinstance(v, (float, np.floating)) and not math.isfinite(v)]
        if bad:
            out["nonfinite"] = bad
        return out
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.ndarray):
        return _finite(obj.tolist())
    return obj


def _print_json(obj):
    print(json.dumps(_finite(obj), allow_nan=False, default=_default))


def _default(x):
    import numpy as np

    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x)}")


def _table(rows, cols):
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(str(r[c]).rjust(w) for c, w in zip(cols, widths)) for r in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------- train


def _add_train_knobs(sp):
    """Seeds and training knobs, shared by train, sweep and demo."""
    sp.add_argument("--seeds", type=int, default=8)
    sp.add_argument("--seed0", type=int, default=0)
    sp.add_argument("--steps", type=int, default=None)
    sp.add_argument("--lr", type=float, default=None)
    sp.add_argument("--init-scale", type=float, default=None)
    sp.add_argument("--embedding", default="gaussian", choices=["gaussian", "sphere"])


def _train_knobs(a):
    from ._train import DEFAULT_INIT_SCALE, DEFAULT_LR, DEFAULT_STEPS

    return dict(
        steps=DEFAULT_STEPS if a.steps is None else a.steps,
        lr=DEFAULT_LR if a.lr is None else a.lr,
        init_scale=DEFAULT_INIT_SCALE if a.init_scale is None else a.init_scale,
    )


def _cmd_train(a):
    from ._experiment import run_experiment

    if a.p is None and a.alpha is None:
        raise ValueError("give --p or --alpha")
    if a.model == "factored" and a.kappa is None:
        a.kappa = 1.0
    res = run_experiment(
        d=a.d,
        p=a.p,
        alpha=a.alpha,
        problem=a.problem,
        model=a.model,
        kappa=a.kappa,
        seeds=a.seeds,
        seed0=a.seed0,
        embedding=a.embedding,
        progress=not (a.quiet or a.json),
        **_train_knobs(a),
    )
    res.update(_versions())
    if a.json:
        _print_json(res)
        return
    print(
        f"d={res['d']} p={res['p']} alpha={res['alpha']:.4f} problem={res['problem']} "
        f"model={res['model']} kappa={res['kappa']:.3f} seeds={res['seeds']}"
    )
    rows = [
        dict(seed=i, accuracy=f"{acc:.4f}", all_stored=st, steps_to_store=s)
        for i, (acc, st, s) in enumerate(zip(res["accuracy"], res["all_stored"], res["steps_to_store"]))
    ]
    print(_table(rows, ["seed", "accuracy", "all_stored", "steps_to_store"]))
    print(f"fraction all stored: {res['fraction_all_stored']:.3f}   ({res['seconds']:.1f} s)")


def _versions():
    import platform

    import jax

    import jaxmem

    return dict(
        versions=dict(jaxmem=jaxmem.__version__, jax=jax.__version__, python=platform.python_version()),
        device=str(jax.devices()[0].platform),
    )


# ---------------------------------------------------------------- main


def build_parser():
    p = _Parser(prog="jaxmem", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    sp = sub.add_parser("train", help="train an ensemble of memories at one (d, p)")
    sp.add_argument("--d", type=int, required=True)
    g = sp.add_mutually_exclusive_group()
    g.add_argument("--p", type=int)
    g.add_argument("--alpha", type=float, help="load p ln p / d^2")
    sp.add_argument("--problem", default="op", choices=["op", "dp"])
    sp.add_argument("--model", default="full", choices=["full", "factored", "hebbian"])
    sp.add_argument("--kappa", type=float, default=None, help="rank m = kappa d (factored only)")
    _add_train_knobs(sp)
    sp.add_argument("--quiet", action="store_true")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=_cmd_train)

    from ._study import add_study_commands
    from .theory._cli import add_theory_commands

    add_study_commands(sub, _add_train_knobs, _train_knobs)
    add_theory_commands(sub)
    return p


def main(argv=None):
    parser = build_parser()
    try:
        a = parser.parse_args(argv)
        a.func(a)
    except _UsageError as e:
        print(str(e).splitlines()[0], file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"jaxmem: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("jaxmem: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # one readable line, never a traceback
        print(f"jaxmem: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
