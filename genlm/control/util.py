"""The 0.4.1 import path of small shared helpers; it only re-exports them from their homes:
lazy weights (`weights`), batched draws (`draw`), batching errors (`window`) and
unit flattening (`sampler.unit`)."""

from __future__ import annotations

from genlm.control.draw import DRAW_METHODS, Draw, counting_readbacks, draw_from, set_draw_method
from genlm.control.sampler.unit import flatten_units
from genlm.control.weights import LazyWeights, logsumexp
from genlm.control.window import BatchAbandoned

__all__ = [
    "BatchAbandoned",
    "DRAW_METHODS",
    "Draw",
    "counting_readbacks",
    "LazyWeights",
    "draw_from",
    "flatten_units",
    "logsumexp",
    "set_draw_method",
]
