"""What counts as stored: a criterion on an instance's associations, one concept for the
trainer's early stop, its results and the threshold search's float64 judgement.

A criterion is two choices: when one association counts as stored (`stored`, from its row of
scores `S[mu, rho] = c^(mu)_rho . W e_mu`), and when an instance's count of stored associations
meets it (`met`). `AllStored` and `Accuracy(x)` (Nichani, Lee and Bietti's protocol) take the
top-1 test, the target above every competitor: the fused loss computes it, and the float64
margins decide it, so no score matrix is formed for them. `TailAverage(r)` (docs/science.md 2.6)
asks the target to beat the mean of its `k = ceil(r (p - 1))` best competitors: its `stored` reads
the score matrix (`top1 = False`), its certified decisions are the tail-average decider's, its
storability is not monotone in `p`, and its load is `p / d^2`.

A criterion is named by a short text (`name`, parsed by `parse_criterion`): `all` (top-1 for
every association, the default), `accuracy:X` and `tail:r`. A new criterion is one final
subclass and its entry in `CRITERIA`.
"""

from __future__ import annotations

import abc
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._loss import outcome
from ._metrics import HIGHEST
from ._tasks import alpha_of
from ._validate import check_real, InvalidArgument
from .solvers import decider_for, stored_fraction, Tail, tail_k, tail_margins, to64


class AbstractCriterion(eqx.Module):
    """A success criterion on the stored associations of one instance."""

    # whether `stored` is the top-1 test (then callers may use the fused loss's flags)
    top1: ClassVar[bool] = True
    # whether storability of nested tasks is monotone in `p` (a threshold search may bisect)
    monotone: ClassVar[bool] = True
    # the load a capacity on this criterion is reported in
    load: ClassVar[str] = "p ln p / d^2"

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The criterion's text (`parse_criterion(c.name) == c`)."""

    def decider(self, config, *, d: int, problem: str, rank=None):
        """The certified decider of this criterion (`jaxmem.solvers.decider_for` for top-1)."""
        return decider_for(config, d=d, problem=problem, rank=rank)

    def alpha_of(self, d: int, p) -> float:
        """The load of `p` associations in dimension `d` (`load`)."""
        return alpha_of(d, p)

    def limit(self) -> float | None:
        """The capacity of the proportional limit on this criterion's load, where the theory
        has one that does not depend on `p` (None for top-1, whose `alpha_c(p)` does)."""
        return None

    def stored(self, S, n):
        """Per association (a row of the `P x P` scores `S`, the first `n` real), whether it
        counts as stored; a padded row counts as stored. By default the top-1 test: its target
        (the diagonal) above every real competitor."""
        return outcome(S, n).stored

    def hits(self, S, n):
        """The number of the first `n` associations that count as stored."""
        flags = self.stored(S, n)
        return jnp.sum(flags) - (flags.shape[-1] - n)

    @abc.abstractmethod
    def met(self, hits, n):
        """Whether `hits` stored associations out of `n` meet it (traced or numpy arrays)."""

    def met64(self, cons, W, margin) -> np.ndarray:
        """The float64 judgement of a batch of memories `W` on their dense constraints `cons`
        (`margin`: `verify`'s float64 normalised minimum margins, which a top-1 criterion may use
        instead): a boolean per instance. By default `stored` on the float64 scores."""
        with jax.enable_x64(True):
            W, cons = to64(jnp.asarray(W)), jax.tree.map(to64, cons)
            hits = jax.vmap(lambda c, w: self.hits(c.scores(w, HIGHEST), c.p))(cons, W)
            return np.asarray(self.met(hits, cons.p)).copy()


class AllStored(AbstractCriterion):
    """Every association stored: in float64, a positive minimum margin."""

    @property
    def name(self) -> str:
        return "all"

    def met(self, hits, n):
        return hits >= n

    def met64(self, cons, W, margin) -> np.ndarray:
        return np.asarray(margin) > 0


class Accuracy(AbstractCriterion):
    """At least a fraction `fraction` of the associations stored (`0 < fraction < 1`)."""

    fraction: float

    def __check_init__(self):
        check_real("accuracy", self.fraction, low=0.0, low_open=True, high=1.0)

    @property
    def name(self) -> str:
        return f"accuracy:{self.fraction:g}"

    def met(self, hits, n):
        return hits >= self.fraction * n

    def met64(self, cons, W, margin) -> np.ndarray:
        return stored_fraction(cons, W) >= self.fraction


class TailAverage(AbstractCriterion):
    """Every association stored under the tail average: its target's score above the mean of
    its `k = ceil(r (p - 1))` highest competitor scores (`0 < r <= 1`; `r -> 0` is top-1). The
    load of its capacity is `p / d^2`; storability of nested tasks is not monotone in `p`
    (docs/science.md 2.6)."""

    r: float
    top1: ClassVar[bool] = False
    monotone: ClassVar[bool] = False
    load: ClassVar[str] = "p / d^2"

    def __check_init__(self):
        check_real("r", self.r, low=0.0, low_open=True, high=1.0)

    @property
    def name(self) -> str:
        return f"tail:{self.r:g}"

    def stored(self, S, n):
        P = S.shape[-1]
        idx = jnp.arange(P)
        real = idx < n
        mask = real[:, None] & real[None, :] & (idx[:, None] != idx[None, :])
        t = tail_margins(jnp.diagonal(S)[:, None] - S, mask, tail_k(n, self.r))
        return (t > 0) | ~real

    def met(self, hits, n):
        return hits >= n

    def decider(self, config, *, d: int, problem: str, rank=None):
        if rank is not None:
            raise InvalidArgument("the tail-average criterion is decided for full-rank memories only")
        return Tail(config=config, r=float(self.r))

    def alpha_of(self, d: int, p) -> float:
        return float(p) / (d * d)

    def limit(self) -> float:
        """`alpha_G,c(r)`, the proportional limit of `p / d^2` (docs/science.md 2.6)."""
        from . import theory as th

        return float(th.listwise_alpha_c(float(self.r)))


def criterion_of(accuracy: float) -> AbstractCriterion:
    """The criterion a `TrainConfig.accuracy` names: 1.0 all stored, below it a fraction."""
    return AllStored() if accuracy == 1.0 else Accuracy(float(accuracy))


def _accuracy(x: float) -> AbstractCriterion:
    return Accuracy(x)


# criterion names: `name` or `name:X`, X the parameter
CRITERIA = {"all": AllStored, "accuracy": _accuracy, "tail": TailAverage}


def parse_criterion(text) -> AbstractCriterion:
    """The criterion a text names: `all`, `accuracy:X` (`0 < X < 1`) or `tail:r` (`0 < r <= 1`);
    an `AbstractCriterion` is returned as it is. **Raises** `ValueError` naming `criterion`."""
    if isinstance(text, AbstractCriterion):
        return text
    if not isinstance(text, str):
        raise InvalidArgument(f"criterion must be a text such as 'all' or 'tail:0.1', got {text!r}")
    head, colon, x = text.partition(":")
    if head not in CRITERIA or (head == "all") == bool(colon):
        raise InvalidArgument(f"criterion must be all, accuracy:X or tail:r; got {text!r}")
    if head == "all":
        return AllStored()
    try:
        value = float(x)
    except ValueError:
        raise InvalidArgument(f"criterion {text!r}: {x!r} is not a number") from None
    if not (0.0 < value <= 1.0) or (head == "accuracy" and value == 1.0):
        raise InvalidArgument(
            f"criterion {text!r}: the parameter must be in (0, 1{')' if head == 'accuracy' else ']'}"
        )
    return CRITERIA[head](value)
