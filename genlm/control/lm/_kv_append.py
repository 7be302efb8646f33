"""Key/value states extended in place: a cache layer that appends into spare room.

transformers' `DynamicLayer` extends its states by `torch.cat`, which copies the
whole past into a newly allocated tensor at every forward. Plain decoding frees the
old tensor, so the allocator hands its memory back at the next step. The prefix
cache keeps the old states (a resampled particle or another query may resume from
them), so every forward's copy lands in fresh memory: a copy of the whole past per
step, and on the CPU fresh pages to fault in (16 rows of the embedded model, 32
steps: 2.04 ms per forward with every step's states kept, 1.71 ms written in place).

`AppendLayer` writes the new positions into spare room behind the past instead.
The states of a layer live in an `Arena` (keys and values of shape
`[batch, heads, capacity, head_dim]`, of which positions `[0, used)` are written);
the layer's `keys` and `values` are views of its first `used` positions. Extending a
view that ends at the arena's `used` mark writes positions `[used, used + n)` in
place, which no existing view covers, so every state the prefix cache holds keeps
its values. Extending any other tensor (a view that ends before the mark, because
another sequence already extended the same past, or a tensor from elsewhere) copies
it into a new arena with spare room (`capacity`), the copy `torch.cat` would make.
The values written are the ones `torch.cat` would have written, so every row is the
same as with `DynamicLayer` (`tests/lm/test_kv_append.py` pins them bit for bit).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from genlm.control.lm._kv_cache import Block, tensor_bytes

try:
    from transformers.cache_utils import DynamicLayer
except ImportError:  # pragma: no cover - transformers < 4.56
    DynamicLayer = None

#: the fewest spare positions a new arena gets
MIN_ROOM = 4


def capacity(length: int) -> int:
    """The positions of a new arena for `length` states: an eighth more, at least
    `MIN_ROOM` more. The past is copied once per `length / 8` forwards of one token
    (a constant amortized copy per step, where `torch.cat` copies all of it), and the
    room costs an eighth of the states' memory (4 positions below 40 states)."""
    return length + max(MIN_ROOM, length >> 3)


# the attribute an arena's views carry (a torch tensor takes Python attributes)
_ARENA = "_genlm_kv_arena"


class Arena:
    """One layer's keys and values with room to grow along the sequence axis.

    Attributes:
        keys, values: `[batch, heads, capacity, head_dim]` buffers.
        used: positions `[0, used)` hold states; later ones are free.
        block: `(the other layers' arenas, Block)`: the bytes of one forward's
            arenas, counted once however many forwards' views share them
            (see `states_block`); set on a forward's first layer.
    """

    __slots__ = ("keys", "values", "used", "block")

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, used: int):
        self.keys, self.values, self.used = keys, values, used
        self.block: tuple[tuple[Arena, ...], Block] | None = None

    @property
    def nbytes(self) -> int:
        return tensor_bytes((self.keys, self.values))

    def views(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The written positions, as views that name this arena."""
        keys, values = self.keys[:, :, : self.used], self.values[:, :, : self.used]
        setattr(keys, _ARENA, self)
        setattr(values, _ARENA, self)
        return keys, values


def arena_of(keys: torch.Tensor, values: torch.Tensor) -> Arena | None:
    """The arena `keys` and `values` are the written positions of, or None."""
    arena = getattr(keys, _ARENA, None)
    if arena is None or getattr(values, _ARENA, None) is not arena:
        return None
    if keys.shape[2] != arena.used or keys.data_ptr() != arena.keys.data_ptr() or values.data_ptr() != arena.values.data_ptr():
        return None
    return arena


def empty_arena(keys: torch.Tensor, values: torch.Tensor, batch: int, used: int, capacity: int) -> Arena:
    """An arena of `batch` rows and `capacity` positions shaped and typed like `keys`
    and `values` (heads, head size, dtype, device), its first `used` positions to be
    written by the caller."""
    return Arena(
        keys.new_empty(batch, keys.shape[1], capacity, keys.shape[3]),
        values.new_empty(batch, values.shape[1], capacity, values.shape[3]),
        used,
    )


def _grown(past_keys: torch.Tensor, past_values: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> Arena:
    """A new arena holding the past (if any) with room for `keys` and more (`capacity`)."""
    length = past_keys.shape[2] if past_keys.dim() == 4 else 0
    arena = empty_arena(keys, values, keys.shape[0], length, capacity(length + keys.shape[2]))
    if length:
        arena.keys[:, :, :length].copy_(past_keys)
        arena.values[:, :, :length].copy_(past_values)
    return arena


if DynamicLayer is not None:

    class AppendLayer(DynamicLayer):
        """A `DynamicLayer` that writes new positions into its arena's spare room.

        With gradients on (a view written in place would break autograd), or where
        the new states do not match the past's batch, heads or dtype, it extends by
        `torch.cat`, as `DynamicLayer` does."""

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            past_keys, past_values = self.keys, self.values
            if torch.is_grad_enabled() or not _fits(past_keys, key_states) or not _fits(past_values, value_states):
                return super().update(key_states, value_states, *args, **kwargs)
            n = key_states.shape[2]
            arena = arena_of(past_keys, past_values)
            if arena is None or arena.used + n > arena.keys.shape[2]:
                arena = _grown(past_keys, past_values, key_states, value_states)
            start = arena.used
            arena.keys[:, :, start : start + n].copy_(key_states)
            arena.values[:, :, start : start + n].copy_(value_states)
            arena.used = start + n
            self.keys, self.values = arena.views()
            return self.keys, self.values

else:  # pragma: no cover - transformers < 4.56
    AppendLayer = None


def _fits(past: torch.Tensor, new: torch.Tensor) -> bool:
    """Whether `new` can be written behind `past` (`past` empty: always)."""
    if new.dim() != 4:
        return False
    if past.numel() == 0:
        return True
    return (
        past.dim() == 4
        and past.shape[0] == new.shape[0]
        and past.shape[1] == new.shape[1]
        and past.shape[3] == new.shape[3]
        and past.dtype == new.dtype
        and past.device == new.device
    )


def states_block(layers: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> Block:
    """The `Block` that counts the memory a forward's states `layers` keep alive:
    where every layer's states are the written positions of an arena, the arenas'
    bytes, in one block shared with every other forward whose states are views of
    the same arenas; else the bytes of the tensors themselves."""
    arenas = [arena_of(keys, values) for keys, values in layers]
    if not arenas or any(a is None for a in arenas):
        return Block(tensor_bytes(layers))
    first, rest = arenas[0], tuple(arenas[1:])
    held = first.block
    if held is not None and len(held[0]) == len(rest) and all(a is b for a, b in zip(held[0], rest)):
        return held[1]
    block = Block(sum(a.nbytes for a in arenas))
    first.block = (rest, block)
    return block


__all__ = ["MIN_ROOM", "AppendLayer", "Arena", "arena_of", "capacity", "empty_arena", "states_block"]
