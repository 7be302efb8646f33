"""The 0.4.1 import path of small shared helpers; it only re-exports them from their homes:
lazy weights (`weights`), batched draws (`draw`), batching errors (`window`) and
unit flattening (`sampler.unit`, loaded on first access: this module sits below
`sampler/`), and the backend's `Token` (a token id with its bytes), which 0.4.1
exported here."""

from __future__ import annotations

from genlm.control._lazy import lazy_exports
from genlm.control.draw import DRAW_METHODS, Draw, counting_readbacks, draw_from, set_draw_method
from genlm.control.weights import LazyWeights, logsumexp
from genlm.control.window import BatchAbandoned

__getattr__, _lazy_dir = lazy_exports(__name__, {"flatten_units": "genlm.control.sampler.unit", "Token": "genlm.backend.tokenization.token"})


def __dir__() -> list:
    return sorted({*globals(), *_lazy_dir()})


__all__ = [
    "BatchAbandoned",
    "DRAW_METHODS",
    "Draw",
    "counting_readbacks",
    "LazyWeights",
    "draw_from",
    "flatten_units",  # noqa: F822  (served by __getattr__)
    "logsumexp",
    "set_draw_method",
    "Token",  # noqa: F822  (served by __getattr__)
]
