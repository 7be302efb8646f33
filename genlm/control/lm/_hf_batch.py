"""`CachedTransformer`: a genlm-backend `AsyncTransformer` that keeps per-sequence KV.

genlm-backend's HF model reuses key/value states only for prefixes registered with
`cache_kv`, so asking for the next-token distribution after `prompt + ctx + [x]`
recomputes the whole sequence, and an SMC step costs a forward over every particle's
full context. This model keeps the states of the sequences it has evaluated in a
byte-bounded LRU cache (`PrefixCache`) and answers a batch of queries with one
forward over just the tokens each sequence adds to its longest cached prefix:

    rows(k) = log_softmax(f(k[n:] | KV(k[:n])))[-1],   n = the longest cached prefix

Queries of one batch that are prefixes of another query are read from that query's
forward (one forward answers every prefix of a context). Pasts of unequal length are
right-padded with zeros and masked out; position ids keep each sequence's own
positions, so every row equals the uncached forward up to float rounding.

Concurrent calls made in one event-loop pass are joined by a `Window` into one forward.

A small model on the CPU (at most `SMALL_MODEL_PARAMS` parameters) evaluates on one
intra-op thread (`threads`, see `_threads.py`): the thread count changes no row beyond
float rounding, and spares each microsecond-long operation a wait for the rest of
torch's thread team, which on a busy machine costs milliseconds.
"""

from __future__ import annotations

import inspect
from typing import Any, NamedTuple, Sequence

import numpy as np
import torch
from genlm.backend.llm import AsyncTransformer
from transformers import DynamicCache

from genlm.control._host_blocks import HOST_BLOCKS, kept_log_softmax
from genlm.control._torch_rows import block_positions, rows_at
from genlm.control.lm._kv_append import AppendLayer, empty_arena, states_block
from genlm.control.lm._kv_cache import KV, Block, PrefixCache, id_keys, tensor_bytes
from genlm.control.lm._threads import (
    SMALL_MODEL_PARAMS,
    default_threads,
    intra_op_threads,
)
from genlm.control.window import Window

#: Bounds on the default `cache_bytes` (see `default_cache_bytes`).
MIN_DEFAULT_CACHE_BYTES = 32 << 20
DEFAULT_CACHE_BYTES = 1 << 30  # the largest default
PARAM_FRACTION = 0.25
FREE_DEVICE_FRACTION = 0.25


def parameter_bytes(model: Any) -> int:
    """Bytes of a torch module's parameters and buffers."""
    tensors = list(model.parameters()) + list(model.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)


def default_cache_bytes(model: Any) -> int:
    """The default byte budget of a model's key/value cache:

        clip(PARAM_FRACTION * parameter_bytes(model), MIN_DEFAULT_CACHE_BYTES, DEFAULT_CACHE_BYTES)

    and, when the model sits on a CUDA device, at most `FREE_DEVICE_FRACTION` of
    that device's free memory (the states live beside the model). So the cache of a
    small model costs a small, fixed slice of memory, and that of a large one at most
    a quarter of its weights and 1 GiB.
    """
    budget = int(PARAM_FRACTION * parameter_bytes(model))
    budget = min(max(budget, MIN_DEFAULT_CACHE_BYTES), DEFAULT_CACHE_BYTES)
    device = getattr(model, "device", None)
    if getattr(device, "type", None) == "cuda" and torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info(device)
        budget = min(budget, int(FREE_DEVICE_FRACTION * free))
    return budget


class Group(NamedTuple):
    """Queries answered by one row of a forward.

    Attributes:
        keys: the requested sequences, longest first; each is a prefix of `keys[0]`.
        start: length of the cached prefix the forward starts from.
        past: its key/value states (None when `start == 0`).
        past_key: the cache's key of that prefix (`()` when `start == 0`).
    """

    keys: list
    start: int
    past: KV | None
    past_key: tuple = ()

    @property
    def new(self) -> tuple:
        return self.keys[0][self.start :]


