"""The theory under jit, vmap, grad and jvp in a fresh interpreter with x64 off (and on), with
every gradient checked against float64 central finite differences of eager (float64) calls."""

import json
import os
import subprocess
import sys

import pytest


CODE = r"""
import json, jax, jax.numpy as jnp
import jaxmem.theory as th

h = 1e-4
fd = lambda f, x, h=h: (float(f(x + h)) - float(f(x - h))) / (2 * h)
fixed = th.SaddleConfig(min_samples=64, max_samples=64)
sad = lambda a: th.saddle(a, 300.0, config=fixed).q
tra = lambda p: th.transition(32, p).probability
cap_k = lambda k: th.alpha_c(1e4, kappa=k)
cap_p = lambda p: th.alpha_c(p)
out = dict(
    grad_saddle=float(jax.grad(sad)(0.3)), fd_saddle=fd(sad, 0.3),
    grad_kappa=float(jax.grad(cap_k)(0.5)), fd_kappa=fd(cap_k, 0.5),
    grad_transition=float(jax.grad(tra)(180.0)), fd_transition=fd(tra, 180.0, 0.01),
    grad_p=float(jax.grad(cap_p)(1000.0)), jvp_p=float(jax.jvp(cap_p, (1000.0,), (1.0,))[1]),
    fd_p=fd(cap_p, 1000.0, 0.5),
    grad_F=float(jax.grad(th.F)(0.5)), fd_F=fd(th.F, 0.5),
    jit=float(jax.jit(th.alpha_c)(100.0)), eager=float(th.alpha_c(100.0)),
    vmap=[float(x) for x in jax.vmap(th.F)(jnp.array([0.25, 0.5]))],
    loop=[float(th.F(0.25)), float(th.F(0.5))],
    grad_dtype=str(jax.grad(th.F)(0.5).dtype), eager_dtype=str(th.F(0.5).dtype),
)
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.parametrize("x64", ["0"])  # x64 on: tests/test_theory.py, under the x64 fixture
def test_theory_transforms_without_global_flags(x64):
    env = dict(os.environ, JAX_ENABLE_X64=x64)
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    o = json.loads(r.stdout.strip().splitlines()[-1])
    rel = 1e-3 if x64 == "0" else 1e-5  # float32 outputs without x64, float64 with it
    for name in ("saddle", "kappa", "F", "transition"):
        assert o[f"grad_{name}"] == pytest.approx(o[f"fd_{name}"], rel=rel), name
    assert o["grad_p"] == pytest.approx(o["fd_p"], rel=1e-2) and o["jvp_p"] == pytest.approx(
        o["grad_p"], rel=1e-5
    )
    assert o["grad_p"] < 0, "alpha_c decreases with p"
    assert o["jit"] == pytest.approx(o["eager"], rel=1e-6)
    assert o["vmap"] == pytest.approx(o["loop"], rel=1e-6)
    assert o["eager_dtype"] == "float64"
    assert o["grad_dtype"] == ("float32" if x64 == "0" else "float64")
