"""`jaxmem train`: one ensemble of memories at one `(d, p)`, and the training knobs that
`sweep` and `demo` share."""

from __future__ import annotations

from .._names import EMBEDDINGS, PRECISIONS
from ._args import ArgumentError, criterion_arg, integer, print_json, real, table


_TRAIN_EXAMPLES = """examples:
  jaxmem train --d 32 --alpha 0.5 --problem dp --seeds 8
  jaxmem train --d 32 --p 200 --model factored --kappa 0.5 --steps 5000 --lr 0.03
  jaxmem train --d 32 --p 72 --model hebbian --json"""


def add_train_knobs(sp, *, seeds: int = 8) -> None:
    """Seeds and training knobs, shared by train, sweep and demo."""
    from .._names import DEFAULT_INIT_SCALE, DEFAULT_LR, DEFAULT_STEPS

    sp.add_argument("--seeds", type=integer(1, 1_000_000), default=seeds, help="independent tasks (seeds)")
    sp.add_argument(
        "--seed0", type=integer(0, 2**31 - 1), default=0, help="the first seed (keys alias beyond 31 bits)"
    )
    sp.add_argument(
        "--steps", type=integer(0), default=None, help=f"Adam step budget (default: {DEFAULT_STEPS})"
    )
    sp.add_argument(
        "--lr",
        type=real(0.0, low_open=True),
        default=None,
        help=f"Adam learning rate (default: {DEFAULT_LR:g})",
    )
    sp.add_argument(
        "--init-scale",
        type=real(0.0, low_open=True),
        default=None,
        help=f"initial singular values, times the quarter circle (default: {DEFAULT_INIT_SCALE:g})",
    )
    sp.add_argument(
        "--embedding", default="gaussian", choices=list(EMBEDDINGS), help="how inputs and targets are drawn"
    )
    sp.add_argument(
        "--precision",
        default="highest",
        choices=list(PRECISIONS),
        help="of the optimisation's matmuls (decisions are made at highest)",
    )


def train_knobs(a) -> dict:
    """The knobs given on the command line, the library's defaults for the others."""
    from .._names import DEFAULT_INIT_SCALE, DEFAULT_LR, DEFAULT_STEPS

    return dict(
        steps=DEFAULT_STEPS if a.steps is None else a.steps,
        lr=DEFAULT_LR if a.lr is None else a.lr,
        init_scale=DEFAULT_INIT_SCALE if a.init_scale is None else a.init_scale,
        precision=a.precision,
    )


def run_info() -> dict:
    """Versions and device, for every result a command prints."""
    import jax

    from .._provenance import versions

    return dict(versions=versions(), device=str(jax.devices()[0].platform))


def _criterion(c) -> dict:
    """`TrainConfig`'s criterion fields of a `--criterion` value."""
    if isinstance(c, str):
        return dict(tail=float(c.partition(":")[2]))
    return dict(accuracy=c)


def _cmd_train(a):
    from .._experiment import run_experiment
    from ..solvers._adam import TrainConfig

    if a.p is None and a.alpha is None:
        raise ArgumentError("argument --p: give --p or --alpha")
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
        progress=not a.quiet,
        config=TrainConfig(**train_knobs(a), **_criterion(a.criterion)),
    )
    res = dict(res.to_json(), **run_info())
    if a.json:
        print_json(res)
        return
    print(
        f"d={res['d']} p={res['p']} alpha={res['alpha']:.4f} problem={res['problem']} "
        f"model={res['model']} kappa={res['kappa']:.3f} seeds={res['seeds']}"
    )
    rows = [
        dict(seed=i, accuracy=f"{acc:.4f}", all_stored=st, steps_to_store=s)
        for i, (acc, st, s) in enumerate(zip(res["accuracy"], res["all_stored"], res["steps_to_store"]))
    ]
    print(table(rows, ["seed", "accuracy", "all_stored", "steps_to_store"]))
    print(f"fraction all stored: {res['fraction_all_stored']:.3f}   ({res['seconds']:.1f} s)")
    if a.criterion != 1.0:
        met = sum(s is not None for s in res["steps_to_store"])
        name = a.criterion if isinstance(a.criterion, str) else f"accuracy:{a.criterion:g}"
        print(f"criterion {name}: met by {met} of {len(res['steps_to_store'])} seeds (steps_to_store)")


def add_commands(sub) -> None:
    from .._names import MODELS, PROBLEMS

    sp = sub.add_parser(
        "train",
        help="train an ensemble of memories at one (d, p)",
        description="Adam on the softmax cross-entropy, vmapped over seeds: "
        "does it store all p associations?",
        epilog=_TRAIN_EXAMPLES,
    )
    sp.add_argument("--d", type=integer(2), required=True, help="dimension of inputs and targets")
    sp.add_argument(
        "--criterion",
        type=criterion_arg,
        default=1.0,
        help="when a seed counts as stored (steps_to_store): all (top-1 for every association), "
        "accuracy:X (a fraction X) or tail:r (every target above the mean of its ceil(r (p-1)) best "
        "competitors)",
    )
    g = sp.add_mutually_exclusive_group()
    g.add_argument("--p", type=integer(2), help="associations to store (or give --alpha)")
    g.add_argument(
        "--alpha", type=real(0.0, low_open=True), help="load p ln p / d^2 (p is the closest integer)"
    )
    sp.add_argument(
        "--problem",
        default="op",
        choices=list(PROBLEMS),
        help="op: the original problem; dp: the decoupled one",
    )
    sp.add_argument(
        "--model",
        default="full",
        choices=list(MODELS),
        help="full: W; factored: W = Q R^T; hebbian: the rule",
    )
    sp.add_argument(
        "--kappa", type=real(0.0, 1.0, low_open=True), default=None, help="rank m = kappa d (factored only)"
    )
    add_train_knobs(sp)
    sp.set_defaults(func=_cmd_train)