def extension_groups(keys: Sequence[tuple]) -> list[list[tuple]]:
    """Partition distinct `keys` into groups whose members are prefixes of the group's
    first (longest) key. In sorted order a key that prefixes any key prefixes its
    successor, so one reverse scan suffices. Keys that all begin with one `head` (the
    prompt their maker recorded, the same object) are sorted and compared past it."""
    head = getattr(keys[0], "head", None) if keys else None
    h = len(head) if head is not None and all(getattr(k, "head", None) is head for k in keys) else 0
    groups: list[list[tuple]] = []
    prev: tuple | None = None
    for k in sorted(keys, key=lambda k: k[h:], reverse=True) if h else sorted(keys, reverse=True):
        if prev is not None and len(prev) > len(k) and prev[h : len(k)] == k[h:]:
            groups[-1].append(k)
        else:
            groups.append([k])
        prev = k
    return groups


def _layers(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))  # pragma: no cover - transformers < 5


def _order(groups: list[Group]) -> list[Group]:
    """Groups reordered so that pasts taken from one forward are adjacent, in row order."""
    first: dict[int, int] = {}
    for g in groups:
        if g.past is not None:
            first.setdefault(id(g.past.layers), len(first))
    return sorted(groups, key=lambda g: (-1, 0) if g.past is None else (first[id(g.past.layers)], g.past.row))


