"""Rows held as NumPy arrays on the host or as torch tensors on a device.

A row of log weights stays where the potential that made it put it: a language
model's rows stay on the model's device (a GPU for real models), a potential that
returns NumPy keeps NumPy. This module holds the few operations the framework needs
on both kinds, and `to_host`, the one way a tensor's values come back to the host:
it counts each read-back, so tests can prove how many a step makes (on a GPU each
one is a synchronisation of the host with the device).

Conventions: a tensor row is float32 (half-precision rows are upcast once, float64
rows stay float64); a NumPy row is float64.
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

NEG_INF = float("-inf")


def _torch() -> Any:
    """The torch module when it is imported (a tensor cannot exist before that)."""
    return sys.modules.get("torch")


def is_tensor(x: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def as_row_tensor(x: Any) -> Any:
    """A tensor as a row type: half precision and integers upcast to float32."""
    torch = _torch()
    if x.dtype in (torch.float32, torch.float64):
        return x
    return x.to(torch.float32)


def place(x: Any) -> str:
    """Where a row lives: `"numpy"`, or the tensor's device (`"cpu"`, `"cuda:0"`)."""
    return str(x.device) if is_tensor(x) else "numpy"


def like(x: Any, ref: Any) -> Any:
    """`x` as the same kind of array as `ref`: a tensor on `ref`'s device with its
    float dtype when `ref` is a tensor (one host-to-device copy), else NumPy float64."""
    if is_tensor(ref):
        torch = _torch()
        if is_tensor(x):
            return x if (x.device == ref.device and x.dtype == ref.dtype) else x.to(ref.device, ref.dtype)
        x = np.asarray(x)
        # a read-only view (a `stack` of rows) is copied: torch cannot share it
        to_tensor = torch.as_tensor if x.flags.writeable else torch.tensor
        return to_tensor(x, dtype=ref.dtype, device=ref.device)
    return to_host(x) if is_tensor(x) else x


def match(a: Any, b: Any) -> tuple[Any, Any]:
    """Two rows (or blocks) as one kind: a tensor wins over NumPy, the wider float
    dtype over the narrower; the NumPy side moves to the tensor's device."""
    ta, tb = is_tensor(a), is_tensor(b)
    if not ta and not tb:
        return a, b
    if ta and tb:
        if a.device != b.device:
            raise ValueError(f"cannot combine rows on different devices ({a.device} and {b.device})")
        if a.dtype != b.dtype:
            torch = _torch()
            dt = torch.promote_types(a.dtype, b.dtype)
            return a.to(dt), b.to(dt)
        return a, b
    return (a, like(b, a)) if ta else (like(a, b), b)


class _Counter(threading.local):
    def __init__(self):
        self.count = 0


_readbacks = _Counter()


def to_host(x: Any) -> np.ndarray:
    """A tensor's values as a float64 NumPy array (one counted read-back); NumPy
    input is returned as float64 without a copy when it already is."""
    if is_tensor(x):
        _readbacks.count += 1
        # copy, then widen on the host (MPS has no float64)
        return x.detach().cpu().to(_torch().float64).numpy()
    return np.asarray(x, dtype=np.float64)


def read_back(x: Any) -> Any:
    """A tensor's values on the host (one counted read-back), keeping its dtype."""
    _readbacks.count += 1
    return x.detach().cpu()


def readback_count() -> int:
    """Read-backs of tensor values to the host made so far in this thread."""
    return _readbacks.count


@contextmanager
def counting_readbacks() -> Iterator["ReadbackCount"]:
    """Count the tensor read-backs made in this thread inside the block:
    `with counting_readbacks() as n: ...; n.value`."""
    out = ReadbackCount(_readbacks.count)
    try:
        yield out
    finally:
        out.stop()


