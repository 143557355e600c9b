"""Every public function of `jaxmem.theory` at invalid arguments: NaN under `jit` and a NaN
gradient under `grad` (never the 0.0 that reads as "flat"), and the exact one-sided
derivatives at valid end points."""

import inspect
import math

import jax
import jax.numpy as jnp
import jaxmem.theory as th
import numpy as np
import pytest
from jaxmem import InvalidArgument


KEY = jax.random.key(0)
TOP = jnp.array([2.0, 1.5, 1.0, 0.5, -jnp.inf])
OMEGA = jnp.array([0.5, 0.1, -0.2])
Z = jnp.array([[0.3, -0.2, 0.5, 0.1], [0.0, 0.4, -0.1, 0.2]])
FIXED = th.SaddleConfig(min_samples=64, max_samples=64)

# name -> [(label, f of one real x, invalid x)]: each real argument with a domain, outside it
CASES = {
    "F": [("kappa", th.F, 1.5), ("kappa=0", th.F, 0.0)],
    "s_kappa": [("kappa", th.s_kappa, 1.5)],
    "alpha_c_asymptotic": [("kappa", th.alpha_c_asymptotic, -0.5)],
    "truncated_density": [("kappa", lambda x: th.truncated_density(1.0, x), 1.5)],
    "kappa_r": [("r", th.kappa_r, 3.0), ("r=0", th.kappa_r, 0.0)],
    "listwise_alpha_c": [("r", th.listwise_alpha_c, 1.5)],
    "alpha_c": [
        ("p", lambda x: th.alpha_c(x, max_samples=8192), 1.0),
        ("kappa", lambda x: th.alpha_c(1e3, x, max_samples=8192), 1.5),
        ("margin", lambda x: th.alpha_c(1e3, 1.0, x, max_samples=8192), -1.0),
    ],
    "capacity": [("p", lambda x: th.capacity(x, max_samples=8192), 1.0)],
    "e_dist2": [("p", lambda x: th.e_dist2(x, samples=8192), 1.0)],
    "dist2_given_competitors": [("margin", lambda x: th.dist2_given_competitors(TOP, x), -1.0)],
    "project": [("margin", lambda x: th.project(jnp.asarray(0.3), TOP, x), -1.0)],
    "top_order_stats": [("n", lambda x: th.top_order_stats(KEY, x, 4), 0.5)],
    "log_zout": [
        ("V", lambda x: th.log_zout(OMEGA, x), -1.0),
        ("margin", lambda x: th.log_zout(OMEGA, 1.0, x), -1.0),
    ],
    "free_entropy": [
        ("q", lambda x: th.free_entropy(x, 0.5, Z), 1.5),
        ("alpha_G", lambda x: th.free_entropy(0.5, x, Z), -1.0),
    ],
    "qc_density": [("s=nan", th.qc_density, math.nan)],
    "qc_cdf": [("s=nan", th.qc_cdf, math.nan)],
    "qc_sample": [("kappa", lambda x: th.qc_sample(KEY, 16, x), 1.5)],
    "hebbian_asymptotic": [("p", lambda x: th.hebbian_asymptotic(16.0, x), 1.0)],
    "optimal_scores": [("p", lambda x: th.optimal_scores(x, samples=1024), 1.0)],
    "sample_capacity": [("p", lambda x: th.sample_capacity(x, samples=64), 1.0)],
    "saddle": [("alpha", lambda x: th.saddle(x, 300.0, config=FIXED), -0.5)],
    "saddle_path": [("alphas", lambda x: th.saddle_path(jnp.stack([x, 0.3]), 300.0, config=FIXED), -0.5)],
    "saddle_fields": [("alpha", lambda x: th.saddle_fields(x, 300, samples=64, config=FIXED), -0.5)],
    "transition": [("p", lambda x: th.transition(32.0, x, samples=4096), 1.0)],
    "transition_loads": [("kappa", lambda x: th.transition_loads(32.0, x, samples=4096), 1.5)],
}
# functions of integers (shapes) and strings alone: nothing to differentiate, and a bad value is
# refused eagerly with InvalidArgument (tests/test_theory_contract.py)
NOT_DIFFERENTIABLE = {"hebbian", "hebbian_scores", "status_name"}
# spectra whose `kappa` sets the rank `m = round(kappa d)`, a shape: a traced `kappa` is refused
RANKED = {
    "product_spectrum": lambda x: th.product_spectrum(KEY, 8, 12, kappa=x),
    "init_spectrum": lambda x: th.init_spectrum(KEY, 8, kappa=x),
}
# the compile of a saddle point or a transition curve's sampling loop under `grad` takes minutes
SLOW = {
    "saddle",
    "saddle_path",
    "saddle_fields",
    "transition",
    "transition_loads",
    "sample_capacity",
    "optimal_scores",
    "capacity",
    "e_dist2",
    "dist2_given_competitors",
    "free_entropy",
}
SLOW_CASES = {("alpha_c", "kappa"), ("alpha_c", "margin"), ("log_zout", "margin")}


