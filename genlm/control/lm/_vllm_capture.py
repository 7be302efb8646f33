"""The vLLM backend's logits processor: it captures rows and hands held requests their tokens.

One class, `RowCapture`, takes both of vLLM's logits-processor interfaces: the
legacy V1 model runner's (`update_state(batch_update)`, `apply(logits)`, requests
keyed by batch index) and Model Runner V2's (`add_request(slot, params)`,
`apply(logits, ctx)`, requests keyed by a persistent slot that `ctx.idx_mapping_np`
maps to a logits row). vLLM instantiates it in whichever runner it picked.

At every step, `apply` stores `log_softmax(logits[row])` of each marked request
(`SamplingParams.extra_args[ROW_KEY]`) in `Capture.sink`, on the engine's device,
and removes it from `Capture.pending`. Once nothing is pending and a captured
request may continue (`Capture.holdable`), it calls `Capture.hold(rids)`, which
returns the token each continuing request is to take (the token SMC drew); the
row of every other token is set to -inf and the token's to 0, so the request's
greedy sampler (temperature 0) picks exactly that token, and vLLM appends it. A
request given no token samples freely and is aborted by the driver after the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from genlm.control._host_blocks import kept_log_softmax

#: The key of `SamplingParams.extra_args` that marks a request whose row is captured.
ROW_KEY = "genlm_control_row"


@dataclass
class Capture:
    """State shared by the logits processor (inside `engine.step()`) and the driver.

    Attributes:
        sink: request id -> its latest row.
        pending: the ids whose row the current pass still waits for.
        holdable: the ids that may be held (continued by a later query).
        hold: called inside `apply`, on the engine thread, with the ids captured at
            a step that completes a pass; returns `{request id: forced token}`.
    """

    sink: dict[str, torch.Tensor] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)
    holdable: set[str] = field(default_factory=set)
    hold: Callable[[list[str]], dict[str, int]] | None = None

    def process(self, logits: torch.Tensor, rows: list[int], rids: list[str]) -> torch.Tensor:
        """Capture the rows `rows` (logits rows of requests `rids`), then hold if due."""
        if not rows:
            return logits
        index = torch.tensor(rows, device=logits.device)
        lp = kept_log_softmax(logits.index_select(0, index).float())  # on the CPU, a kept block
        for j, rid in enumerate(rids):
            self.sink[rid] = lp[j]
            self.pending.discard(rid)
        if self.pending or self.hold is None or not self.holdable.intersection(rids):
            return logits
        forced = self.hold(rids)
        if forced:
            at = {rid: row for row, rid in zip(rows, rids)}
            pick = [(at[rid], tok) for rid, tok in forced.items() if rid in at]
            if pick:
                r = torch.tensor([p[0] for p in pick], device=logits.device)
                t = torch.tensor([p[1] for p in pick], device=logits.device)
                logits.index_fill_(0, r, float("-inf"))
                logits[r, t] = 0.0
        return logits


def capture_class(state: Capture) -> type:
    """A logits-processor class bound to `state`, of both V1 and V2 interfaces."""
    from vllm.v1.sample.logits_processor import LogitsProcessor as V1Processor
    from vllm.v1.sample.logits_processor import MoveDirectionality

    bases: tuple[type, ...] = (V1Processor,)
    try:
        from vllm.v1.worker.gpu.sample.logits_processor.interface import (
            LogitsProcessor as V2Processor,
        )

        bases += (V2Processor,)
    except ImportError:  # a vLLM without Model Runner V2
        pass

    class RowCapture(*bases):
        """Captures the rows of marked requests and forces the tokens of held ones."""

        def __init__(self, vllm_config, *runner_args):
            self.slots: dict[int, str] = {}

        def is_argmax_invariant(self) -> bool:  # V1: False, so greedy requests reach `apply`
            return False

        def update_state(self, batch_update) -> None:  # V1
            if batch_update is None:
                return
            slots = self.slots
            for index in batch_update.removed:
                slots.pop(index, None)
            for index, params, _, _ in batch_update.added:
                self.add_request(index, params)
            for a, b, direction in batch_update.moved:
                at_a, at_b = slots.pop(a, None), slots.pop(b, None)
                if at_a is not None:
                    slots[b] = at_a
                if at_b is not None and direction == MoveDirectionality.SWAP:
                    slots[a] = at_b

        def add_request(self, index: int, params) -> bool:  # V2 (and V1's added requests)
            rid = (getattr(params, "extra_args", None) or {}).get(ROW_KEY)
            if rid is None:
                self.slots.pop(index, None)
                return False
            self.slots[index] = rid
            return True

        def apply(self, logits: torch.Tensor, ctx=None) -> torch.Tensor:
            if not self.slots:
                return logits
            if ctx is None:  # V1: the logits row of a request is its batch index
                rows = sorted(self.slots)
                return state.process(logits, rows, [self.slots[r] for r in rows])
            rows, rids = [], []  # V2: row b holds the request in slot idx_mapping_np[b]
            for b, slot in enumerate(ctx.idx_mapping_np.tolist()):
                rid = self.slots.get(int(slot))
                if rid is not None:
                    rows.append(b)
                    rids.append(rid)
            return state.process(logits, rows, rids)

    return RowCapture


__all__ = ["ROW_KEY", "Capture", "capture_class"]
