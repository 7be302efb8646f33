"""How many torch intra-op threads a backend's evaluations use.

A small model's operations on the CPU take microseconds, and torch's OpenMP team
makes each of them wait until every thread of the team has been scheduled: on a
machine with more runnable jobs than cores, two threads turn a layer norm of a
10 × 128 batch from microseconds into milliseconds. So a small CPU model evaluates on
one thread (`default_threads`), and the process's own count is restored after each
evaluation (`intra_op_threads`). The thread count changes no result beyond float
rounding.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch

#: CPU models with at most this many parameters (and buffers) evaluate on one thread by default.
SMALL_MODEL_PARAMS = 16_000_000

#: torch's own `set_num_threads`. vLLM's CPU worker replaces it, for the whole process,
#: with a function that only logs a warning (a thread count changed after its threads
#: are bound would break its attention kernels); `intra_op_threads` then leaves the
#: count alone instead of logging that warning twice per evaluation.
_TORCH_SET_NUM_THREADS = torch.set_num_threads


def default_threads(model: Any) -> int | None:
    """The default intra-op thread count of a torch model's evaluations: 1 for a model on
    the CPU with at most `SMALL_MODEL_PARAMS` parameters and buffers, else None
    (torch's own setting, `torch.get_num_threads()`, left as it is)."""
    if getattr(getattr(model, "device", None), "type", "cpu") != "cpu":
        return None
    count = sum(t.numel() for t in list(model.parameters()) + list(model.buffers()))
    return 1 if count <= SMALL_MODEL_PARAMS else None


@contextmanager
def intra_op_threads(n: int | None) -> Iterator[None]:
    """Run the block with `n` torch intra-op threads (None, the count already set, or a
    `torch.set_num_threads` replaced by another library: unchanged), then restore the
    process's count."""
    before = torch.get_num_threads()
    if n is None or n == before or torch.set_num_threads is not _TORCH_SET_NUM_THREADS:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


__all__ = ["SMALL_MODEL_PARAMS", "default_threads", "intra_op_threads"]
