"""What counts as stored: a criterion on an instance's associations, one concept for the
trainer's early stop, its results and the threshold search's float64 judgement.

A criterion is two choices: when one association counts as stored (`stored`, from its row of
scores `S[mu, rho] = c^(mu)_rho . W e_mu`), and when an instance's count of stored associations
meets it (`met`). `AllStored` and `Accuracy(x)` (Nichani, Lee and Bietti's protocol) take the
top-1 test, the target above every competitor: the fused loss computes it, and the float64
margins decide it, so no score matrix is formed for them. Another criterion (the tail average of
the listwise scores, docs/science.md 2.6, say) is one more final subclass with its own `stored`
and `top1 = False`, and its entry in `criterion_of`: the trainer and the search then judge it
from the score matrix.
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
from ._validate import check_real
from .solvers import stored_fraction, to64


class AbstractCriterion(eqx.Module):
    """A success criterion on the stored associations of one instance."""

    # whether `stored` is the top-1 test (then callers may use the fused loss's flags)
    top1: ClassVar[bool] = True

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

    def met(self, hits, n):
        return hits >= n

    def met64(self, cons, W, margin) -> np.ndarray:
        return np.asarray(margin) > 0


class Accuracy(AbstractCriterion):
    """At least a fraction `fraction` of the associations stored (`0 < fraction < 1`)."""

    fraction: float

    def __check_init__(self):
        check_real("accuracy", self.fraction, low=0.0, low_open=True, high=1.0)

    def met(self, hits, n):
        return hits >= self.fraction * n

    def met64(self, cons, W, margin) -> np.ndarray:
        return stored_fraction(cons, W) >= self.fraction


def criterion_of(accuracy: float) -> AbstractCriterion:
    """The criterion a `TrainConfig.accuracy` names: 1.0 all stored, below it a fraction."""
    return AllStored() if accuracy == 1.0 else Accuracy(float(accuracy))
