"""The theory's contract at its edges: every public function lowers under `jit` in a fresh
interpreter with x64 off, without a dtype-truncation warning; an invalid traced argument gives NaN
(and a status where there is one), an invalid concrete one raises naming it; statuses say when an
error target or a decision was not reached."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import jaxmem as jm
import jaxmem.theory as th
import numpy as np
import pytest
from jaxmem.cli import main


# Each public function under jit, with valid arguments, then with one invalid traced argument
# (None: the function has no real argument to make invalid, or none that is traced).
CODE = r"""
import inspect, json, math, jax, jax.numpy as jnp
import jaxmem.theory as th

key = jax.random.key(0)
top = jnp.array([1.0, 0.5, -jnp.inf])
fixed = th.SaddleConfig(min_samples=64, max_samples=64)
z = jax.random.normal(key, (16, 20))
CASES = {
    "F": (lambda k: th.F(k), 0.5, 0.0),
    "alpha_c": (lambda p: th.alpha_c(p, se_target=0.05), 100.0, 1.5),
    "alpha_c_asymptotic": (lambda k: th.alpha_c_asymptotic(k), 0.5, 2.0),
    "capacity": (lambda m: th.capacity(100.0, margin=m, se_target=0.05), 0.0, -1.0),
    "dist2_given_competitors": (lambda m: th.dist2_given_competitors(top, m), 0.0, -1.0),
    "e_dist2": (lambda p: th.e_dist2(p, samples=8192), 100.0, jnp.nan),
    "free_entropy": (lambda q: th.free_entropy(q, 0.1, z), 0.3, 1.0),
    "hebbian": (lambda k: th.hebbian(8, 10, key=k, samples=64), key, None),
    "hebbian_asymptotic": (lambda p: th.hebbian_asymptotic(16.0, p), 50.0, -4.0),
    "hebbian_scores": (lambda k: th.hebbian_scores(8, 10, key=k, samples=64), key, None),
    "init_spectrum": (lambda k: th.init_spectrum(k, 8, samples=2), key, None),
    "kappa_r": (lambda r: th.kappa_r(r), 0.5, 1.5),
    "listwise_alpha_c": (lambda r: th.listwise_alpha_c(r), 0.5, 0.0),
    "log_zout": (lambda v: th.log_zout(jnp.array([1.0, 0.0, -0.5]), v), 1.0, -1.0),
    "optimal_scores": (lambda p: th.optimal_scores(p, samples=64), 100.0, -5.0),
    "product_spectrum": (lambda k: th.product_spectrum(k, 8, 12, samples=2), key, None),
    "project": (lambda m: th.project(jnp.array(0.3), top, m), 0.0, -1.0),
    "qc_cdf": (lambda s: th.qc_cdf(s), 1.0, None),
    "qc_density": (lambda s: th.qc_density(s), 1.0, None),
    "qc_sample": (lambda k: th.qc_sample(key, 5, kappa=k), 0.5, 1.5),
    "s_kappa": (lambda k: th.s_kappa(k), 0.5, 0.0),
    "saddle": (lambda a: th.saddle(a, 50.0, config=fixed), 0.3, -1.0),
    "saddle_fields": (lambda a: th.saddle_fields(a, 20, samples=16), 0.3, -1.0),
    "saddle_path": (lambda a: th.saddle_path(jnp.stack([a, 2 * a]), 50.0, config=fixed), 0.1, -1.0),
    "sample_capacity": (lambda p: th.sample_capacity(p, samples=8), 100.0, 1.0),
    "top_order_stats": (lambda n: th.top_order_stats(key, n, 4), 10.0, 0.0),
    "transition": (lambda p: th.transition(16.0, p, samples=8), 60.0, 1.0),
    "transition_loads": (lambda d: th.transition_loads(d, samples=8), 16.0, 0.0),
    "truncated_density": (lambda k: th.truncated_density(1.5, k), 0.5, 1.5),
}
public = sorted(
    n for n in dir(th)
    if not n.startswith("_") and callable(getattr(th, n)) and not inspect.isclass(getattr(th, n))
)
floats = lambda out: [
    x for x in jax.tree.leaves(out)
    if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating)
]
result = dict(public=public, ok={}, nan={}, status={})
for name, (f, good, bad) in CASES.items():
    out = jax.jit(f)(good)
    result["ok"][name] = any(bool(jnp.all(jnp.isfinite(x))) for x in floats(out))
    if bad is not None:
        out = jax.jit(f)(bad)
        result["nan"][name] = all(bool(jnp.all(jnp.isnan(x))) for x in floats(out))
        if hasattr(out, "status"):
            result["status"][name] = sorted({th.STATUS[int(v)] for v in jnp.ravel(out.status._value)})
