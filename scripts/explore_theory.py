"""Gradient-based exploration of the theory: two inverse problems solved by Newton's method with
`jax.grad` (float64, in an interpreter without global x64).

1. The rank fraction `kappa` at which a two-layer memory `W = Q R^T` reaches a target capacity
   `alpha_c(p, kappa) = target` at a given `p`.
2. The normalised margin `m` at which the DP's capacity at `p` halves:
   `alpha_c(p, margin=m) = alpha_c(p) / 2`.

    python scripts/explore_theory.py [--p 10000] [--target 0.5]
"""

import argparse
import time

import jax
import jaxmem.theory as th


def newton(f, x, lo, hi, tol=1e-6, steps=30):
    """Newton on the scalar `f(x) = 0`, kept inside `(lo, hi)`; returns `(x, steps, |f(x)|)`."""
    df = jax.grad(f)
    for i in range(steps):
        fx = float(f(x))
        if abs(fx) < tol:
            return x, i, abs(fx)
        x = min(max(x - fx / float(df(x)), lo + 1e-9 * (hi - lo)), hi - 1e-9 * (hi - lo))
    return x, steps, abs(float(f(x)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--p", type=float, default=1e4)
    ap.add_argument("--target", type=float, default=0.5)
    a = ap.parse_args()
    key = jax.random.key(0)  # common random numbers: f is smooth in its argument

    full = float(th.alpha_c(a.p, key=key))

    def solve(f, x0, lo, hi):
        t = time.perf_counter()
        x, steps, res = newton(f, x0, lo, hi)
        return x, f"{steps} Newton steps, |residual| {res:.1e}, {time.perf_counter() - t:.1f} s"

    k, how = solve(lambda k: th.alpha_c(a.p, kappa=k, key=key) - a.target, 0.5, 0.0, 1.0)
    at_k = float(th.alpha_c(a.p, kappa=k, key=key))
    print(
        f"1. rank for alpha_c(p={a.p:g}) = {a.target}: kappa = {k:.4f} (alpha_c there {at_k:.4f}; "
        f"full rank {full:.4f}); {how}"
    )
    m, how = solve(lambda m: th.alpha_c(a.p, margin=m, key=key) - full / 2, 0.5, 0.0, 10.0)
    at_m = float(th.alpha_c(a.p, margin=m, key=key))
    print(
        f"2. margin halving the DP capacity at p={a.p:g}: m = {m:.4f} "
        f"(alpha_c {full:.4f} -> {at_m:.4f}); {how}"
    )


if __name__ == "__main__":
    main()
