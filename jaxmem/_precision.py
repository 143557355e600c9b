"""The precision policy of the optimisation's matmuls (decisions are always made at HIGHEST).

- `"highest"`: float32 products and sums (`Precision.HIGHEST`); the default, and on the CPU the
  only native float32 path.
- `"tf32"`: operands rounded to 10 mantissa bits, float32 accumulation: the tensor cores'
  TF32 mode on a GPU (`Precision.DEFAULT`), emulated elsewhere by rounding the operands
  (`lax.reduce_precision`), so the CPU sees the same rounding of the inputs.
- `"bf16"`: operands cast to bfloat16 (8 bits of mantissa), products accumulated in the input
  dtype (`preferred_element_type`).

A lower precision perturbs the gradient by about `2^-11` (tf32) or `2^-8` (bf16) relative; it
changes trajectories, never a stored / unstorable decision or a certificate, which are
recomputed at HIGHEST (and near-ties in float64).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def einsum(spec: str, a, b, precision=lax.Precision.HIGHEST):
    """`jnp.einsum(spec, a, b)` under `precision`: a `lax.Precision`, or a name in `PRECISIONS`.

    **Arguments:** `spec`: the einsum subscripts of two operands; `a`, `b`: the operands;
    `precision`: the policy.

    **Returns:** the product, in the dtype of `a`.
    """
    if isinstance(precision, str):
        if precision == "bf16":
            return jnp.einsum(
                spec, a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), preferred_element_type=a.dtype
            )
        if precision == "tf32":
            if jax.default_backend() == "gpu":
                return jnp.einsum(spec, a, b, precision=lax.Precision.DEFAULT)
            a = lax.reduce_precision(a, exponent_bits=8, mantissa_bits=10)
            b = lax.reduce_precision(b, exponent_bits=8, mantissa_bits=10)
        precision = lax.Precision.HIGHEST
    return jnp.einsum(spec, a, b, precision=precision)
