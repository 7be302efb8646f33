"""A potential with one fixed row after every context, as a torch tensor (what a
model on a device hands over) or as NumPy."""

from __future__ import annotations

import numpy as np
import torch

from genlm.control import Potential


class FixedRow(Potential):
    """`row` (log weights over `len(row) - 1` integer tokens and EOS) after every
    context: a float32 tensor when `tensor`, else float64 NumPy. Every context has
    weight one."""

    def __init__(self, row, tensor: bool = True):
        super().__init__(list(range(len(row) - 1)))
        self.row = torch.tensor(np.asarray(row), dtype=torch.float32) if tensor else np.asarray(row, dtype=np.float64)

    @classmethod
    def random(cls, n: int, tensor: bool = True, seed: int = 0) -> "FixedRow":
        """A standard normal row over `n` tokens and EOS."""
        return cls(np.random.default_rng(seed).normal(size=n + 1), tensor)

    async def prefix(self, context):
        return 0.0

    async def complete(self, context):
        return 0.0

    async def logw_next(self, context):
        return self.make_lazy_weights(self.row)

    async def batch_logw_next(self, contexts):
        if isinstance(self.row, torch.Tensor):
            return self.rows_to_weights(self.row.repeat(len(contexts), 1))
        return self.rows_to_weights(np.tile(self.row, (len(contexts), 1)))