def _public_functions():
    return sorted(n for n in dir(th) if not n.startswith("_") and inspect.isfunction(getattr(th, n)))


def test_the_sweep_covers_every_public_function():
    assert set(CASES) | NOT_DIFFERENTIABLE | set(RANKED) == set(_public_functions())


@pytest.mark.parametrize("name", sorted(RANKED))
def test_a_traced_rank_fraction_is_refused(name):
    for transform in (jax.jit, jax.grad):
        with pytest.raises(InvalidArgument, match="kappa sets the rank"):
            transform(lambda x: _total(RANKED[name](x)))(0.5)


def _total(out):
    """The sum of every floating leaf (NaN if any is)."""
    leaves = [x for x in jax.tree.leaves(out) if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)]
    return sum(jnp.sum(jnp.asarray(x, jnp.float64)) for x in leaves)


PARAMS = [
    pytest.param(
        name,
        label,
        i,
        marks=[pytest.mark.slow] if name in SLOW or (name, label) in SLOW_CASES else [],
        id=f"{name}-{label}",
    )
    for name, cases in CASES.items()
    for i, (label, _, _) in enumerate(cases)
]


@pytest.mark.parametrize("name, label, i", PARAMS)
def test_gradient_is_nan_where_the_value_is(name, label, i, x64):
    _, f, x = CASES[name][i]
    g = lambda x: _total(f(x))
    value = jax.jit(g)(x)
    assert np.isnan(value), f"{name}({label}={x}) is {value} under jit, not NaN"
    # under jit nothing is concrete: the gradient is NaN
    grad = jax.jit(jax.grad(g))(x)
    assert np.isnan(grad), f"grad of {name} at {label}={x} is {grad} under jit, not NaN"
    # eagerly a function's own check may see the concrete value: a refusal naming it, as the
    # eager value gets, or NaN; never a number
    arg = label.split("=")[0]
    try:
        grad = jax.grad(g)(x)
    except InvalidArgument as e:
        assert str(e).startswith(arg), e
    else:
        assert np.isnan(grad), f"grad of {name} at {label}={x} is {grad}, not NaN"


def test_gradient_is_nan_where_the_value_is_without_x64():
    assert np.isnan(jax.grad(th.kappa_r)(3.0)) and np.isnan(jax.grad(th.F)(1.5))


def test_kappa_r_at_r_one(x64):
    """`d kappa_r / dr = z / r - phi(z) / r^2`, `z = Phi^{-1}(1 - r)`: `-inf` at `r = 1`, and
    `listwise_alpha_c`'s derivative there `+inf`; inside, both match finite differences."""
    assert float(th.kappa_r(1.0)) == 0.0
    assert float(jax.grad(th.kappa_r)(1.0)) == -math.inf
    assert float(jax.grad(th.listwise_alpha_c)(1.0)) == math.inf
    from scipy.stats import norm

    for r in (0.05, 0.3, 0.999):
        z = norm.isf(r)
        exact = z / r - norm.pdf(z) / r**2
        assert float(jax.grad(th.kappa_r)(r)) == pytest.approx(exact, rel=1e-10)
        h = 1e-6
        fd = (float(th.listwise_alpha_c(r + h)) - float(th.listwise_alpha_c(r - h))) / (2 * h)
        assert float(jax.grad(th.listwise_alpha_c)(r)) == pytest.approx(fd, rel=1e-6)


def test_valid_end_points_have_their_one_sided_derivatives(x64):
    """At `kappa = 1` (the closed end of its domain) the derivative is the one-sided one."""
    h = 1e-6
    for f in (th.F, th.s_kappa, th.alpha_c_asymptotic):
        one_sided = (float(f(1.0)) - float(f(1.0 - h))) / h
        assert float(jax.grad(f)(1.0)) == pytest.approx(one_sided, rel=1e-4, abs=1e-5), f.__name__


def test_eager_values_keep_float64_in_ordinary_arithmetic():
    """With x64 off, an eager value is NumPy float64: `alpha_c(1000) - 0.5` loses nothing and
    warns of no truncation (a float64 jax array would be cut to float32 by the subtraction)."""
    import subprocess
    import sys

    code = (
        "import jaxmem.theory as th; v = th.alpha_c(1000.0); "
        "assert type(v).__name__ == 'float64', type(v); "
        "assert abs((v - 0.5) - 0.35127243550) < 1e-9, v - 0.5"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "JAX_ENABLE_X64"}
    r = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
