"""`jaxmem train`: one ensemble of memories at one `(d, p)`, and the training knobs that
`sweep` and `demo` share."""

from __future__ import annotations

from .._names import EMBEDDINGS, PRECISIONS
from ._args import ArgumentError, integer, print_json, real, table


def add_train_knobs(sp, *, seeds: int = 8) -> None:
    """Seeds and training knobs, shared by train, sweep and demo."""
    sp.add_argument("--seeds", type=integer(1, 1_000_000), default=seeds)
    sp.add_argument("--seed0", type=integer(0, 2**31 - 1), default=0, help="keys alias beyond 31 bits")
    sp.add_argument("--steps", type=integer(0), default=None, help="Adam step budget")
    sp.add_argument("--lr", type=real(0.0, low_open=True), default=None)
    sp.add_argument("--init-scale", type=real(0.0, low_open=True), default=None)
    sp.add_argument("--embedding", default="gaussian", choices=list(EMBEDDINGS))
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


def _cmd_train(a):
    from .._experiment import run_experiment
    from .._train import TrainConfig

    if a.p is None and a.alpha is None:
        raise ArgumentError("jaxmem train: error: give --p or --alpha")
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
        config=TrainConfig(**train_knobs(a)),
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


def add_commands(sub) -> None:
    from .._names import MODELS, PROBLEMS

    sp = sub.add_parser("train", help="train an ensemble of memories at one (d, p)")
    sp.add_argument("--d", type=integer(2), required=True)
    g = sp.add_mutually_exclusive_group()
    g.add_argument("--p", type=integer(2))
    g.add_argument("--alpha", type=real(0.0, low_open=True), help="load p ln p / d^2")
    sp.add_argument("--problem", default="op", choices=list(PROBLEMS))
    sp.add_argument("--model", default="full", choices=list(MODELS))
    sp.add_argument(
        "--kappa", type=real(0.0, 1.0, low_open=True), default=None, help="rank m = kappa d (factored only)"
    )
    add_train_knobs(sp)
    sp.add_argument("--quiet", action="store_true")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=_cmd_train)
