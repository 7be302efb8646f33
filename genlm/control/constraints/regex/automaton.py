"""What every byte automaton here shares: the byte alphabet (`N_BYTES` symbols, EOS
after them) and the reading of a semiring weight as a real number, used by the
arrays of `fsa/` and the Earley tables of `cfg/`."""

from __future__ import annotations

from typing import Any

import numpy as np

N_BYTES = 256


def weight_to_float(w: Any) -> float:
    """The real value of a semiring weight (Float, Real, Log, Boolean).

    Raises:
        TypeError: for a semiring without a real-valued reading (MaxPlus, Entropy, ...).
    """
    from genlm.grammar.semiring import Boolean, Log, Real

    if isinstance(w, (int, float, np.floating, np.integer)) and not isinstance(w, bool):
        return float(w)
    if isinstance(w, Log):
        return float(np.exp(w.score))
    if isinstance(w, (Real, Boolean)):
        return float(w.score)
    raise TypeError(f"cannot read a weight of type {type(w).__name__} as a real number")


__all__ = ["N_BYTES", "weight_to_float"]