print(json.dumps(result))
"""


@pytest.mark.slow
def test_every_public_theory_function_under_jit_without_x64():
    env = dict(os.environ, JAX_ENABLE_X64="0")
    # a UserWarning is an error: jax warns where a float64 or int64 request would be truncated
    r = subprocess.run(
        [sys.executable, "-W", "error::UserWarning", "-c", CODE],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    o = json.loads(r.stdout.strip().splitlines()[-1])
    host_only = {"status_name"}  # names a concrete status: a host function
    assert set(o["public"]) - host_only == set(o["ok"]), "a public function has no case here"
    assert all(o["ok"].values()), [n for n, v in o["ok"].items() if not v]
    assert all(o["nan"].values()), [n for n, v in o["nan"].items() if not v]
    assert o["status"]["saddle"] == ["invalid_input"]


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: th.hebbian_asymptotic(-4, 50), "d"),
        (lambda: th.optimal_scores(-5), "p"),
        (lambda: th.truncated_density(0.5, kappa=1.5), "kappa"),
        (lambda: th.qc_sample(jax.random.key(0), 5, kappa=1.5), "kappa"),
        (lambda: th.qc_sample(jax.random.key(0), -1), "n"),
        (lambda: th.product_spectrum(jax.random.key(0), 8, -5), "p"),
        (lambda: th.alpha_c(jnp.array([100.0, 1.5])), "p"),
        (lambda: th.capacity(1e308), "p"),
        (lambda: th.e_dist2(float("nan")), "p"),
        (lambda: jm.alpha_of(0, 5), "d"),
    ],
)
def test_an_invalid_concrete_argument_is_refused_by_name(call, name):
    with pytest.raises(ValueError, match=rf"^{name} must"):
        call()


def test_a_saddle_near_capacity_is_not_called_above_it():
    # alpha_c(1000) = 0.8513 +- 0.0013: 0.849 is below it, within the errors of 64 samples
    few = th.saddle(0.849, 1000.0, config=th.SaddleConfig(max_samples=64))
    assert th.status_name(few.status) == "near_capacity"
    assert th.status_name(th.saddle(2.0, 1000.0, config=th.SaddleConfig(max_samples=64)).status) == (
        "above_capacity"
    )


def test_an_unreached_error_target_is_reported():
    assert not bool(th.capacity(1000.0, se_target=1e-12, max_samples=8192).se_reached)
    assert bool(th.capacity(1000.0, se_target=0.05).se_reached)
    s = th.saddle(0.3, 100.0, config=th.SaddleConfig(se_target=1e-9, max_samples=64))
    assert th.status_name(s.status) == "imprecise" and np.isfinite(float(s.q))


def test_transition_loads_beyond_reach_print_as_missing(capsys, monkeypatch):
    # at d = 16, kappa = 0.001 (rank 1) no load reaches P(all stored) = 1/2: every field is NaN
    nan = jnp.full((), jnp.nan)
    blank = th.TransitionLoads(*[nan] * len(th.TransitionLoads.__dataclass_fields__))
    monkeypatch.setattr(th, "transition_loads", lambda d, kappa: blank)
    assert main(["theory", "transition", "--d", "16", "--kappa", "0.001", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["p_50"] is None
    assert main(["theory", "transition", "--d", "16", "--kappa", "0.001"]) == 0
    assert "p_50 = —" in capsys.readouterr().out
