"""Shared helpers for the benchmark scripts: machine facts, result files, matmul peak."""

import json
import os
import time

import jax
import jax.numpy as jnp
from jaxmem.study import atomic_write, normal_config


def machine() -> dict:
    from jaxmem.study import device_info, versions

    return dict(device_info(), versions=versions())


def write(name: str, res: dict) -> str:
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    path = os.path.join(os.path.dirname(__file__), "results", f"{name}.json")
    res = dict(machine=machine(), **res)
    atomic_write(path, json.dumps(res, indent=1) + "\n")
    return os.path.relpath(path, os.path.dirname(os.path.dirname(__file__)))  # from the repo root


def twice(fn):
    """`fn()` run twice: the first run's seconds (compilation included), the second's, and the
    second's result."""
    t = time.perf_counter()
    fn()
    first = time.perf_counter() - t
    t = time.perf_counter()
    out = fn()
    return first, time.perf_counter() - t, out


def best_time(fn, *, repeats: int = 5) -> float:
    """Best wall time of `fn()` over `repeats` calls after one warm-up (fn must block)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def matmul_peak(n: int = 2048, dtype=jnp.float32, precision=None) -> float:
    """Measured matmul FLOP/s of this machine: best of repeated `n x n @ n x n` products."""
    k1, k2 = jax.random.split(jax.random.key(0))
    a = jax.random.normal(k1, (n, n), dtype)
    b = jax.random.normal(k2, (n, n), dtype)
    f = jax.jit(lambda a, b: jnp.matmul(a, b, precision=precision))
    t = best_time(lambda: f(a, b).block_until_ready())
    return 2 * n**3 / t


def decision_flops(d: int, decisions: list, config) -> float:
    """FLOPs of a point's decisions (from its records): a dense iteration costs `4 p^2 d + 4 p d^2`
    (margins and adjoint); a working-set inner iteration `4 p d^2 + 4 p k d`, and each outer pass
    `2 p^2 d` plus a swap `4 p d^2 + 4 p k d`, one per `outer_every` iterations and one at the start
    (a lower bound on the passes)."""
    config = normal_config(config)["decide"]
    if config["decider"] == "dense":
        return sum(x["iterations"] * (4 * x["p"] ** 2 * d + 4 * x["p"] * d * d) for x in decisions)
    k, every = config["working_set"], config["outer_every"]
    swap = lambda p: 4 * p * d * d + 4 * p * k * d
    return sum(
        x["iterations"] * swap(x["p"])
        + (1 + -(-x["iterations"] // every)) * (2 * x["p"] ** 2 * d + swap(x["p"]))
        for x in decisions
    )
