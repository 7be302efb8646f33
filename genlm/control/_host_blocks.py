"""Large host blocks, reused once nothing reads them.

A step over a real vocabulary writes blocks of megabytes on the host: a forward's
next-token rows (10 rows of 131k float32 are 5 MB) and the same rows in the
potential's order. The HF backend's prefix cache keeps a forward's rows until its
byte budget evicts them, so such blocks live for several steps, and their sizes move
with the number of distinct contexts. The C allocator then serves new blocks from
fresh pages while freed ones lie in holes of other sizes: the process's memory grew
by about 100 MB per run of 10 particles on the 131k tekken model until it settled
some 600 MB higher, and every fresh page cost a page fault (about 1 ms per step).
Blocks above the allocator's map threshold (at most 32 MB: 64 rows of 128k float32)
are mapped afresh on every allocation whatever the heap holds.

`HostBlocks` keeps the NumPy arrays under the CPU tensors it hands out
(`torch.from_numpy`). A block is free when no tensor, view or array made from it is
alive: every torch view holds the storage, which holds the array, and every NumPy
view holds it as its base, so the array's reference count shows it. A request is
served by the smallest free block of the same width and dtype with room for its
rows (at most twice as many), else by a new block of exactly its rows. At most
`idle` free blocks per width and dtype are kept; the others are let go.

Small blocks (under `MIN_BYTES`) and dtypes NumPy has no type for come from
`torch.empty`: the allocator serves those well. So does every block on an interpreter
running without the global lock, whose reference counts are not read this way.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import torch

#: Blocks smaller than this come from `torch.empty`.
MIN_BYTES = 1 << 20
#: The most blocks kept per (width, dtype), free or not; past it, new blocks are not kept.
MAX_KEPT = 256


def _counts(arrays: list) -> list[int]:
    """The reference counts of `arrays`' items as seen from here."""
    return [sys.getrefcount(a) for a in arrays]


#: The count of an array that only a `HostBlocks` list holds (measured the same way,
#: so it holds on any interpreter that counts consistently).
_FREE = _counts([np.empty(1)])[0]
#: Whether blocks are kept at all (not on a free-threaded interpreter).
KEEPS = getattr(sys, "_is_gil_enabled", lambda: True)()


class HostBlocks:
    """Reusable `[rows, width]` host blocks (see the module doc).

    Args:
        idle: the most free blocks kept per width and dtype.
    """

    def __init__(self, idle: int = 2):
        self.idle = idle
        self._kept: dict[tuple, list[np.ndarray]] = {}
        self._lock = threading.Lock()
        self.made = 0  # blocks allocated and kept
        self.reused = 0  # requests served by a kept block

    def empty(self, rows: int, width: int, dtype: torch.dtype) -> torch.Tensor:
        """An uninitialised contiguous `[rows, width]` CPU tensor of `dtype`."""
        if rows * width * dtype.itemsize < MIN_BYTES or dtype not in _NUMPY or not KEEPS:
            return torch.empty(rows, width, dtype=dtype)
        with self._lock:
            kept = self._kept.setdefault((width, dtype), [])
            counts = _counts(kept)
            free = [i for i, c in enumerate(counts) if c <= _FREE]
            fits = [i for i in free if rows <= len(kept[i]) <= 2 * rows]
            if fits:
                block = kept[min(fits, key=lambda i: len(kept[i]))]
                self.reused += 1
            else:
                block = np.empty((rows, width), dtype=_NUMPY[dtype])
                if len(kept) < MAX_KEPT:
                    kept.append(block)
                    self.made += 1
            _let_go(kept, [i for i in free if kept[i] is not block], self.idle)
        return torch.from_numpy(block[:rows])

    def trim(self) -> None:
        """Let go the free blocks past `idle` of every width and dtype (the HF backend
        calls it when its cache is cleared, whose rows were most of them)."""
        with self._lock:
            for kept in self._kept.values():
                _let_go(kept, [i for i, c in enumerate(_counts(kept)) if c <= _FREE], self.idle)

    def nbytes(self) -> int:
        """The bytes of the blocks kept (free or not)."""
        with self._lock:
            return sum(a.nbytes for kept in self._kept.values() for a in kept)

    def clear(self) -> None:
        """Let every kept block go (blocks in use stay valid; they are not reused)."""
        with self._lock:
            self._kept.clear()


def _let_go(kept: list, free: list[int], idle: int) -> None:
    """Drop from `kept` the free blocks at positions `free` past the first `idle`."""
    for i in sorted(free[idle:], reverse=True):
        del kept[i]


_NUMPY = {
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.float16: np.float16,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.bool: np.bool_,
}

#: The blocks shared by the backends' host rows (HF and vLLM) and `next_token_rows`.
HOST_BLOCKS = HostBlocks()


def kept_log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """`torch.log_softmax(logits, dim=-1)` of a `[rows, V]` block, written into a kept
    block when it is on the CPU."""
    if logits.device.type != "cpu":
        return torch.log_softmax(logits, dim=-1)
    return torch.log_softmax(logits, dim=-1, out=HOST_BLOCKS.empty(*logits.shape, logits.dtype))


def kept_stack(rows: list) -> torch.Tensor:
    """`torch.stack(rows)` of 1-D rows, into a kept block when they are on the CPU."""
    if not rows or rows[0].device.type != "cpu":
        return torch.stack(rows)
    return torch.stack(rows, out=HOST_BLOCKS.empty(len(rows), rows[0].shape[-1], rows[0].dtype))


__all__ = ["HOST_BLOCKS", "HostBlocks", "MIN_BYTES", "kept_log_softmax", "kept_stack"]
