"""The floor: plain batched ancestral sampling, with no constraint and no SMC.

`lm_floor` is what any sampler of `n` sequences of `steps` tokens from a causal LM
must at least do: one prompt forward, then one forward of `n` new tokens per step
over a KV cache, a softmax and a categorical draw per row. `row_floor` is the same
loop for a synthetic LM whose next-token logits cost nothing (a fixed row), so only
the draws remain.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache


@torch.no_grad()
def lm_floor(model, prompt_ids: list[int], n: int, steps: int, seed: int) -> int:
    """Sample `n` sequences of `steps` tokens after `prompt_ids`; returns `n · steps`."""
    gen = torch.Generator().manual_seed(seed)
    cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    ids = torch.tensor([prompt_ids] * n)
    out = model(ids, use_cache=True, **{cache_arg: DynamicCache()})
    for step in range(steps):
        logprobs = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
        tokens = torch.multinomial(logprobs.exp(), 1, generator=gen)
        if step + 1 < steps:
            states = getattr(out, "cache", None)
            states = out.past_key_values if states is None else states
            out = model(tokens, use_cache=True, **{cache_arg: states})
    return n * steps


@torch.no_grad()
def row_floor(logits: torch.Tensor, n: int, steps: int, seed: int) -> int:
    """Draw `n` tokens per step from `softmax(logits)` for `steps` steps; returns `n · steps`."""
    gen = torch.Generator().manual_seed(seed)
    block = logits.float().expand(n, -1)
    for _ in range(steps):
        torch.multinomial(torch.softmax(block, dim=-1), 1, generator=gen)
    return n * steps
