"""Tensor rows as one block: the two helpers that `_device` (stacking rows) and
`_draw_torch` (drawing from them) share, so neither imports the other.

Importing this module imports torch; `_device` imports it only once a row is a
tensor.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch


def tensor_block(rows: Sequence[torch.Tensor]) -> torch.Tensor:
    """The rows as one `(n, V)` tensor: a view when they are consecutive rows of one
    block (as `Potential.rows_to_weights` makes them), else a stacked copy."""
    first = rows[0]
    base = first._base
    if (
        base is not None
        and base.dim() == 2
        and base.is_contiguous()
        and base.shape[1] == first.shape[0]
        and all(r._base is base and r.is_contiguous() for r in rows)
    ):
        size = first.shape[0]
        start, step = first.data_ptr(), size * first.element_size()
        offset = (start - base.data_ptr()) // step
        if all(r.data_ptr() == start + i * step for i, r in enumerate(rows)) and offset + len(rows) <= base.shape[0]:
            return base[offset : offset + len(rows)]
    return torch.stack(list(rows))


def stacked(rows: Sequence[Any]) -> torch.Tensor:
    """`tensor_block` of the rows, each folded onto the first one's device and dtype."""
    first = rows[0]
    same = [r if (r.device == first.device and r.dtype == first.dtype) else r.to(first.device, first.dtype) for r in rows]
    return tensor_block(same)


__all__ = ["tensor_block", "stacked"]