def _stack_pasts(groups: list[Group], width: int, extra: int) -> Sequence[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's pasts stacked over the batch (in `_order`), right-padded with zeros to
    `width`. Rows of one earlier forward are taken with one `index_select` per tensor,
    or not copied at all when they are that forward's rows in order (then the
    earlier forward's own `layers` tuple is returned). Stacked states are written into
    arenas with room for exactly `extra` more positions, so the forward that reads them
    writes its new positions in place; they get spare room only when a later forward
    continues them in order (`AppendLayer`). Resampling at every step would otherwise
    leave spare room, fresh memory never written, behind every step."""
    runs: list[tuple[Any, list[int]]] = []
    for g in groups:
        layers = None if g.past is None else g.past.layers
        if runs and layers is not None and runs[-1][0] is layers:
            runs[-1][1].append(g.past.row)
        else:
            runs.append((layers, [] if layers is None else [g.past.row]))
        if layers is None:
            runs[-1][1].append(-1)
    example = next(layers for layers, _ in runs if layers is not None)
    if len(runs) == 1 and example[0][0].shape[2] == width and runs[0][1] == list(range(example[0][0].shape[0])):
        return example
    device = example[0][0].device
    picks = [  # the rows to take from each earlier forward, None where all of them in order
        None if layers is None or rows == list(range(layers[0][0].shape[0])) else torch.tensor(rows, device=device)
        for layers, rows in runs
    ]
    batch = sum(len(rows) for _, rows in runs)
    stacked = []
    for layer in range(len(example)):
        arena = empty_arena(*example[layer], batch, width, width + extra)
        for side, buf in enumerate((arena.keys, arena.values)):
            start = 0
            for (layers, rows), pick in zip(runs, picks):
                stop = start + len(rows)
                if layers is None:
                    buf[start:stop, :, :width].zero_()
                else:
                    t = layers[layer][side]
                    filled = buf[start:stop, :, : t.shape[2]]
                    if pick is None:
                        filled.copy_(t)
                    elif t.device.type == "cpu":  # the rows written straight into the arena
                        torch.index_select(t, 0, pick, out=filled)
                    else:
                        filled.copy_(t.index_select(0, pick))
                    if t.shape[2] < width:
                        buf[start:stop, :, t.shape[2] : width].zero_()
                start = stop
        stacked.append(arena.views())
    return stacked


def hand_over(pasts: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """A `DynamicCache` whose layers hold the tensors of `pasts` themselves (no copy)
    and extend them in place where they have room (`AppendLayer`);
    `DynamicCache(pasts)`, which copies them, where this transformers' cache has no
    `DynamicLayer` of the known form."""
    cache = DynamicCache()
    if AppendLayer is None or getattr(cache, "layers", None) != []:
        return DynamicCache(list(pasts))  # pragma: no cover - other transformers versions
    try:
        for keys, values in pasts:
            layer = AppendLayer()
            layer.lazy_initialization(keys, values)
            layer.keys, layer.values = keys, values
            cache.layers.append(layer)
    except (TypeError, AttributeError):  # pragma: no cover - another DynamicLayer
        return DynamicCache(list(pasts))
    return cache


def _inputs(groups: list[Group], width: int, span: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Input ids, position ids and attention mask (None when no row is padded)."""
    if all(g.start == width and len(g.new) == span for g in groups):
        ids = torch.tensor([g.new for g in groups], dtype=torch.long)
        positions = torch.arange(width, width + span).expand(len(groups), span)
        return ids, positions, None
    ids = torch.zeros(len(groups), span, dtype=torch.long)
    positions = torch.zeros(len(groups), span, dtype=torch.long)
    mask = torch.zeros(len(groups), width + span, dtype=torch.long)
    for j, g in enumerate(groups):
        n = len(g.new)
        ids[j, :n] = torch.tensor(g.new)
        positions[j, :n] = torch.arange(g.start, g.start + n)
        mask[j, : g.start] = 1
        mask[j, width : width + n] = 1
    return ids, positions, mask


class CachedTransformer(AsyncTransformer):
    """A HF causal LM whose batched next-token queries reuse cached key/value states.

    The genlm-backend API is kept (`tokenizer`, `byte_vocab`, `next_token_logprobs`,
    `batch_next_token_logprobs`, their `_sync` forms, `cache_kv`, `clear_cache`,
    LoRA adapters); only the evaluation differs (see the module docstring).

    Args:
        hf_model: a transformers causal LM.
        hf_tokenizer: its tokenizer.
        batch_size: most sequences per forward (None: all of a batch in one forward).
        cache_bytes: bound on the bytes of cached key/value states and rows, per
            adapter (None: `default_cache_bytes(hf_model)`).
        threads: torch intra-op threads during an evaluation (the process's count is
            restored after it); None: `default_threads(hf_model)`, one thread for a
            small CPU model and torch's own setting otherwise.
    """

    #: `PromptedLLM` hands its queries over as `Ids` (see `id_keys`)
    reads_ids_keys = True

    def __init__(
        self,
        hf_model,
        hf_tokenizer,
        batch_size: int | None = None,
        cache_bytes: int | None = None,
        timeout: float | None = None,
        threads: int | None = None,
    ):
        # `timeout` is genlm-backend's batching timer; batches here close at the end
        # of an event-loop pass, so it is accepted for compatibility and unused.
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be a positive integer or None, got {batch_size!r}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
        super().__init__(hf_model, hf_tokenizer, batch_size=batch_size or (1 << 62), timeout=0.0)
        if cache_bytes is None:
            cache_bytes = default_cache_bytes(hf_model)
        PrefixCache(cache_bytes)  # validates
        self.cache_bytes = cache_bytes
        self.threads = default_threads(hf_model) if threads is None else threads
        self._prefix_caches: dict[str | None, PrefixCache] = {}
        params = inspect.signature(hf_model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._trims_logits = "logits_to_keep" in params
        self._window: Window = Window(self._flush)
        self.forwards = 0
        # The states of the latest forward and the cache object that holds them: a
        # forward that continues exactly those rows passes the object on as it is.
        self._latest: tuple[tuple, Any] | None = None

    def prefix_cache(self, lora_name: str | None = None) -> PrefixCache:
        """The cache of sequences evaluated under `lora_name` (None: the base model)."""
        cache = self._prefix_caches.get(lora_name)
        if cache is None:
            cache = self._prefix_caches[lora_name] = PrefixCache(self.cache_bytes)
        return cache

    def clear_cache(self) -> None:
        """Forget every cached key/value state and row."""
        for cache in self._prefix_caches.values():
            cache.clear()
        self._prefix_caches = {}
        self._latest = None
        HOST_BLOCKS.trim()

    def clear_kv_cache(self) -> None:
        """Forget the cached key/value states (rows stay)."""
        for cache in self._prefix_caches.values():
            cache.drop_kv()
        self._latest = None

    def remove_lora(self, lora_name):
        super().remove_lora(lora_name)
        self._prefix_caches.pop(lora_name, None)

    # Queries ----------------------------------------------------------------

    async def next_token_logprobs(self, token_ids, lora_name=None) -> torch.Tensor:
        """`log p(· | token_ids)` as a float32 tensor, batched with concurrent calls."""
        return (await self.batch_next_token_logprobs([token_ids], lora_name=lora_name))[0]

    async def batch_next_token_logprobs(self, token_ids_list, lora_name=None) -> torch.Tensor:
        """`[len(token_ids_list), V]` next-token log probabilities; concurrent calls made
        in one event-loop pass share one forward."""
        keys = id_keys(token_ids_list)
        return await self._window.submit((keys, lora_name, False))

    async def batch_next_token_logprobs_at(self, token_ids_list, lora_name=None) -> tuple[torch.Tensor, np.ndarray | None]:
        """`(block, positions)`: row `positions[i]` of `block` holds the next-token log
        probabilities after `token_ids_list[i]` (`positions` None: row `i`).

        The rows as the forward left them: after resampling a forward's rows follow
        its key/value states, not the callers' order, and `batch_next_token_logprobs`
        copies them into that order; a caller that copies the rows anyway (as
        `PromptedLLM` does into its vocabulary's layout) reads them in place instead.
        The block is read-only to callers."""
        keys = id_keys(token_ids_list)
        return await self._window.submit((keys, lora_name, True))

    def next_token_logprobs_sync(self, token_ids, lora_name=None) -> torch.Tensor:
        return self.batch_next_token_logprobs_sync([token_ids], lora_name=lora_name)[0]

    def batch_next_token_logprobs_sync(self, token_ids_list, lora_name=None) -> torch.Tensor:
        return self.evaluate(id_keys(token_ids_list), lora_name)

    @torch.no_grad()
    def cache_kv(self, prompt_tokens, lora_name=None) -> None:
        """Evaluate `prompt_tokens` so that queries extending it start from its states."""
        self.evaluate(id_keys([prompt_tokens]), lora_name)

    async def _flush(self, requests: list[tuple[list, Any, bool]]) -> list[Any]:
        by_lora: dict[Any, list[int]] = {}
        for i, (_, lora, _) in enumerate(requests):
            by_lora.setdefault(lora, []).append(i)
        out: list[Any] = [None] * len(requests)
        for lora, members in by_lora.items():
            keys = [k for i in members for k in requests[i][0]]
            block, positions = self._evaluate_at(keys, lora)
            start = 0
            for i in members:
                n = len(requests[i][0])
                wants_at = requests[i][2]  # the block and where each key's row lies in it
                if positions is None:  # the rows in order: this request's slice
                    rows = block[start : start + n]
                    out[i] = (rows, None) if wants_at else rows
                else:
                    at = positions[start : start + n]
                    out[i] = (block, at) if wants_at else rows_at(block, at)
                start += n
        return out

    # Evaluation -------------------------------------------------------------

    def _new_cache(self, pasts: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> Any:
        """The cache object the model's forward reads `pasts` from (and extends).

        The tensors are handed over as they are (`DynamicCache(pasts)` would copy each
        one, a `torch.cat` onto an empty tensor), so after a resampling step every
        particle's states are copied once, by the stacking into an arena, which the
        forward then extends in place. Sharing them is safe: an `AppendLayer` writes
        only positions no tensor the prefix cache holds covers (behind its arena's
        `used` mark), and copies any other past into a new arena."""
        return hand_over(pasts)

    @torch.no_grad()
    def evaluate(self, keys: Sequence[tuple], lora_name: str | None = None) -> torch.Tensor:
        """Next-token log probabilities after each key (float32, on the model's device), from the
        cache and at most `ceil(groups / batch_size)` forwards."""
        block, positions = self._evaluate_at(keys, lora_name)
        return block if positions is None else rows_at(block, positions)

    @torch.no_grad()
    def _evaluate_at(self, keys: Sequence[tuple], lora_name: str | None = None) -> tuple[torch.Tensor, np.ndarray | None]:
        """`evaluate` as `(block, positions)` (see `batch_next_token_logprobs_at`): no
        copy when every row lies in one forward's block."""
        cache = self.prefix_cache(lora_name)
        rows: dict[tuple, torch.Tensor] = {}
        missing = []
        for k in dict.fromkeys(keys):
            row = cache.row(k)
            if row is None:
                missing.append(k)
            else:
                rows[k] = row
        if missing:
            self._activate(lora_name)
            groups = []
            for members in extension_groups(missing):
                groups.append(Group(members, *cache.longest_kv(members[0], len(members[-1]) - 1)))
            with intra_op_threads(self.threads):
                for i in range(0, len(groups), self.batch_size):
                    rows.update(self._forward(groups[i : i + self.batch_size], cache))
        # one forward's block (a view when the rows lie back to back in it, in order)
        return block_positions([rows[k] for k in keys])

    def _forward(self, groups: list[Group], cache: PrefixCache) -> dict[tuple, torch.Tensor]:
        """One forward over the new tokens of every group; stores states and rows."""
        groups = _order(groups)
        width = max(g.start for g in groups)
        span = max(len(g.new) for g in groups)
        ids, positions, mask = _inputs(groups, width, span)
        # A key's row is the output at position len(key) - start - 1 of its group's new tokens.
        picks = [(j, len(k) - g.start - 1, k) for j, g in enumerate(groups) for k in g.keys]
        keep = span - min(p for _, p, _ in picks) if self._trims_logits else span
        device = self.device
        kwargs: dict[str, Any] = {"position_ids": positions.to(device), "use_cache": True}
        if self._trims_logits:
            kwargs["logits_to_keep"] = keep
        if mask is not None:
            kwargs["attention_mask"] = mask.to(device)
        if width:
            pasts = _stack_pasts(groups, width, span)
            latest = self._latest
            reuse = latest is not None and pasts is latest[0]
            kwargs[self._cache_arg] = latest[1] if reuse else self._new_cache(pasts)
        self._latest = None  # the forward extends the cache object in place
        out = self.model(ids.to(device), **kwargs)
        self.forwards += 1
        states = getattr(out, "cache", None)
        states = out.past_key_values if states is None else states
        layers = tuple(_layers(states))
        self._latest = (layers, states)
        offset = span - keep
        if len(picks) == len(groups) and all(p == span - 1 for _, p, _ in picks):
            logits = out.logits[:, -1]
        else:
            j_idx = torch.tensor([j for j, _, _ in picks], device=device)
            p_idx = torch.tensor([p - offset for _, p, _ in picks], device=device)
            logits = out.logits[j_idx, p_idx]
        logprobs = kept_log_softmax(logits.float())  # on the CPU, a kept block: no fresh pages
        row_block = Block(tensor_bytes(logprobs))
        kv_block = states_block(layers)
        result = {}
        r = 0  # `picks` run over the groups in order, each group's keys in order
        for j, g in enumerate(groups):
            if g.start == width and len(g.new) == span:
                kv, block = KV(layers, j), kv_block
            else:  # a padded row: its real positions, made contiguous
                n = len(g.new)
                own = tuple(
                    tuple(torch.cat([t[j : j + 1, :, : g.start], t[j : j + 1, :, width : width + n]], dim=2) for t in pair)
                    for pair in layers
                )
                kv, block = KV(own, 0), Block(tensor_bytes(own))
            if g.start:
                cache.demote(g.past_key)
            for i, k in enumerate(g.keys):
                row = result[k] = logprobs[r]
                r += 1
                if i:
                    cache.put(k, None, None, row, row_block)
                else:  # the group's longest key: its states and its row in one entry update
                    cache.put(k, kv, block, row, row_block)
        return result


__all__ = ["CachedTransformer", "DEFAULT_CACHE_BYTES", "SMALL_MODEL_PARAMS", "default_cache_bytes", "default_threads",
           "extension_groups", "intra_op_threads"]
