"""`jaxmem theory ...`: the theory's predictions, in float64. This module reads only
`jaxmem.theory`."""

from __future__ import annotations

import math

from ._args import integer, print_json, real, working


def _working(a, what: str):
    return working(a, f"jaxmem theory: computing {what} (a first call compiles; later ones reuse the cache)")


def _emit(a, obj, text):
    if a.json:
        print_json(obj)
    else:
        print(text)


def _num(x):
    x = float(x)
    return x if math.isfinite(x) else None


def _capacity(a):
    from ..theory import capacity

    with _working(a, "alpha_c(p)"):
        c = capacity(a.p if math.isinf(a.p) else float(a.p), a.kappa, a.margin, se_target=a.se_target)
    out = dict(
        p=a.p if math.isfinite(a.p) else "inf",
        kappa=a.kappa,
        margin=a.margin,
        alpha_c=float(c.alpha_c),
        alpha_c_se=float(c.alpha_c_se),
        E_dist2=float(c.e_dist2) if math.isfinite(c.e_dist2) else None,
        status="success" if bool(c.se_reached) else "se_target_not_reached",
    )
    _emit(
        a,
        out,
        f"alpha_c(p={a.p:g}, kappa={a.kappa}) = {out['alpha_c']:.4f} +- {out['alpha_c_se']:.4f}"
        + (
            f"   E dist^2 = {out['E_dist2']:.4f}"
            if out["E_dist2"] is not None
            else "   (asymptote F(kappa)/2)"
        )
        + ("" if bool(c.se_reached) else "   (se-target not reached: the sample cap came first)"),
    )


def _saddle(a):
    from ..theory import saddle, SaddleConfig, status_name

    config = SaddleConfig(se_target=a.se_target, max_samples=a.max_samples)
    with _working(a, "the saddle point"):
        s = saddle(a.alpha, a.p, a.margin, config=config)
    out = dict(
        alpha=a.alpha,
        p=a.p,
        margin=a.margin,
        alpha_G=_num(s.alpha_G),
        q=_num(s.q),
        q_se=_num(s.q_se),
        free_entropy=_num(s.free_entropy),
        free_entropy_se=_num(s.free_entropy_se),
        residual=_num(s.residual),
        status=status_name(s.status),
        steps=int(s.steps),
        samples=int(s.samples),
        alpha_samples=_num(s.alpha_samples),
    )
    _emit(a, out, "  ".join(f"{k}={v}" for k, v in out.items()))


def _transition(a):
    from ..theory import transition_loads

    with _working(a, "the transition loads"):
        t = transition_loads(a.d, a.kappa)
    out = dict(d=a.d, kappa=a.kappa)
    for k in t.__dataclass_fields__:
        out[k] = _num(getattr(t, k))
    f = lambda k, nd: "—" if out[k] is None else f"{out[k]:.{nd}f}"  # NaN: not reached at this d
    text = (
        f"d={a.d} kappa={a.kappa}: p_50 = {f('p_50', 1)} +- {f('p_50_se', 1)}, "
        f"alpha at P(all stored) = 0.75 / 0.5 / 0.25: {f('alpha_p75', 4)} / {f('alpha_50', 4)} / "
        f"{f('alpha_p25', 4)} (se {f('alpha_50_se', 4)})"
    )
    _emit(a, out, text)


def _hebbian(a):
    from .._tasks import alpha_of
    from ..theory import hebbian, hebbian_asymptotic

    with _working(a, "the Hebbian law"):
        h = hebbian(a.d, a.p, a.problem)
    out = dict(
        d=a.d,
        p=a.p,
        problem=a.problem,
        alpha=alpha_of(a.d, a.p),
        accuracy=float(h.accuracy),
        accuracy_se=float(h.accuracy_se),
        p_all_stored=float(h.p_all_stored),
        accuracy_asymptotic=float(hebbian_asymptotic(a.d, a.p)),
    )
    _emit(a, out, "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in out.items()))


def _listwise(a):
    from ..theory import kappa_r, listwise_alpha_c

    with _working(a, "the listwise capacity"):
        out = dict(r=a.r, kappa_r=float(kappa_r(a.r)), alpha_G_c=float(listwise_alpha_c(a.r)))
    _emit(a, out, f"r={a.r}  kappa_r={out['kappa_r']:.4f}  alpha_G_c={out['alpha_G_c']:.4f}")


def add_commands(sub) -> None:
    th = sub.add_parser(
        "theory",
        help="theory predictions (float64)",
        epilog="examples:\n  jaxmem theory capacity --p 1000\n  jaxmem theory capacity --p inf --kappa 0.5\n"
        "  jaxmem theory saddle --alpha 0.5 --p 1e12\n  jaxmem theory transition --d 64\n"
        "  jaxmem theory hebbian --d 32 --p 72 --problem dp\n  jaxmem theory listwise --r 0.1",
    )
    ts = th.add_subparsers(dest="theory_cmd", required=True, parser_class=type(th))
    c = ts.add_parser("capacity", help="alpha_c(p, kappa) = ln p F(kappa) / E dist^2")
    c.add_argument("--p", type=real(2.0, allow_inf=True), required=True, help="associations, or inf")
    c.add_argument("--kappa", type=real(0.0, 1.0, low_open=True), default=1.0, help="rank fraction m / d")
    c.add_argument("--margin", type=real(0.0), default=0.0, help="required margin")
    c.add_argument(
        "--se-target", type=real(0.0, low_open=True), default=0.0015, help="standard error to reach"
    )
    c.set_defaults(func=_capacity)
    s = ts.add_parser("saddle", help="RS saddle point q*(alpha) at load alpha = p ln p / d^2")
    s.add_argument("--alpha", type=real(0.0, low_open=True), required=True, help="load p ln p / d^2")
    s.add_argument("--p", type=real(2.0), required=True, help="associations (real, up to 1e12 and beyond)")
    s.add_argument("--margin", type=real(0.0), default=0.0, help="required margin")
    s.add_argument(
        "--se-target", type=real(0.0, low_open=True), default=0.003, help="standard error of q* to reach"
    )
    s.add_argument("--max-samples", type=integer(64, 2**22), default=32768, help="cap on the samples")
    s.set_defaults(func=_saddle)
    tr = ts.add_parser("transition", help="predicted P(all stored) transition at dimension d (2.8)")
    tr.add_argument("--d", type=integer(2, 10**6), required=True, help="dimension")
    tr.add_argument("--kappa", type=real(0.0, 1.0, low_open=True), default=1.0, help="rank fraction m / d")
    tr.set_defaults(func=_transition)
    h = ts.add_parser("hebbian", help="finite-size Hebbian accuracy and P(all stored)")
    h.add_argument("--d", type=integer(2), required=True, help="dimension")
    h.add_argument("--p", type=integer(2), required=True, help="associations")
    h.add_argument("--problem", default="op", choices=["op", "dp"], help="op or dp")
    h.set_defaults(func=_hebbian)
    lw = ts.add_parser("listwise", help="tail-average-margin capacity alpha_G,c(r)")
    lw.add_argument(
        "--r",
        type=real(0.0, 1.0, low_open=True),
        required=True,
        help="fraction of competitors in the tail average",
    )
    lw.set_defaults(func=_listwise)