class ReadbackCount:
    """The number of read-backs since `counting_readbacks` opened (`value`)."""

    def __init__(self, start: int):
        self._start = start
        self._end: int | None = None

    def stop(self) -> None:
        self._end = _readbacks.count

    @property
    def value(self) -> int:
        end = _readbacks.count if self._end is None else self._end
        return end - self._start


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def stack(rows: list) -> Any:
    """Rows as one 2-D block, NumPy rows on the host and tensor rows on their
    device: a (read-only) view when they lie back to back in one buffer, as the rows
    of `Potential.rows_to_weights` do, else a stacked copy."""
    if rows and is_tensor(rows[0]):
        from genlm.control._torch_rows import stacked

        return stacked(rows)
    first = rows[0]
    base = first.base
    if base is not None and first.dtype in _FLOATS and first.flags.c_contiguous:
        start, stride = first.ctypes.data, first.nbytes
        if all(
            r.base is base and r.flags.c_contiguous and r.shape == first.shape and r.dtype == first.dtype
            and r.ctypes.data == start + i * stride
            for i, r in enumerate(rows)
        ):
            return np.lib.stride_tricks.as_strided(
                first, shape=(len(rows), len(first)), strides=(stride, first.itemsize), writeable=False
            )
    return np.stack(rows)


def masked(allowed: Any, w: Any) -> Any:
    """`w` where `allowed`, `-inf` elsewhere (on `w`'s device)."""
    if is_tensor(w):
        return w.where(allowed, NEG_INF)
    return np.where(allowed, w, NEG_INF)


def mask_like(allowed: np.ndarray, like: Any) -> Any:
    """A host bool block, on the device of `like` when that is a tensor."""
    if not is_tensor(like):
        return allowed
    return _torch().as_tensor(allowed, device=like.device)


def index_for(idx: np.ndarray, x: Any, cache: dict) -> Any:
    """An integer index array usable on `x`: itself for NumPy, a tensor on `x`'s
    device (copied there once per device and kept in `cache`)."""
    if not is_tensor(x):
        return idx
    key = (id(idx), str(x.device))
    got = cache.get(key)
    if got is None:
        got = cache[key] = _torch().as_tensor(idx, device=x.device)
    return got


def id_runs(ids: np.ndarray, max_runs: int) -> list[tuple[int, int, int]] | None:
    """`ids` as runs of consecutive ids, `(first id, stop id, position in ids)`, or None
    when there are more than `max_runs` of them (a model's vocabulary is its ids minus a
    few EOS ids: a handful of runs, each copied as one slice instead of gathered)."""
    if not len(ids):
        return []
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    if len(breaks) >= max_runs:
        return None
    starts = [0, *breaks.tolist()]
    stops = [*breaks.tolist(), len(ids)]
    return [(int(ids[a]), int(ids[a]) + (b - a), a) for a, b in zip(starts, stops)]


def logsumexp_rows(x: Any, dim: int | None = None) -> Any:
    """`log Σ exp(x)` over `dim` (all entries when None) for a tensor, `-inf` for
    rows of `-inf`; the result stays on the device."""
    torch = _torch()
    if dim is None:
        x = x.reshape(-1)
        dim = 0
    if x.shape[dim] == 0:
        return torch.full(x.shape[:dim] + x.shape[dim + 1 :], NEG_INF, dtype=x.dtype, device=x.device)
    return torch.logsumexp(x, dim=dim)


def fold_nan_tensor(x: Any) -> Any:
    """Map NaN entries of a tensor to `-inf` (one comparison on the device).

    A `+inf` entry is not checked here: the draw reads back each row's peak, where a
    `+inf` row shows, and raises there.
    """
    torch = _torch()
    return torch.nan_to_num(x, nan=NEG_INF, posinf=float("inf"), neginf=NEG_INF)


__all__ = [
    "id_runs",
    "is_tensor",
    "as_row_tensor",
    "place",
    "like",
    "match",
    "to_host",
    "read_back",
    "readback_count",
    "counting_readbacks",
    "ReadbackCount",
    "logsumexp_rows",
    "stack",
    "masked",
    "mask_like",
    "index_for",
    "fold_nan_tensor",
]
