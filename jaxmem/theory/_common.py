"""Float64 evaluation independent of the global JAX setting, under every transformation.

`float64` runs a theory function with 64-bit types enabled. Where `jax_enable_x64` is off, a
float64 computation cannot simply sit inside a user's `jax.grad`: the transposed program runs
outside the 64-bit context, where float64 casts silently become float32 ones. So a call with
traced arguments goes through a `custom_jvp` whose rule forms the Jacobian in float64, by
forward mode inside the 64-bit context, and applies it to the tangents in the caller's
precision: the linear map JAX transposes for reverse mode is then a plain matmul. This also
gives reverse-mode gradients through the while loops (sample until a standard error is met)
that JAX cannot transpose. An eager call returns NumPy float64 (a scalar for a 0-d value), so
that ordinary arithmetic on it stays float64; under a transformation the outputs are jax
arrays, float64 where x64 is on and float32 where it is off (the computation is float64 either
way).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np

from .._validate import check_int, check_real, InvalidArgument


def _x64() -> bool:
    return bool(jax.config.jax_enable_x64)


def _is_key(x) -> bool:
    return jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def _floating(x) -> bool:
    return isinstance(x, jax.Array) and not _is_key(x) and jnp.issubdtype(x.dtype, jnp.floating)


def _to_caller(out):
    """Outputs in the caller's precision: float64 -> float32 and int64 -> int32 without x64."""
    if _x64():
        return out

    def cast(x):
        if isinstance(x, jax.Array) and not _is_key(x):
            if x.dtype == jnp.float64:
                return x.astype(jnp.float32)
            if x.dtype == jnp.int64:
                return x.astype(jnp.int32)
        return x

    return jax.tree.map(cast, out)


def _to_numpy(out):
    """Every array leaf as NumPy, a 0-d floating one as a NumPy scalar (other 0-d leaves, such
    as a status enumeration's value, stay 0-d arrays): an eager result keeps float64 in the
    caller's arithmetic even with x64 off, where a float64 jax array would be truncated to
    float32 by the first operation."""

    def cast(x):
        if isinstance(x, jax.Array) and not _is_key(x):
            return np.asarray(x)[()] if _floating(x) else np.asarray(x)
        return x

    return jax.tree.map(cast, out)


_INSIDE = [0]  # depth of theory calls in progress (their inner calls skip the wrapper)


def _inside(fn, args, kwargs):
    _INSIDE[0] += 1
    try:
        with jax.enable_x64(True):
            return fn(*args, **kwargs)
    finally:
        _INSIDE[0] -= 1


