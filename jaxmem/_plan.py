"""How a threshold search proposes `p`: its plan (`SearchPlan`), the theory's first guess
(`guess_p`), the default plan of a `d`, and the next `p` of each seed (`propose`)."""

from __future__ import annotations

import functools
import math

import equinox as eqx
import numpy as np

from ._tasks import p_from_alpha
from ._validate import check_int, check_real


class SearchPlan(eqx.Module):
    """How a threshold search proposes `p`.

    **Arguments:**

    - `p0`: the first `p` tried for every seed (the theory's guess of the capacity).
    - `p_max`: the largest `p` one search tries (its tasks are generated with `p_max`
      associations). A capacity measurement searches a seed none of whose `p` failed once more
      with `EXTEND` times this `p_max` (`jaxmem.study`), so a record's threshold can exceed it.
    - `step`: the bracketing factor (`p0 * step**k` until the threshold is bracketed).
    - `pad`: the common size of a round is the largest `p` rounded up to a multiple of `pad`
      (bounds the number of compilations).
    - `resolution`: a seed's search stops once `hi - lo <= resolution` (its largest certified
      storable `p` and smallest certified unstorable one); 1 finds every threshold exactly.
    """

    p0: int
    p_max: int
    step: float = 1.04
    pad: int = 32
    resolution: int = 1

    def __check_init__(self):
        check_int("p0", self.p0, 2)
        check_int("p_max", self.p_max, self.p0)
        check_real("step", self.step, low=1.0, low_open=True, high=2.0)
        check_int("pad", self.pad, 1)
        check_int("resolution", self.resolution, 1)

    def fields(self) -> dict:
        """The plan as a record's config stores it (`resolution` only where it is not 1, so an
        exact search keeps the identity it had before the field existed)."""
        out = dict(p0=self.p0, p_max=self.p_max, step=self.step, pad=self.pad)
        return out if self.resolution == 1 else dict(out, resolution=self.resolution)


def _first_p(d: int) -> int:
    return max(2, round(d * d / max(math.log(d * d), 1.0)))


@functools.lru_cache(maxsize=256)
def guess_p(d: int, kappa: float = 1.0) -> int:
    """The `p` at which the load equals the theory's `alpha_c(p, kappa)` (a fixed point; cached:
    a study asks it for every point at the same `d`, and each costs a second of sampling)."""
    from . import theory as th

    p = _first_p(d)
    for _ in range(4):
        p = p_from_alpha(d, float(th.alpha_c(float(p), kappa=float(kappa), se_target=0.005)))
    return p


# A default search resolves each threshold until its certified bracket spans at most this much
# load, `alpha(hi) - alpha(lo) <= RESOLUTION`: exact where one step of `p` is wider than half of it
# (d <= 128), 4 steps at d = 192, 6 at 256. The last bisection steps are a search's costliest
# decisions (near-ties) and move a 64-seed median's CI by far less than the spread of the seeds.
RESOLUTION = 1e-3


def default_plan(d: int, kappa: float = 1.0) -> SearchPlan:
    """The theory's guess `p0` (`guess_p`), `p_max = 1.6 p0`, and the resolution of
    `RESOLUTION` in load at `p0` (a step of `p` there is `(ln p0 + 1) / d^2`)."""
    p0 = guess_p(d, kappa)
    steps = max(1, math.floor(RESOLUTION * d * d / (math.log(p0) + 1)))
    return SearchPlan(p0=p0, p_max=max(p0 + 4, math.ceil(1.6 * p0)), resolution=steps)


def tail_plan(d: int, r: float) -> SearchPlan:
    """The default plan of a tail-average search: `p0` at the proportional limit's load
    `alpha_G,c(r) d^2` raised by `1 + 4 / d` (the finite-`d` capacities lie above the limit,
    docs/decisions.md), `p_max = 2 p0`, exact thresholds (resolution 1: the search must see
    `p* + 1` and `p* + 2`)."""
    from . import theory as th

    p0 = max(3, round(float(th.listwise_alpha_c(float(r))) * d * d * (1.0 + 4.0 / d)))
    return SearchPlan(p0=p0, p_max=2 * p0)


def propose(lo, hi, plan: SearchPlan):
    """The next `p` of each seed with bracket `[lo, hi)`: `p0` first, then steps of `step` up
    (or down) until bracketed, then bisection; within the bracket and at most `p_max`."""
    unknown_hi = hi > plan.p_max
    p = np.where(
        lo <= 1,
        np.where(unknown_hi, plan.p0, np.maximum(2, np.floor(hi / plan.step))),
        np.where(unknown_hi, np.minimum(plan.p_max, np.ceil(lo * plan.step)), (lo + hi) // 2),
    )
    p = np.clip(p, lo + 1, np.minimum(hi - 1, plan.p_max)).astype(np.int64)
    return p
