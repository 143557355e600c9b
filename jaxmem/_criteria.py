"""What counts as stored: a criterion on an instance's associations, one concept for the
trainer's early stop, its results and the threshold search's float64 judgement.

An association `mu` is stored when its own target outscores all its competitors. `AllStored`
asks it of every association (the capacity's criterion); `Accuracy(x)` of a fraction `x` of
them (Nichani, Lee and Bietti's protocol). Another criterion (a tail average of the listwise
scores, say) is one more final subclass and its entry in `criterion_of`.
"""

from __future__ import annotations

import abc

import equinox as eqx
import numpy as np

from ._validate import check_real
from .solvers import stored_fraction


class AbstractCriterion(eqx.Module):
    """A success criterion on the stored associations of one instance."""

    @abc.abstractmethod
    def met(self, hits, n):
        """Whether `hits` stored associations out of `n` meet it (traced or numpy arrays)."""

    @abc.abstractmethod
    def met64(self, cons, W, margin) -> np.ndarray:
        """The float64 judgement of a batch of memories `W` on their constraints `cons`, given
        `margin`, `verify`'s float64 normalised minimum margins: a boolean per instance."""


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
