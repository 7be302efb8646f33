"""Tensor rows as one block: the helpers that `_device` (stacking rows),
`_draw_torch` (drawing from them) and the HF backend (rows where its forward left
them) share, so none imports another.

Importing this module imports torch; `_device` imports it only once a row is a
tensor.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch


def block_positions(rows: Sequence[torch.Tensor]) -> tuple[torch.Tensor, np.ndarray | None]:
    """`(block, positions)` with `block[positions[i]]` equal to `rows[i]`: the 2-D block
    the rows are all whole rows of (no copy), else their stacked copy. `positions` is
    None where row `i` of `block` is `rows[i]`: the stacked copy, or a view of the
    block when the rows are consecutive rows of it, in order."""
    first = rows[0]
    base = first._base
    if (
        base is not None
        and base.dim() == 2
        and base.is_contiguous()
        and first.dim() == 1
        and base.shape[1] == first.shape[0]
        and all(r._base is base and r.is_contiguous() for r in rows)
    ):
        step = first.shape[0] * first.element_size()
        origin = base.data_ptr()
        offsets = [r.data_ptr() - origin for r in rows]
        if all(o % step == 0 for o in offsets):  # whole rows, not views across two
            at = [o // step for o in offsets]
            start = at[0]
            if at == list(range(start, start + len(rows))):  # (Python lists: a few rows)
                return base[start : start + len(rows)], None
            return base, np.array(at, dtype=np.intp)
    return torch.stack(list(rows)), None


def rows_at(block: torch.Tensor, positions: np.ndarray) -> torch.Tensor:
    """Rows `positions` of `block` as a new block (one gather on its device)."""
    return block.index_select(0, torch.as_tensor(positions, device=block.device))


def tensor_block(rows: Sequence[torch.Tensor]) -> torch.Tensor:
    """The rows as one `(n, V)` tensor: a view when they are consecutive rows of one
    block (as `Potential.rows_to_weights` makes them), else a copy."""
    block, positions = block_positions(rows)
    return block if positions is None else rows_at(block, positions)


def stacked(rows: Sequence[Any]) -> torch.Tensor:
    """`tensor_block` of the rows, each folded onto the first one's device and dtype."""
    first = rows[0]
    same = [r if (r.device == first.device and r.dtype == first.dtype) else r.to(first.device, first.dtype) for r in rows]
    return tensor_block(same)


__all__ = ["tensor_block", "stacked"]
