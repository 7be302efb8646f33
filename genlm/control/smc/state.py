"""The data of an SMC run: the population state and what one step proposes.

Both are frozen: the kernel (`genlm.control.smc.kernel`) maps a state and a step's
proposals to a new state, and never changes one in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from genlm.control.smc.resampling import ess, log_mean_exp


def _frozen(values: Any, dtype: Any) -> np.ndarray:
    out = np.array(values, dtype=dtype)
    out.setflags(write=False)
    return out


def ends_with(unit: Any, eos: Any) -> bool:
    """Whether `unit` closes a sequence: it is `eos`, or a unit (list) ending in `eos`."""
    if isinstance(unit, list):
        return bool(unit) and unit[-1] == eos
    return unit == eos


def closed(context: tuple, eos: Any) -> tuple:
    """`context` ending in EOS: unchanged when its last unit ends in `eos`, else `context + (eos,)`."""
    if context and ends_with(context[-1], eos):
        return context
    return (*context, eos)


@dataclass(frozen=True)
class PopulationState:
    """The particles of an SMC run after some steps.

    Particle `i` has context `contexts[i]` (a tuple of units), log weight
    `log_weights[i] = start + Σ_s logw_s + twists[i]` (the twist is the critic's
    score of the context, 0 without a critic), and `done[i]` once it has finished.
    The arrays are read-only.

    Attributes:
        contexts: one tuple of units per particle.
        log_weights: `logw_i`, float64.
        twists: `critic.score(x_i)` of the current context (0.0 without a critic).
        done: whether each particle has finished (its context then ends in EOS, unless
            its weight is zero: a particle killed before it ended does not).
    """

    contexts: tuple[tuple, ...]
    log_weights: np.ndarray
    twists: np.ndarray
    done: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.contexts)
        object.__setattr__(self, "contexts", tuple(self.contexts))
        object.__setattr__(self, "log_weights", _frozen(self.log_weights, np.float64))
        object.__setattr__(self, "twists", _frozen(self.twists, np.float64))
        object.__setattr__(self, "done", _frozen(self.done, bool))
        shapes = {a.shape for a in (self.log_weights, self.twists, self.done)}
        if shapes != {(n,)}:
            raise ValueError(f"a population of {n} contexts needs arrays of shape ({n},), got {sorted(shapes)}")

    @classmethod
    def _owned(cls, contexts: tuple, log_weights: np.ndarray, twists: np.ndarray, done: np.ndarray) -> "PopulationState":
        """A state over arrays the caller has just made and hands over (the kernel's
        path): they are frozen in place instead of copied."""
        state = object.__new__(cls)
        for name, value in (("contexts", contexts), ("log_weights", log_weights), ("twists", twists), ("done", done)):
            if isinstance(value, np.ndarray):
                value.setflags(write=False)
            object.__setattr__(state, name, value)
        return state

    @property
    def n(self) -> int:
        """Number of particles."""
        return len(self.contexts)

    @property
    def log_ml(self) -> float:
        """`log(Σ_i exp(logw_i) / n)`: the estimate of `log Z` (Del Moral 2004)."""
        return log_mean_exp(self.log_weights)

    @property
    def ess(self) -> float:
        """Effective sample size `1 / Σ W_i²`, `W = normalized weights`."""
        return ess(self.log_weights)

    @property
    def live(self) -> np.ndarray:
        """Indices of the particles that have not finished."""
        return np.flatnonzero(~self.done)


class Proposals(NamedTuple):
    """What one step proposes for the live particles, row `j` for the `j`-th live one.

    Attributes:
        contexts: the extended contexts (EOS appended where the particle ended; a
            context the sampler had no unit for is unchanged).
        logws: the sampler's log weight increments (forced-EOS corrections included),
            before the twist.
        twists: the critic's score of each extended context; the old twist where
            `scored` is false.
        scored: where the critic was asked (the increment was above `-inf`).
        ends: where the extended context ends in EOS.
        causes: where the step gave weight zero (or NaN), its `deaths.Cause`; None
            elsewhere (empty: not classified).
    """

    contexts: list[tuple]
    logws: np.ndarray
    twists: np.ndarray
    scored: np.ndarray
    ends: np.ndarray
    causes: tuple = ()


__all__ = ["PopulationState", "Proposals", "closed", "ends_with"]