@dataclasses.dataclass(frozen=True)
class Domain:
    """Where a real argument is valid: `low` and `high` (open or closed), finite unless `inf`
    (then `+inf` too), an integer if `integer` (a shape: never traced)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    inf: bool = False
    integer: bool = False

    def check(self, name: str, value) -> None:
        """Raise `InvalidArgument` naming `name` unless every element of a concrete `value` is
        valid."""
        if self.integer:
            check_int(name, value, int(self.low if self.low is not None else -(2**63)))
            return
        bounds = dict(low=self.low, high=self.high, low_open=self.low_open, high_open=self.high_open)
        if isinstance(value, (jax.Array, np.ndarray)) and np.ndim(value):
            for v in np.unique(np.asarray(value, np.float64)):
                self.check(name, np.float64(v))
            return
        if self.inf and isinstance(value, (int, float, np.number, jax.Array)) and float(value) == math.inf:
            return
        try:
            check_real(name, value, **bounds)
        except InvalidArgument as e:
            raise InvalidArgument(f"{e} (or inf)" if self.inf else str(e)) from None

    def holds(self, x):
        """Whether every element of a (traced) `x` is valid, as a traced boolean."""
        x = jnp.asarray(x, jnp.float64)
        ok = jnp.isfinite(x) | ((x == jnp.inf) & self.inf)
        if self.low is not None:
            ok &= (x > self.low) if self.low_open else (x >= self.low)
        if self.high is not None:
            ok &= (x < self.high) if self.high_open else (x <= self.high)
        return jnp.all(ok)


# the domains most functions share
KAPPA = Domain(low=0.0, high=1.0, low_open=True)
MARGIN = Domain(low=0.0)
P = Domain(low=2.0)
POSITIVE = Domain(low=0.0, low_open=True)


def _masked(out, ok):
    """Every floating leaf of `out` set to NaN where `ok` is false."""
    nan = lambda x: jnp.where(ok, x, jnp.nan) if _floating(x) else x
    return jax.tree.map(nan, out)


def float64(fn=None, /, **domain: Domain):
    """Run `fn` in float64 whatever the global flag, under `jit`, `vmap`, `grad` and `jvp`.

    Arguments that are jax arrays (traced or not) are its dynamic inputs; Python numbers stay
    Python numbers (so the functions' own argument checks see them). Derivatives are taken
    with respect to the floating dynamic inputs. `domain` gives the valid values of named
    arguments: a concrete value outside raises `InvalidArgument` naming it, and a traced one
    makes every floating output NaN (a function with a status reports it there too), and so
    its derivatives: a tangent is NaN wherever its output is.

    **Arguments:** `fn`: the function (omitted when called with `domain` only, as a decorator
    factory); `domain`: `Domain`s by argument name."""
    if fn is None:
        return lambda f: float64(f, **domain)
    sig = inspect.signature(fn)
    unknown = set(domain) - set(sig.parameters)
    if unknown:
        raise TypeError(f"{fn.__name__} has no argument {', '.join(sorted(unknown))}")

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _INSIDE[0]:  # called by another theory function: already in float64, plain call
            return fn(*args, **kwargs)
        bound = sig.bind(*args, **kwargs)
        names = list(bound.arguments)
        value = lambda n: bound.arguments.get(n, sig.parameters[n].default)
        for n, dom in domain.items():
            if not isinstance(value(n), jax.core.Tracer):
                dom.check(n, value(n))
        dyn = [n for n in names if isinstance(bound.arguments[n], jax.Array)]
        if not any(isinstance(bound.arguments[n], jax.core.Tracer) for n in dyn):
            return _to_numpy(_inside(fn, args, kwargs))  # an eager call: NumPy float64 outputs
        traced = [n for n in dyn if n in domain and isinstance(bound.arguments[n], jax.core.Tracer)]

        def call(values):
            b = sig.bind(*args, **kwargs)
            b.arguments.update(zip(dyn, values))
            out = _inside(fn, b.args, b.kwargs)
            if not traced:
                return out
            with jax.enable_x64(True):
                ok = jnp.all(jnp.stack([domain[n].holds(b.arguments[n]) for n in traced]))
                return _masked(out, ok)

        @jax.custom_jvp
        def run(*values):
            return _to_caller(call(values))

        @run.defjvp
        def _jvp(primals, tangents):
            # a primal may arrive as a Python float (jax.jvp passes scalars through)
            fidx = [i for i, v in enumerate(primals) if _floating(v) or isinstance(v, (float, np.floating))]
            if not fidx:
                out = run(*primals)
                zeros = [np.zeros(np.shape(x), jax.dtypes.float0) for x in jax.tree.leaves(out)]
                return out, jax.tree.unflatten(jax.tree.structure(out), zeros)
            shape = {}

            def all_leaves(*fvals):
                values = list(primals)
                for i, v in zip(fidx, fvals):
                    values[i] = v
                got, shape["tree"] = jax.tree.flatten(call(values))
                return got

            # the primal comes from the Jacobian's own forward pass: the computation is in the
            # program once, not once more for the value
            with jax.enable_x64(True):
                got, jac = _jacobian(all_leaves, [jnp.asarray(primals[i], jnp.float64) for i in fidx])
            out = _to_caller(jax.tree.unflatten(shape["tree"], got))
            leaves, treedef = jax.tree.flatten(out)
            inexact = [i for i, x in enumerate(leaves) if _floating(x)]
            t_leaves = [np.zeros(np.shape(x), jax.dtypes.float0) for x in leaves]
            for k, i in enumerate(inexact):
                t = jnp.zeros(leaves[i].shape, leaves[i].dtype)
                invalid = jnp.isnan(leaves[i])
                for j, a in enumerate(fidx):
                    # an invalid value has no derivative: NaN in the Jacobian itself (not in
                    # the tangent, whose constant NaN reverse mode would drop), never the 0 of
                    # the masking `where`
                    J = jac[i][j].astype(leaves[i].dtype)
                    J = jnp.where(invalid.reshape(invalid.shape + (1,) * (J.ndim - invalid.ndim)), jnp.nan, J)
                    ta = jnp.asarray(tangents[a], leaves[i].dtype)
                    t = t + jnp.tensordot(J, ta, axes=ta.ndim)
                t_leaves[i] = t
            return out, jax.tree.unflatten(treedef, t_leaves)

        return run(*[bound.arguments[n] for n in dyn])

    return wrapper


def _jacobian(f, xs):
    """`(f(*xs), J)` with `J[k][j]` of shape `out_k.shape + x_j.shape` for each floating output
    `k` (None for the others): one forward-mode `jvp` per input element (no `vmap`, so a
    sampling loop whose length depends on the input is not batched). `f` returns a list of
    arrays; its value is that of the first pass."""
    value, jac = None, None
    for j, x in enumerate(xs):
        cols = None
        for e in range(max(1, x.size)):
            basis = [jnp.zeros_like(v) for v in xs]
            basis[j] = jnp.zeros(x.size, x.dtype).at[e].set(1.0).reshape(x.shape)
            got, t = jax.jvp(f, tuple(xs), tuple(basis))
            if value is None:
                value = got
                jac = [[None] * len(xs) for _ in got]
            cols = cols or [[] for _ in got]
            for k in range(len(got)):
                cols[k].append(t[k])
        for k, out in enumerate(value):
            if _floating(out):
                jac[k][j] = jnp.stack(cols[k], axis=-1).reshape(cols[k][0].shape + x.shape)
    return value, jac


def f64(x):
    return jnp.asarray(x, jnp.float64)


def default_key(key, seed: int = 0):
    """`key`, or the key of `seed` where it is None: made eagerly, so a caller's `jit` holds it
    as a constant (its seeding op, lowered outside the float64 context, would truncate int64)."""
    if key is not None:
        return key
    with jax.ensure_compile_time_eval():
        return jax.random.key(seed)


@functools.partial(jax.jit, static_argnames="shape")
def uniform(key, shape=()):
    """Float64 uniforms in `(0, 1)` with 53 random bits, from two 32-bit draws (no 64-bit
    integer op, so it also lowers inside a `jit` traced with x64 off). Jitted: called outside a
    `jit`, its ops would each be dispatched and compiled alone."""
    hi, lo = jax.random.bits(key, (2, *shape), jnp.uint32)
    top = (hi >> 11).astype(jnp.float64) * 2.0**32 + lo.astype(jnp.float64)  # 21 + 32 bits
    return (top + 0.5) * 2.0**-53


@functools.partial(jax.jit, static_argnames="shape")
def normal(key, shape=()):
    """Standard normal float64 samples: the Gaussian quantile of `uniform` (accurate in both
    tails)."""
    from jax.scipy.special import ndtri

    return ndtri(uniform(key, shape))


@functools.partial(jax.jit, static_argnames="shape")
def exponential(key, shape=()):
    """Standard exponential float64 samples, `-log(u)`."""
    return -jnp.log(uniform(key, shape))
