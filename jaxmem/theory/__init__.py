"""jaxmem.theory: float64 predictions for linear associative memories (docs/science.md section 2).

Pure functions of `(alpha, p, kappa, margin)`, jit-able, vmappable and differentiable; no
dependency on the simulation side. Every public function computes in float64 whatever the
global `jax_enable_x64` flag; wrap a transformation (`grad`, `vmap`) in `jax.enable_x64(True)`
to also get float64 outputs from it.
"""

from ._capacity import (
    alpha_c,
    alpha_c_asymptotic,
    Capacity,
    capacity,
    dist2_given_competitors,
    e_dist2,
    project,
    Projection,
    top_order_stats,
)
from ._hebbian import ALPHA_ALL_STORED, Hebbian, hebbian, hebbian_asymptotic
from ._listwise import kappa_r, listwise_alpha_c
from ._replica import (
    free_entropy,
    log_zout,
    Saddle,
    saddle,
    saddle_fields,
    saddle_path,
    SaddleConfig,
    SaddleStatus,
    sample_capacity,
    STATUS,
    status_name,
)
from ._scores import hebbian_scores, optimal_scores, ScoreLaw
from ._spectra import (
    F,
    init_spectrum,
    product_spectrum,
    qc_cdf,
    qc_density,
    qc_sample,
    s_kappa,
    truncated_density,
)
from ._transition import Transition, transition, transition_loads, TransitionLoads
