"""The floor: plain batched ancestral sampling, with no constraint and no SMC.

`lm_floor` is what any sampler of `n` sequences of `steps` tokens from a causal LM
must at least do: one prompt forward, then one forward of `n` new tokens per step
over a KV cache, a softmax and a categorical draw per row. `row_floor` is the same
loop for a synthetic LM whose next-token logits cost nothing (a fixed row), so only
the draws remain.

The draw is the cheapest exact one: inverse CDF, one uniform per row against the
row's cumulative sum (`torch.searchsorted`). `torch.multinomial`, which
`transformers`' `generate` uses, draws one exponential per vocabulary entry and on
a CPU costs more than the forward of a small model; with it the floor would hide
that much overhead (`draw="multinomial"` measures that variant).
"""

from __future__ import annotations

import functools
import inspect
import time

import torch
from transformers import DynamicCache


def _draw(probs: torch.Tensor, gen: torch.Generator, how: str, cdf: torch.Tensor | None = None) -> torch.Tensor:
    """One inverse-CDF (or multinomial) draw per row of `probs` (the cumulative sums
    written into `cdf` when given)."""
    if how == "multinomial":
        return torch.multinomial(probs, 1, generator=gen)
    cdf = torch.cumsum(probs, dim=-1, out=cdf) if cdf is not None else probs.cumsum(dim=-1)
    u = torch.rand(probs.shape[0], 1, generator=gen, dtype=cdf.dtype) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).clamp_(max=probs.shape[1] - 1)


def clocked(fn, add):
    """`fn`, with the seconds of each call passed to `add` (its signature kept)."""

    @functools.wraps(fn)
    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            add(time.perf_counter() - start)

    return timed


class ForwardClock:
    """Seconds spent inside `model.forward` (wrapped on the instance, its signature
    kept, so `lm_floor` still finds the model's cache argument)."""

    def __init__(self, model):
        self.seconds = 0.0
        model.forward = clocked(model.forward, self._add)

    def _add(self, seconds: float) -> None:
        self.seconds += seconds


@torch.no_grad()
def lm_floor(model, prompt_ids: list[int], n: int, steps: int, seed: int, draw: str = "inverse_cdf") -> int:
    """Sample `n` sequences of `steps` tokens after `prompt_ids`; returns `n · steps`."""
    gen = torch.Generator().manual_seed(seed)
    cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    ids = torch.tensor([prompt_ids] * n)
    out = model(ids, use_cache=True, **{cache_arg: DynamicCache()})
    for step in range(steps):
        tokens = _draw(torch.softmax(out.logits[:, -1].float(), dim=-1), gen, draw)
        if step + 1 < steps:
            states = getattr(out, "cache", None)
            states = out.past_key_values if states is None else states
            out = model(tokens, use_cache=True, **{cache_arg: states})
    return n * steps


@torch.no_grad()
def row_floor(logits: torch.Tensor, n: int, steps: int, seed: int, draw: str = "inverse_cdf") -> int:
    """Draw `n` tokens per step from `softmax(logits)` for `steps` steps; returns `n · steps`.

    The probabilities and their cumulative sums are written into two blocks made once:
    fresh blocks of 128k-token rows (5 MB for 10 rows) faulted on every page in some
    processes, depending on the allocator's heap, and the floor's time moved 2.6× with
    it."""
    gen = torch.Generator().manual_seed(seed)
    block = logits.float().expand(n, -1)
    probs, cdf = torch.empty(block.shape), torch.empty(block.shape)
    for _ in range(steps):
        _draw(torch.softmax(block, dim=-1, out=probs), gen, draw, cdf)
    return n * steps
