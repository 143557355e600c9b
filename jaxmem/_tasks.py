"""Storage tasks: `p` inputs `e_mu` and targets `u_mu` in `R^d`, original or decoupled.

OP: input `mu` competes against the shared targets `u_1..u_p`.
DP: input `mu` has its own candidates `c^(mu)_1..c^(mu)_p` with `c^(mu)_mu = u_mu`; every other
candidate is a fresh Gaussian that is a pure function of `(key, mu, rho)`. They are
materialised only while `p*p*d` floats stay below `materialise_limit`; above it every consumer
regenerates them block by block from the same function, so both paths see identical numbers.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float, PRNGKeyArray

from ._names import EMBEDDINGS
from ._precision import einsum
from ._validate import check_choice, check_int, check_memory, check_positive, check_real, InvalidArgument


# 2**26 float32 = 256 MiB of candidates per task.
MATERIALISE_LIMIT = 2**26


def alpha_of(d: int, p):
    """The load `alpha = p ln p / d^2` of `p` associations in dimension `d`: the one home of
    the formula. `p` may be real (a median threshold) or an array; `p = 1` has load 0
    (`1 ln 1 = 0`), and a `p` below 1 or not finite gives NaN.

    **Arguments:** `d`: the dimension; `p`: the number of associations (real or an array).

    **Returns:** a float, or an array like `p`.
    """
    check_real("d", d, low=0.0, low_open=True)
    x = np.asarray(p, np.float64)
    ok = np.isfinite(x) & (x >= 1)
    out = np.where(ok, x * np.log(np.where(ok, x, 2.0)) / float(d) ** 2, np.nan)
    return float(out) if out.ndim == 0 else out


def p_from_alpha(d: int, alpha: float) -> int:
    """The integer `p >= 2` whose load `p ln p / d^2` is closest to `alpha`.

    **Arguments:** `d`: the dimension; `alpha`: a load `> 0`, at least half the load of `p = 2`.

    **Returns:** the integer `p`.
    """
    d = check_int("d", d, 2)
    alpha = check_positive("alpha", alpha)
    if alpha < alpha_of(d, 2) / 2:
        raise InvalidArgument(
            f"alpha must be >= {alpha_of(d, 2) / 2:.3g} at d = {d} (p = 2 has load {alpha_of(d, 2):.3g}); "
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
    if embedding in ("sphere", "unit"):
        radius = math.sqrt(shape[-1]) if embedding == "sphere" else 1.0
        # normalised in float64 and rounded once: a float32 reduction's rounding depends on the
        # shape (vectorisation, fused multiply-adds), which would break the nesting in p
        with jax.enable_x64(True):
            x64 = x.astype(jnp.float64)
            x = (x64 * (radius / jnp.linalg.norm(x64, axis=-1, keepdims=True))).astype(dtype)
    return x


class AbstractTask(eqx.Module):
    """One storage task: inputs `e_mu` and targets `u_mu`, `(p, d)` each, and the candidates
    every input competes against (docs/science.md, 1). `init_key` seeds the memory trained on
    it, so a seed fixes task and initialisation.

    A problem is a final subclass that answers `candidates(rows, cols)`; the kernels (the loss,
    the metrics, the constraints of the decision solver) ask it for blocks of scores and never
    branch on which problem it is. `shared` says whether all inputs compete against the same
    candidates (then a score block is one matmul)."""

    inputs: eqx.AbstractVar[Float[Array, "p d"]]
    targets: eqx.AbstractVar[Float[Array, "p d"]]
    cand_key: eqx.AbstractVar[PRNGKeyArray]
    init_key: eqx.AbstractVar[PRNGKeyArray]
    embedding: eqx.AbstractVar[str]
    problem: ClassVar[str]
    shared: ClassVar[bool]

    @property
    def d(self) -> int:
        return self.inputs.shape[-1]

    @property
    def p(self) -> int:
        return self.inputs.shape[-2]

    @property
    def streams_only(self) -> bool:
        """True when the candidates exist only block by block (never as one array)."""
        return False

    @abc.abstractmethod
    def candidates(self, rows, cols) -> Float[Array, "... d"]:
        """The candidates `c^(rows)_cols`: `(B, d)` for `cols` of shape `(B,)` when `shared`,
        else `(..., d)` for broadcastable integer arrays `rows`, `cols`."""

    @abc.abstractmethod
    def block_scores(self, V, rows, cols, precision):
        """Scores `s[mu, rho] = c^(mu)_rho . v_mu` of the inputs `rows` (their projections `V`,
        `(R, d)`) against candidates `cols` (`(B,)`). **Returns:** `(s (R, B), C)` with `C` the
        candidate block, for `block_sum`."""

    @abc.abstractmethod
    def block_sum(self, weights, C, precision):
        """`sum_rho weights[mu, rho] c^(mu)_rho` over a candidate block `C`: `(R, d)`."""

    def table(self, P: int):
        """All candidates of the first `P` inputs as one array: `(P, d)` when `shared`, else
        `(P, P, d)`."""
        idx = jnp.arange(P)
        if self.shared:
            return self.candidates(idx, idx)
        return self.candidates(idx[:, None], idx[None, :])

    def prefix(self, p: int) -> AbstractTask:
        """The task of the first `p` associations (tasks are nested in `p`, so this is the task
        `make_task` gives at `p`); works on a batch too (leading axes are kept)."""
        p = check_int("p", p, 2, self.p)
        return dataclasses.replace(self, inputs=self.inputs[..., :p, :], targets=self.targets[..., :p, :])

    def score_matrix(self, V, precision):
        """The `p x p` scores of the projections `V = E W^T`."""
        idx = jnp.arange(self.p)
        return self.block_scores(V, idx, idx, precision)[0]

    @classmethod
    @abc.abstractmethod
    def build(cls, inputs, targets, cand_key, init_key, embedding: str, materialise_limit: int):
        """The task of these arrays (materialising what is small enough)."""

    def fold_tiles(self, Vs, *, block: int, row_block: int, precision, fn, init, row_init, row_done):
        """The one tiled pass over a task's scores: fold over row blocks of `row_block` inputs
        and, within each, column blocks of `block` candidates, never forming the `P x P` scores.
        Shared by the streaming loss and the streamed constraints.

        **Arguments:**

        - `Vs`: projections `(P, d)`; each tile's scores are formed for every one of them.
        - `fn(carry, row_carry, r, rows, cols, scores, C)`: one tile; `rows` `(R,)` and `cols`
          `(B,)` are the tile's indices (they run past `P` in the last blocks: mask them),
          `scores` the `(R, B)` scores of each `V`, `C` the candidate tile (`block_sum`).
          **Returns:** `(carry, row_carry)`.
        - `init`: the carry; `row_init(R)` starts each row block's `row_carry`, and
          `row_done(carry, row_carry, r, rows)` folds it into the carry.

        **Returns:** the final carry."""
        P = self.p
        R, B = int(row_block), int(block)
        nr, nb = -(-P // R), -(-P // B)
        Vs = [jnp.pad(V, ((0, nr * R - P), (0, 0))) for V in Vs]

        def row_pass(carry, r):
            rows = r * R + jnp.arange(R)
            Vr = [lax.dynamic_slice_in_dim(V, r * R, R) for V in Vs]

            def body(c, b):
                carry, rc = c
                cols = b * B + jnp.arange(B)
                rr, cc = jnp.minimum(rows, P - 1), jnp.minimum(cols, P - 1)
                out = [self.block_scores(V, rr, cc, precision) for V in Vr]
                return fn(carry, rc, r, rows, cols, [s for s, _ in out], out[0][1]), None

            carry, rc = lax.scan(body, (carry, row_init(R)), jnp.arange(nb))[0]
            return row_done(carry, rc, r, rows), None

        return lax.scan(row_pass, init, jnp.arange(nr))[0]

    def row_block(self, block: int) -> int:
        """Rows per streaming pass: all of them for shared candidates; else sized so that a
        generated `(rows, block, d)` candidate block stays near 2^22 floats."""
        if self.shared:
            return self.p
        return max(1, min(self.p, 2**22 // (block * self.d)))


class OPTask(AbstractTask):
    """The original problem: input `mu` competes against the shared targets `u_1..u_p`."""

    inputs: Float[Array, "p d"]
    targets: Float[Array, "p d"]
    cand_key: PRNGKeyArray
    init_key: PRNGKeyArray
    embedding: str = eqx.field(static=True)
    problem: ClassVar[str] = "op"
    shared: ClassVar[bool] = True

    def candidates(self, rows, cols):
        return self.targets[cols]

    def block_scores(self, V, rows, cols, precision):
        C = self.targets[cols]
        return einsum("md,bd->mb", V, C, precision), C

    def block_sum(self, weights, C, precision):
        return einsum("mb,bd->md", weights, C, precision)

    @classmethod
    def build(cls, inputs, targets, cand_key, init_key, embedding, materialise_limit):
        return cls(inputs=inputs, targets=targets, cand_key=cand_key, init_key=init_key, embedding=embedding)


class DPTask(AbstractTask):
    """The decoupled problem: input `mu` has its own candidates `c^(mu)_rho`, with
    `c^(mu)_mu = u_mu` and every other one a fresh Gaussian (or sphere) vector that is a pure
    function of `(cand_key, mu, rho)`. `materialised` holds them all, `(p, p, d)`, while they
    are small (else None, and every consumer regenerates blocks from the same function)."""

    inputs: Float[Array, "p d"]
    targets: Float[Array, "p d"]
    cand_key: PRNGKeyArray
    init_key: PRNGKeyArray
    materialised: Float[Array, "p p d"] | None
    embedding: str = eqx.field(static=True)
    # the dtype candidates are drawn in (then cast to the inputs' dtype): a task cast to float64
    # for a recheck regenerates the same numbers
    draw_dtype: str | None = eqx.field(static=True, default=None)
    problem: ClassVar[str] = "dp"
    shared: ClassVar[bool] = False

    @property
    def streams_only(self) -> bool:
        return self.materialised is None

    def candidates(self, rows, cols):
        mu, rho = jnp.broadcast_arrays(jnp.asarray(rows), jnp.asarray(cols))
        if self.materialised is not None:
            # held candidates keep their dtype when the rest is cast (a float64 recheck)
            return self.materialised[mu, rho].astype(self.inputs.dtype)
        dtype = self.inputs.dtype
        draw = dtype if self.draw_dtype is None else jnp.dtype(self.draw_dtype)

        def one(m, r):
            k = jax.random.fold_in(jax.random.fold_in(self.cand_key, m), r)
            return _embed(k, (self.d,), self.embedding, draw).astype(dtype)

        with jax.threefry_partitionable(True):
            fresh = jax.vmap(one)(mu.ravel(), rho.ravel()).reshape(mu.shape + (self.d,))
        return jnp.where((mu == rho)[..., None], self.targets[mu], fresh)

    def prefix(self, p: int) -> DPTask:
        task = super().prefix(p)
        if self.materialised is None:
            return task
        return dataclasses.replace(task, materialised=self.materialised[..., :p, :p, :])

    def table(self, P: int):
        if self.materialised is not None:
            return self.materialised[:P, :P]
        return super().table(P)

    def block_scores(self, V, rows, cols, precision):
        if self.materialised is not None:
            C = self.materialised[rows[:, None], cols[None, :]].astype(self.inputs.dtype)
        else:
            C = self.candidates(rows[:, None], cols[None, :])
        return einsum("md,mbd->mb", V, C, precision), C

    def score_matrix(self, V, precision):
        return einsum("md,mrd->mr", V, self.table(self.p), precision)

    @classmethod
    def build(cls, inputs, targets, cand_key, init_key, embedding, materialise_limit):
        task = cls(
            inputs=inputs,
            targets=targets,
            cand_key=cand_key,
            init_key=init_key,
            materialised=None,
            embedding=embedding,
            draw_dtype=jnp.dtype(inputs.dtype).name,
        )
        p, d = inputs.shape
        if p * p * d > materialise_limit:
            return task
        return eqx.tree_at(lambda t: t.materialised, task, task.table(p), is_leaf=lambda x: x is None)

    def block_sum(self, weights, C, precision):
        return einsum("mb,mbd->md", weights, C, precision)


Task = AbstractTask
# The problem registry: a new problem is a final AbstractTask and one entry here.
PROBLEM_CLASSES: dict[str, type[AbstractTask]] = {"op": OPTask, "dp": DPTask}
PROBLEMS = tuple(PROBLEM_CLASSES)


def dp_candidates(task: AbstractTask, mu, rho) -> Float[Array, "... d"]:
    """Candidates `c^(mu)_rho` of a task for broadcastable integer arrays `mu`, `rho`
    (`task.candidates`, kept as a function for the tests and the docs).

    **Arguments:** `task`: one task; `mu`, `rho`: broadcastable integer arrays.

    **Returns:** the candidates, shape `broadcast(mu, rho) + (d,)`.
    """
    try:
        np.broadcast_shapes(np.shape(mu), np.shape(rho))
    except ValueError:
        raise InvalidArgument(
            f"mu and rho must broadcast together, got shapes {np.shape(mu)} and {np.shape(rho)}"
        ) from None
    mu, rho = jnp.broadcast_arrays(jnp.asarray(mu), jnp.asarray(rho))
    if task.shared:
        return jnp.broadcast_to(task.targets[rho], mu.shape + (task.d,))
    return task.candidates(mu, rho)


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
    """A task with `e_mu, u_mu ~ N(0, I_d)` (or normalised to the sphere of radius `sqrt(d)`,
    or to unit norm as in Nichani, Lee and Bietti's linear associative memory).

    Tasks are nested in `p`: with the same key, the task at `p` is the prefix of the task at
    `p' > p` (inputs, targets and DP candidates), so storability is monotone in `p`.

    **Arguments:** `key`: a typed PRNG key; `d`, `p`: dimension and associations (`>= 2`);
    `problem`: `"op"` or `"dp"` (the `PROBLEM_CLASSES` registry); `embedding`: `"gaussian"`,
    `"sphere"` or `"unit"`; `dtype`: of the arrays; `materialise_limit`: the most DP candidate floats held as
    one array.

    **Returns:** an `OPTask` or a `DPTask`.
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
        return PROBLEM_CLASSES[problem].build(inputs, targets, k_cand, k_init, embedding, materialise_limit)


def make_tasks(key: PRNGKeyArray, *, n: int | None = None, d: int, p: int, seeds=None, **kwargs) -> Task:
    """Independent tasks stacked on a leading ensemble axis: task `s` uses `fold_in(key, s)`, for
    `s` in `range(n)` or in `seeds` (a seed range: `seeds=range(8, 16)` is the second group of
    eight of the same ensemble), so a batch is the stack of the single tasks.

    **Arguments:** `key`: a typed PRNG key; `n`: the ensemble size, or `seeds`: the seeds (exactly
    one of the two); `d`, `p`, `**kwargs`: as `make_task`.

    **Returns:** one task whose arrays have a leading axis, one entry per seed.
    """
    if (n is None) == (seeds is None):
        raise InvalidArgument("give exactly one of n and seeds")
    if seeds is None:
        seeds = range(check_int("n", n, 1))
    try:
        seeds = [int(check_int("seeds", s, 0)) for s in seeds]
    except TypeError:
        raise InvalidArgument(f"seeds must be an iterable of seeds, got {seeds!r}") from None
    if not seeds:
        raise InvalidArgument("seeds must hold at least one seed")
    n = len(seeds)
    _check_key(key)
    d = check_int("d", d, 2)
    p = check_int("p", p, 2)
    dp = kwargs.get("problem", "op") == "dp"
    cands = p * p * d if dp and p * p * d <= kwargs.get("materialise_limit", MATERIALISE_LIMIT) else 0
    check_memory("n, d and p", 4.0 * n * (2 * p * d + cands))
    tasks = [make_task(jax.random.fold_in(key, s), d=d, p=p, **kwargs) for s in seeds]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *tasks)
