"""What AWRS knows about a condition before searching: where its tokens sit in the
potential's vocabulary, and whether its values are Boolean.

The condition's vocabulary may be a subset of the potential's (a pruned coercion):
tokens outside it have weight zero, as in `potential * condition`, so every row is
read on the condition's `vocab_eos` (`Support.view`) and the search never draws them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from genlm.control._device import index_for
from genlm.control.draw import draw_many
from genlm.control.potential.base import Potential
from genlm.control.weights import NEG_INF, host_rows

BOOLEAN_ATOL = 1e-9  # a finite condition value farther than this from 0 is a weight


class Support:
    """The positions of the condition's `vocab_eos` in the potential's (and the
    proposal's) `vocab_eos`; None where the vocabularies are equal.

    Raises:
        ValueError: a condition token the potential (or the proposal) lacks.
    """

    def __init__(self, potential: Potential, condition: Potential, proposal: Potential | None):
        self.tokens = condition.vocab_eos
        self._on: dict = {}  # positions copied to each device
        self.potential = _positions("potential", potential, condition)
        self.proposal = None if proposal is None else _positions("proposal", proposal, condition)

    def view(self, row: Any, positions: np.ndarray | None) -> Any:
        """`row` (over another `vocab_eos`) read on the condition's `vocab_eos`."""
        return row if positions is None else row[..., index_for(positions, row, self._on)]


def _positions(name: str, outer: Potential, condition: Potential) -> np.ndarray | None:
    if outer.tables is condition.tables or outer.vocab_eos == condition.vocab_eos:
        return None
    if outer.eos != condition.eos:
        raise ValueError(f"the condition and the {name} end with different markers: {condition.eos!r}, {outer.eos!r}")
    lookup = outer.lookup
    missing = [x for x in condition.vocab if x not in lookup]
    if missing:
        raise ValueError(
            f"the condition's vocabulary must be a subset of the {name}'s: {len(missing)} of its "
            f"{len(condition.vocab)} tokens are not among the {name}'s {len(outer.vocab)} "
            f"(first: {missing[:3]!r}): different tokenizers"
        )
    return np.array([lookup[x] for x in condition.vocab_eos], dtype=np.intp)


def not_boolean(condition: Any, value: float) -> ValueError:
    """The error for a condition value that is neither 0 nor -inf."""
    return ValueError(
        f"AWRS needs a Boolean condition (log weights 0 or -inf), but {condition!r} gave "
        f"{value!r}; for a weighted constraint use direct_token_sampler(potential * condition)"
    )


def boolean_value(condition: Any, value: float) -> bool:
    """Whether a condition's `prefix`/`complete` value allows (0) or rejects (-inf).

    Raises:
        ValueError: any other value (a weighted condition; see `not_boolean`).
    """
    value = float(value)
    if value == NEG_INF:
        return False
    if abs(value) <= BOOLEAN_ATOL:
        return True
    raise not_boolean(condition, value)


def boolean_rows(condition: Any, rows: np.ndarray) -> np.ndarray:
    """The allowed mask of condition `logw_next` rows (0: allowed, -inf: not).

    Raises:
        ValueError: a value that is neither (NaN included).
    """
    rows = np.asarray(rows, dtype=np.float64)
    allowed = np.abs(rows) <= BOOLEAN_ATOL
    bad = ~allowed & ~(rows == NEG_INF)
    if bad.any():
        raise not_boolean(condition, float(rows[bad][0]))
    return allowed


def stack_rows(rows: list) -> np.ndarray:
    """The weights of `LazyWeights` rows as one float64 block on the host."""
    return np.stack(host_rows(rows))


async def draw_one(weights, target, rng):
    """One draw from `weights` (weighed under `target`) through the draw window."""
    return (await draw_many([weights], [rng], None if target is None else [target]))[0]


async def none() -> None:
    """An awaitable None (a missing call in a gather)."""
    return None


__all__ = ["Support", "boolean_rows", "boolean_value", "draw_one", "none", "not_boolean", "stack_rows"]
