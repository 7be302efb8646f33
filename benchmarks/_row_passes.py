"""Count the passes over the vocabulary that torch kernels make (for `passes.py` and
`gpu_check.py`).

`RowPasses(v)` is a `TorchDispatchMode`: every aten kernel that runs inside it (the
forward, the framework's row code, the draw; operators included, since the mode sees
what the dispatcher runs) is looked at once. A tensor *spans the vocabulary* when one
of its dimensions has at least `0.9 · v` entries (the model's logits, a row over
`vocab_eos`, a mask, the LM head's weight). A kernel makes

    rows(k) = numel(t) / (the spanning dimension of t)

passes, `t` its largest spanning output, or, for a kernel whose outputs are short (a
reduction: `amax`, `sum`, `logsumexp`), its largest spanning input. Indexed reads
(`gather`, `index_select`, `searchsorted`, `embedding`, …) whose output is short read
O(n) or O(log V) entries and make none; views make none. An `(n, V)` block through one
kernel is `n` row passes, so `passes / particle-steps` is the number of O(V) kernels
each particle meets per step. `bytes` adds the sizes of the distinct spanning tensors
each kernel reads or writes: the row traffic.

A fused kernel (`_softmax`, `_log_softmax`) counts as one pass although it reads its
input more than once; the floor's softmax is counted the same way. NumPy work on the
host (the `rows="host"` path, the AWRS search on host rows) is not seen here.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

_INDEXED = {
    "gather",
    "index_select",
    "searchsorted",
    "embedding",
    "index",
    "take",
    "select",
    "slice",
    "_local_scalar_dense",
    "item",
    "nonzero",
    "masked_select",
}
_FREE = {
    "empty",
    "empty_strided",
    "empty_like",
    "new_empty",
    "new_empty_strided",
    "detach",
    "alias",
    "lift_fresh",
    "_unsafe_view",
}


def _name(func: Any) -> str:
    return func._schema.name.split("::")[-1]


def _site() -> str:
    """The innermost genlm.control frame calling into torch (for `RowPasses.where`)."""
    import traceback

    for frame in reversed(traceback.extract_stack()):
        if "genlm/control" in frame.filename or "benchmarks/floor" in frame.filename:
            return f"{frame.filename.split('/')[-1]}:{frame.lineno} {frame.name}"
    return "?"


class RowPasses(TorchDispatchMode):
    """Counts O(V) kernels, their row passes and bytes (see the module docstring).

    Attributes:
        passes: row passes made (an `(n, V)` kernel adds `n`).
        kernels: kernels with a spanning tensor (each is one launch on a device).
        bytes: bytes of spanning tensors read or written.
        by_op: row passes per aten op name.
    """

    def __init__(self, v: int):
        super().__init__()
        self.v = int(v)
        self.passes = 0.0
        self.kernels = 0
        self.bytes = 0
        self.by_op: Counter = Counter()
        self.where: Counter | None = None  # set to a Counter to attribute passes to call sites

    def _span(self, t: torch.Tensor) -> int:
        """The entries of `t` per row of the vocabulary: a dimension of at least
        `0.9 · v`, or trailing dimensions whose product is within [0.9, 1.25] · v,
        the last at least 256 (a row viewed as blocks); 0 when `t` does not span the vocabulary."""
        big = [d for d in t.shape if d >= 0.9 * self.v]
        if big:
            return max(big)
        if not t.dim() or t.shape[-1] < 256:  # not a row in blocks (a key/value state)
            return 0
        p = 1
        for d in reversed(t.shape):
            p *= d
            if p >= 0.9 * self.v:
                return p if p <= 1.25 * self.v else 0
        return 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = _name(func)
        if func.is_view or name in _FREE:
            return out
        outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and self._span(t)]
        ins = [
            t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and self._span(t)
        ]
        if not outs and (not ins or name in _INDEXED):
            return out
        t = max(outs or ins, key=torch.Tensor.numel)
        rows = t.numel() / self._span(t)
        self.passes += rows
        self.kernels += 1
        self.by_op[name] += rows
        if self.where is not None:
            self.where[(name, _site())] += rows
        seen = set()
        for x in outs + ins:
            key = (x.data_ptr(), x.numel(), x.dtype)
            if key not in seen:
                seen.add(key)
                self.bytes += x.numel() * x.element_size()
        return out

    def summary(self, particle_steps: int) -> dict:
        """Per particle and step: row passes, kernels per step (not per particle:
        a batched kernel is one launch) and bytes."""
        k = max(particle_steps, 1)
        return {
            "passes": self.passes / k,
            "bytes": self.bytes / k,
            "top": ", ".join(
                f"{op} {n / k:.1f}" for op, n in self.by_op.most_common(12) if n / k >= 0.05
            ),
        }


class StepCount:
    """Counts a token sampler's particle-steps: the contexts its `batch_sample` got.

    `with StepCount(sampler) as s: ...; s.particle_steps`, the calls in `s.calls`.
    """

    def __init__(self, sampler: Any):
        self.sampler = sampler
        self.particle_steps = 0
        self.calls = 0

    def __enter__(self) -> "StepCount":
        inner = self.sampler.batch_sample

        async def counted(contexts, rngs):
            self.particle_steps += len(contexts)
            self.calls += 1
            return await inner(contexts, rngs)

        self.sampler.batch_sample = counted
        return self

    def __exit__(self, *exc: Any) -> None:
        del self.sampler.batch_sample


@torch.no_grad()
def floor_passes(logits: torch.Tensor, n: int, steps: int, v: int) -> dict:
    """`RowPasses` of plain decoding's per-step work on fixed logits (`floor.row_floor`,
    softmax and inverse-CDF draw), per row and step."""
    from floor import row_floor

    with RowPasses(v) as count:
        row_floor(logits, n, steps, seed=0)
    return count.summary(n * steps)


__all__ = ["RowPasses", "StepCount", "floor_passes"]
