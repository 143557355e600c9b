"""Storage tasks: `p` inputs `e_mu` and targets `u_mu` in `R^d`, original or decoupled.

OP: input `mu` competes against the shared targets `u_1..u_p`.
DP: input `mu` has its own candidates `c^(mu)_1..c^(mu)_p` with `c^(mu)_mu = u_mu`; every other
candidate is a fresh Gaussian that is a pure function of `(key, mu, rho)`. They are
materialised only while `p*p*d` floats stay below `materialise_limit`; above it every consumer
regenerates them block by block from the same function, so both paths see identical numbers.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from ._validate import check_choice, check_int, check_memory, check_positive, InvalidArgument


PROBLEMS = ("op", "dp")
EMBEDDINGS = ("gaussian", "sphere")
# 2**26 float32 = 256 MiB of candidates per task.
MATERIALISE_LIMIT = 2**26


def load(d: int, p: int) -> float:
    """The load `alpha = p ln p / d^2`."""
    return p * math.log(p) / d**2


def p_from_alpha(d: int, alpha: float) -> int:
    """The integer `p >= 2` whose load `p ln p / d^2` is closest to `alpha`."""
    d = check_int("d", d, 2)
    alpha = check_positive("alpha", alpha)
    if alpha < load(d, 2) / 2:
        raise InvalidArgument(
            f"alpha must be >= {load(d, 2) / 2:.3g} at d = {d} (p = 2 has load {load(d, 2):.3g}); "
            f"got {alpha!r}"
        )
    target = alpha * d * d
    x = max(target / max(math.log(target), 1.0), 2.0)
    for _ in range(100):  # Newton on x ln x = target
        x_new = x - (x * math.log(x) - target) / (math.log(x) + 1.0)
        x_new = max(x_new, 2.0)
        if abs(x_new - x) < 1e-12 * x:
            break
        x = x_new
    cands = [max(2, math.floor(x)), max(2, math.ceil(x))]
    return min(cands, key=lambda q: abs(q * math.log(q) - target))


def _embed(key, shape, embedding, dtype):
    x = jax.random.normal(key, shape, dtype)
    if embedding == "sphere":
        # normalised in float64 and rounded once: a float32 reduction's rounding depends on the
        # shape (vectorisation, fused multiply-adds), which would break the nesting in p
        with jax.enable_x64(True):
            x64 = x.astype(jnp.float64)
            x = (x64 * (math.sqrt(shape[-1]) / jnp.linalg.norm(x64, axis=-1, keepdims=True))).astype(dtype)
    return x


class Task(eqx.Module):
    """One storage task. Arrays: `inputs` (p, d), `targets` (p, d), and for a DP
    `candidates` (p, p, d) when materialised (else None, regenerate with `dp_candidates`).
    `init_key` seeds the memory trained on it, so a seed fixes task and initialisation."""

    inputs: Float[Array, "p d"]
    targets: Float[Array, "p d"]
    cand_key: PRNGKeyArray
    init_key: PRNGKeyArray
    candidates: Float[Array, "p p d"] | None
    problem: str = eqx.field(static=True)
    embedding: str = eqx.field(static=True)

    @property
    def d(self) -> int:
        return self.inputs.shape[-1]

    @property
    def p(self) -> int:
        return self.inputs.shape[-2]


def dp_candidates(task: Task, mu, rho) -> Float[Array, "... d"]:
    """Candidates `c^(mu)_rho` for broadcastable integer arrays `mu`, `rho`.

    A pure function of `(task.cand_key, mu, rho)`: `c^(mu)_mu = u_mu`, every other one is
    `N(0, I_d)` (or on the sphere) drawn from `fold_in(fold_in(key, mu), rho)`.
    """
    mu, rho = jnp.broadcast_arrays(jnp.asarray(mu), jnp.asarray(rho))
    dtype = task.inputs.dtype

    def one(m, r):
        k = jax.random.fold_in(jax.random.fold_in(task.cand_key, m), r)
        return _embed(k, (task.d,), task.embedding, dtype)

    with jax.threefry_partitionable(True):
        fresh = jax.vmap(one)(mu.ravel(), rho.ravel()).reshape(mu.shape + (task.d,))
    tgt = task.targets[mu]
    return jnp.where((mu == rho)[..., None], tgt, fresh)


def _check_key(key) -> None:
    if not (
        isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key) and key.shape == ()
    ):
        raise InvalidArgument(f"key must be one typed PRNG key from jax.random.key(seed), got {key!r}")


def make_task(
    key: PRNGKeyArray,
    *,
    d: int,
    p: int,
    problem: str = "op",
    embedding: str = "gaussian",
    dtype=jnp.float32,
    materialise_limit: int = MATERIALISE_LIMIT,
) -> Task:
    """A task with `e_mu, u_mu ~ N(0, I_d)` (or normalised to the sphere of radius sqrt(d)).

    Tasks are nested in `p`: with the same key, the task at `p` is the prefix of the task at
    `p' > p` (inputs, targets and DP candidates), so storability is monotone in `p`.
    """
    _check_key(key)
    d = check_int("d", d, 2)
    p = check_int("p", p, 2)
    check_memory("d and p", 4.0 * 2 * p * d)
    check_choice("problem", problem, PROBLEMS)
    check_choice("embedding", embedding, EMBEDDINGS)
    # Partitionable threefry draws element i from counter i, so a (p, d) draw is the prefix of a
    # (p', d) draw: tasks are nested in p, whatever the user's global flag.
    with jax.threefry_partitionable(True):
        k_in, k_out, k_cand, k_init = jax.random.split(key, 4)
        inputs = _embed(k_in, (p, d), embedding, dtype)
        targets = _embed(k_out, (p, d), embedding, dtype)
        task = Task(inputs, targets, k_cand, k_init, None, problem, embedding)
        if problem == "dp" and p * p * d <= materialise_limit:
            idx = jnp.arange(p)
            cands = dp_candidates(task, idx[:, None], idx[None, :])
            task = eqx.tree_at(lambda t: t.candidates, task, cands, is_leaf=lambda x: x is None)
    return task


def make_tasks(key: PRNGKeyArray, *, n: int, d: int, p: int, **kwargs) -> Task:
    """`n` independent tasks stacked on a leading ensemble axis (task `i` uses
    `fold_in(key, i)`, so a batch is the stack of the single tasks)."""
    n = check_int("n", n, 1)
    _check_key(key)
    d = check_int("d", d, 2)
    p = check_int("p", p, 2)
    dp = kwargs.get("problem", "op") == "dp"
    cands = p * p * d if dp and p * p * d <= kwargs.get("materialise_limit", MATERIALISE_LIMIT) else 0
    check_memory("n, d and p", 4.0 * n * (2 * p * d + cands))
    tasks = [make_task(jax.random.fold_in(key, i), d=d, p=p, **kwargs) for i in range(n)]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *tasks)
