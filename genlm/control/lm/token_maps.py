"""A model's tokens as a potential's vocabulary: id maps, EOS tokens, and next-token rows."""

from __future__ import annotations

import dataclasses
import math
import operator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from genlm.backend.tokenization.token import Token

from genlm.control._device import id_runs
from genlm.control._host_blocks import HOST_BLOCKS
from genlm.control._warn import warn_user
from genlm.control.potential.tables import VocabTables, build_tables


class TokenIds(tuple):
    """Token ids: a tuple that also equals the list of the same ids (genlm-control
    0.4.1's `token_maps.eos_idxs` was a list, so `eos_idxs == [0]` holds as before)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return list(self) == other
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__


class TokenEncode(dict):
    """Plain bytes → the first token id with those bytes; a `Token` is looked up by id.

    `encode[token]` is `token.token_id` for a `Token` of the model; `encode[b"..."]`
    (genlm-control 0.4.1's deprecated form) still works and warns with a
    `DeprecationWarning`. `b"..." in encode` and `token in encode` do not warn.
    """

    def __init__(self, items: dict, n: int):
        super().__init__(items)
        self._n = n

    def __getitem__(self, key: Any) -> int:
        if isinstance(key, Token):
            if 0 <= key.token_id < self._n:
                return key.token_id
            raise KeyError(key)
        value = super().__getitem__(key)
        warn_user(
            "Indexing token_maps.encode by bytes is deprecated: index it by a Token "
            "(e.g. from llm.tokenize), which names one token id",
            DeprecationWarning,
        )
        return value

    def __contains__(self, key: object) -> bool:
        if isinstance(key, Token):
            return 0 <= key.token_id < self._n
        return super().__contains__(key)

    def first_id(self, data: bytes) -> int | None:
        """The first id with bytes `data` (no warning), or None."""
        return super().get(data)


@dataclass(frozen=True, eq=False)
class TokenMaps:
    """The model's tokens split into the potential's vocabulary and its EOS tokens.

    Built once per (model, EOS set) and shared by every spawned copy.

    Attributes:
        decode: token id → `Token` (the backend's `byte_vocab`).
        encode: plain bytes → the first id with those bytes (`TokenEncode`; a
            `Token` key gives its id).
        eos_idxs: the ids that all map to `EOS` (`TokenIds`).
        eos_tokens: their `Token`s.
        vocab_idxs: position in the potential's vocabulary → token id.
        tables: the potential's `VocabTables` (vocabulary = `decode` minus EOS tokens).
        eos_byte_strings: the EOS entries as given, as plain bytes.
    """

    decode: list
    encode: dict
    eos_idxs: tuple
    eos_tokens: list
    vocab_idxs: torch.Tensor
    tables: VocabTables
    eos_byte_strings: list = dataclasses.field(default_factory=list)

    @property
    def potential_vocab(self) -> list:
        return self.tables.vocab

    def context_ids(self, context: Sequence[Any]) -> list[int]:
        """The ids of a context of vocabulary tokens (`Token`s, or plain bytes meaning
        the first vocabulary token with those bytes).

        Raises:
            ValueError: a token that is not in the vocabulary (an EOS token included).
        """
        # A `Token` is identified by its id: any non-EOS id of the model is in the
        # vocabulary. The common case (every token a `Token` of this model) is checked
        # in bulk; anything else goes token by token.
        if not context:
            return []
        if set(map(type, context)) == {Token}:
            ids = [tok.token_id for tok in context]
            if min(ids) >= 0 and max(ids) < len(self.decode) and self.eos_id_set.isdisjoint(ids):
                return ids
        n, eos = len(self.decode), self.eos_id_set
        ids = []
        for tok in context:
            tid = tok.token_id if isinstance(tok, Token) else -1
            ids.append(tid if 0 <= tid < n and tid not in eos else self._slow_id(tok))
        return ids

    def _slow_id(self, tok: Any) -> int:
        lookup, fallback, vocab = self.tables.lookup, self.tables.fallback, self.tables.vocab
        i = lookup.get(tok) if isinstance(tok, Token) else None
        if i is None and isinstance(tok, bytes) and not isinstance(tok, Token):
            i = fallback.get(tok)
        if i is None or i >= len(vocab):
            raise ValueError(f"token {tok!r} is not in the language model's vocabulary")
        return vocab[i].token_id

    def vocab_idxs_on(self, device: torch.device) -> torch.Tensor:
        """`vocab_idxs` on `device`, copied there once."""
        key = str(device)
        got = self._idxs_by_device.get(key)
        if got is None:
            got = self._idxs_by_device[key] = self.vocab_idxs.to(device)
        return got

    @cached_property
    def _idxs_by_device(self) -> dict:
        return {}

    @cached_property
    def eos_id_set(self) -> frozenset:
        return frozenset(self.eos_idxs)

    @cached_property
    def vocab_span(self) -> tuple[int, int] | None:
        """`(a, b)` when the vocabulary's ids are exactly `a, a+1, ..., b-1` in order."""
        idx = self.vocab_idxs
        if len(idx) and bool((idx == torch.arange(int(idx[0]), int(idx[0]) + len(idx))).all()):
            return int(idx[0]), int(idx[0]) + len(idx)
        return None

    @cached_property
    def vocab_runs(self) -> list[tuple[int, int, int]] | None:
        """The vocabulary's ids as runs of consecutive ids, `(first id, stop id,
        position in the vocabulary)`, or None when there are more than `MAX_RUNS`
        (a model's vocabulary is its ids minus a few EOS ids: a handful of runs)."""
        return id_runs(self.vocab_idxs.numpy(), MAX_RUNS)


#: The most runs of consecutive ids that `next_token_rows` copies run by run.
MAX_RUNS = 16


def build_token_maps(byte_vocab: Sequence[Token], eos_byte_strings: Sequence[bytes]) -> TokenMaps:
    """Split `byte_vocab` into vocabulary and EOS tokens.

    A `Token` in `eos_byte_strings` names one id; plain bytes name every id with
    those bytes (so no token with EOS bytes stays in the vocabulary).

    Raises:
        ValueError: no EOS given, an EOS byte string that no token has, or an entry
            naming an id an earlier entry named ("Duplicate eos byte strings": the same
            bytes twice, or a `Token` and its bytes).
    """
    if not eos_byte_strings:
        raise ValueError("eos_byte_strings is empty: a PromptedLLM needs at least one EOS token")
    encode: dict = {}
    ids_of: dict = {}
    for tok in byte_vocab:
        encode.setdefault(bytes(tok), tok.token_id)
        ids_of.setdefault(bytes(tok), []).append(tok.token_id)
    eos_idxs: list = []
    for e in eos_byte_strings:
        if isinstance(e, Token):
            ids = [e.token_id] if 0 <= e.token_id < len(byte_vocab) else []
        elif isinstance(e, (bytes, bytearray)):
            ids = ids_of.get(bytes(e), [])
        else:
            raise TypeError(f"EOS byte string {e!r} is a {type(e).__name__}, expected bytes")
        if not ids:
            raise ValueError(
                f"EOS token not in language model vocabulary: EOS byte string {e!r} is not "
                "a token of the model's vocabulary (no token has these bytes)"
            )
        if any(i in eos_idxs for i in ids):
            raise ValueError(
                f"Duplicate eos byte strings: {e!r} names token id(s) {ids} that an earlier "
                "entry already names"
            )
        eos_idxs.extend(ids)
    eos_set = set(eos_idxs)
    vocab = [tok for tok in byte_vocab if tok.token_id not in eos_set]
    vocab_idxs = torch.tensor([tok.token_id for tok in vocab], dtype=torch.long)
    return TokenMaps(
        decode=list(byte_vocab),
        encode=TokenEncode(encode, len(byte_vocab)),
        eos_idxs=TokenIds(eos_idxs),
        eos_tokens=[byte_vocab[i] for i in eos_idxs],
        vocab_idxs=vocab_idxs,
        tables=build_tables(vocab),
        eos_byte_strings=[bytes(e) for e in eos_byte_strings],
    )


def temper(logprobs: torch.Tensor, temperature: float) -> torch.Tensor:
    """`log_softmax(logprobs / T)` along the last axis (the identity at `T = 1`).

    Computed in double precision as `log_softmax((l - max l) / T)`, equal in exact
    arithmetic: the largest entry of a row is 0 before the division, so every row keeps
    a finite entry for any `T > 0` (down to `T = 5e-324`, which single precision would
    round to 0); entries whose quotient overflows are `-inf`, i.e. weight zero, as they
    are to double precision. A tiny `T` is greedy decoding.
    """
    if temperature == 1.0:
        return logprobs
    x = logprobs.double()
    x = x - x.amax(dim=-1, keepdim=True)
    return torch.log_softmax(x / temperature, dim=-1)


def next_token_rows(logprobs: torch.Tensor, maps: TokenMaps, on_device: bool = False, order: Any = None) -> Any:
    """Rows over `vocab_eos` from a block of next-token log probabilities.

    `row[x] = logprobs[id(x)]` and `row[EOS] = logsumexp(logprobs[eos_idxs])`. Row `i`
    of the result reads row `order[i]` of `logprobs` (row `i` when `order` is None),
    so contexts that share a row cost no second pass. Each row is written once: the
    vocabulary's runs of consecutive ids are copied into place (one gather when its
    ids are scattered), on a CPU row by row when `order` repeats rows. With
    `on_device` the block stays a tensor on the log probabilities' device; otherwise
    it is one NumPy block (one host transfer). Either way float32 stays float32 and
    float64 stays float64, and half precision is widened to float32 (on a device
    before the EOS sum, on the host after it): widening a model's float32 log
    probabilities further adds no accuracy, and every pass over a 128k-token row
    costs twice as much in float64.
    """
    if on_device and logprobs.dtype not in _FULL:
        logprobs = logprobs.float()
    runs = maps.vocab_runs
    if runs is None:  # scattered ids: one gather, then the rows in order
        logprobs = _with_eos_last(logprobs, maps)
        return _in_order(logprobs, order, on_device)
    if logprobs.device.type == "cpu" and not on_device and logprobs.dtype in _FULL and logprobs.shape[1] <= _GATHER_WIDTH:
        # short rows on the host: NumPy slices (with `order`, one gather per run and
        # for the EOS column); torch's calls would cost more than the bytes
        lp = logprobs.detach()
        src = lp.numpy()
        rows = slice(None) if order is None else np.asarray(order, dtype=np.intp)
        out = np.empty((len(src) if order is None else len(order), len(maps.vocab_idxs) + 1), dtype=src.dtype)
        for start, stop, at in runs:
            out[:, at : at + stop - start] = src[rows, start:stop]
        eos_idxs = maps.eos_idxs
        if len(eos_idxs) == 1:
            out[:, -1] = src[rows, eos_idxs[0]]
        else:  # the log-sum-exp in torch, as `eos_of` computes it
            out[:, -1] = eos_of(lp, maps).numpy()[rows]
        return out
    n = len(logprobs) if order is None else len(order)
    if on_device and logprobs.device.type != "cpu":
        block = torch.empty(n, len(maps.vocab_idxs) + 1, dtype=_full(logprobs.dtype), device=logprobs.device)
    else:  # a kept host block (see `_host_blocks`)
        block = HOST_BLOCKS.empty(n, len(maps.vocab_idxs) + 1, _full(logprobs.dtype))
    if order is None:
        pairs = [(block, logprobs)]
    elif logprobs.device.type == "cpu":  # row by row: a copy per row and run is cheap here
        pairs = [(block[i], logprobs[int(j)]) for i, j in enumerate(order)]
    else:  # on a device, one kernel per run: gather the rows first
        pairs = [(block, logprobs.index_select(0, torch.as_tensor(order, device=logprobs.device)))]
    for out, src in pairs:
        for start, stop, at in runs:
            out[..., at : at + stop - start].copy_(src[..., start:stop])
    eos = eos_of(logprobs, maps)
    block[:, -1].copy_(eos if order is None else eos[torch.as_tensor(order, device=eos.device)])
    return block if on_device else block.numpy()


def eos_of(logprobs: torch.Tensor, maps: TokenMaps) -> torch.Tensor:
    """The EOS tokens' log-sum-exp per row."""
    if len(maps.eos_idxs) == 1:
        return logprobs[:, maps.eos_idxs[0]]
    return torch.logsumexp(logprobs[:, list(maps.eos_idxs)], dim=-1)


def _with_eos_last(logprobs: torch.Tensor, maps: TokenMaps) -> torch.Tensor:
    """`next_token_rows` of every row, in `logprobs`' dtype (scattered ids)."""
    vocab = logprobs.index_select(1, maps.vocab_idxs_on(logprobs.device))
    return torch.cat([vocab, eos_of(logprobs, maps)[:, None]], dim=1)


def _in_order(rows: torch.Tensor, order: Any, on_device: bool) -> Any:
    if order is not None:
        rows = rows.index_select(0, torch.as_tensor(order, device=rows.device))
    return rows if on_device else rows.to("cpu", _full(rows.dtype)).numpy()


_FULL = (torch.float32, torch.float64)
#: Host rows at most this wide are reordered by one NumPy gather per run of the
#: vocabulary, wider ones row by row (measured: 6× faster at 4k tokens, 2× slower at 128k).
_GATHER_WIDTH = 8192


def _full(dtype: torch.dtype) -> torch.dtype:
    """`dtype` when it is float32 or float64, else float32 (half precision widened)."""
    return dtype if dtype in _FULL else torch.float32


ROWS = ("auto", "device", "host")


def check_rows(rows: Any) -> str:
    """`rows` checked to be one of `ROWS`.

    Raises:
        ValueError: any other value.
    """
    if not isinstance(rows, str) or rows not in ROWS:
        raise ValueError(f"rows must be one of {ROWS}, got {rows!r}")
    return rows


def check_temperature(temperature: Any) -> float:
    """`temperature` as a float.

    Raises:
        TypeError: not a real number.
        ValueError: not finite and positive.
    """
    if isinstance(temperature, bool) or not isinstance(
        temperature, (int, float, np.floating, np.integer)
    ):
        raise TypeError(f"temperature must be a real number, got {temperature!r}")
    t = float(temperature)
    if not (math.isfinite(t) and t > 0):
        raise ValueError(f"temperature must be finite and > 0, got {temperature!r}")
    return t


def check_prompt_ids(ids: Any, n: int) -> list[int]:
    """`ids` as a list of ints in `0..n-1`.

    A tokenizer's `BatchEncoding` (what `apply_chat_template(..., tokenize=True)`
    returns in transformers 5) gives its `input_ids`, a batch of one row gives that row.

    Raises:
        TypeError: not a sequence of integers (a str, say, or a float id).
        ValueError: an id outside the vocabulary.
    """
    if isinstance(ids, Mapping):
        if "input_ids" not in ids:
            raise TypeError("prompt_ids must be a list of token ids (ints), got a mapping without 'input_ids'")
        ids = ids["input_ids"]
    if getattr(ids, "ndim", 1) == 2 or (isinstance(ids, list) and len(ids) == 1 and isinstance(ids[0], list)):
        if len(ids) != 1:
            raise TypeError(f"prompt_ids must be one list of token ids, got a batch of {len(ids)}")
        ids = ids[0]
    if isinstance(ids, (str, bytes, bytearray)) or not hasattr(ids, "__iter__"):
        raise TypeError(f"prompt_ids must be a list of token ids (ints), got {type(ids).__name__}")
    out = []
    for k, i in enumerate(ids):
        if isinstance(i, bool):
            raise TypeError(f"prompt_ids must be a list of token ids (ints), got {i!r} at position {k}")
        try:
            out.append(operator.index(i))
        except TypeError:
            raise TypeError(
                f"prompt_ids must be a list of token ids (ints), got {i!r} at position {k}"
            ) from None
    bad = next((i for i in out if not 0 <= i < n), None)
    if bad is not None:
        raise ValueError(f"prompt token id {bad} is outside the vocabulary (0..{n - 1})")
    return out


def check_text(text: Any, what: str = "prompt") -> str:
    """`text`, checked to be a str that UTF-8 can encode.

    Raises:
        TypeError: not a str.
        ValueError: a lone surrogate (not valid Unicode text), naming its position.
    """
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str, got {type(text).__name__}")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"{what} has a lone surrogate {text[exc.start]!r} at position {exc.start}: "
                "it is not valid Unicode text (decode bytes with errors='replace' to avoid it)"
            ) from None
    return text


__all__ = ["ROWS", "check_rows", "TokenMaps", "check_prompt_ids", "check_text", "build_token_maps", "temper", "next_token_rows", "check_temperature"]
