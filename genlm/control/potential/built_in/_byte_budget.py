"""The token bound of a byte-level constraint from its fewest bytes to completion
(`fast_paths.TokensToFinish`), shared by the grammar and JSON coercions."""

from __future__ import annotations

from typing import Sequence

import numpy as np

INF = float("inf")


def token_rows(fewest: Sequence[float], accepted: Sequence[bool], lengths: np.ndarray) -> np.ndarray:
    """Per context and next token, `⌈max(0, L − |y|) / longest⌉` tokens after `y`
    (inf where the context is dead); EOS 0 where the context is accepted, else inf.
    Any completion after `y` reads at least `L − |y|` bytes, at most `longest` a token."""
    longest = max(int(lengths.max(initial=1)), 1)
    left = np.asarray(fewest, dtype=np.float64)[:, None] - lengths[None, :]
    with np.errstate(invalid="ignore"):
        rows = np.ceil(np.maximum(left, 0.0) / longest)
    rows[~np.isfinite(np.asarray(fewest, dtype=np.float64))] = INF
    eos = np.where(np.asarray(accepted, dtype=bool), 0.0, INF)
    return np.concatenate([rows, eos[:, None]], axis=1)


__all__ = ["token_rows"]
