"""`PromptedLLM`: a language model, conditioned on a prompt, as a potential over its tokens."""

from __future__ import annotations

import asyncio
import importlib.util
import math
import os
import warnings
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Sequence

import numpy as np
import torch
from genlm.backend.llm import AsyncLM
from genlm.backend.tokenization.token import Token

from genlm.control.embedded import resolve
from genlm.control.potential.base import Potential
from genlm.control.potential.tables import VocabTables, build_tables
from genlm.control.weights import LazyWeights

BACKENDS = ("hf", "vllm", "mock")
_INHERIT: Any = object()  # spawn(): keep the parent's value


@dataclass(frozen=True, eq=False)
class TokenMaps:
    """The model's tokens split into the potential's vocabulary and its EOS tokens.

    Built once per (model, EOS set) and shared by every spawned copy.

    Attributes:
        decode: token id → `Token` (the backend's `byte_vocab`).
        encode: plain bytes → the first id with those bytes.
        eos_idxs: the ids that all map to `EOS`.
        eos_tokens: their `Token`s.
        vocab_idxs: position in the potential's vocabulary → token id.
        tables: the potential's `VocabTables` (vocabulary = `decode` minus EOS tokens).
    """

    decode: list
    encode: dict
    eos_idxs: tuple
    eos_tokens: list
    vocab_idxs: torch.Tensor
    tables: VocabTables

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


def build_token_maps(byte_vocab: Sequence[Token], eos_byte_strings: Sequence[bytes]) -> TokenMaps:
    """Split `byte_vocab` into vocabulary and EOS tokens.

    A `Token` in `eos_byte_strings` names one id; plain bytes name every id with
    those bytes (so no token with EOS bytes stays in the vocabulary).

    Raises:
        ValueError: no EOS given, or an EOS byte string that no token has.
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
            raise ValueError(f"EOS byte string {e!r} is not a token of the model's vocabulary")
        eos_idxs.extend(i for i in ids if i not in eos_idxs)
    eos_set = set(eos_idxs)
    vocab = [tok for tok in byte_vocab if tok.token_id not in eos_set]
    vocab_idxs = torch.tensor([tok.token_id for tok in vocab], dtype=torch.long)
    return TokenMaps(
        decode=list(byte_vocab),
        encode=encode,
        eos_idxs=tuple(eos_idxs),
        eos_tokens=[byte_vocab[i] for i in eos_idxs],
        vocab_idxs=vocab_idxs,
        tables=build_tables(vocab),
    )


def temper(logprobs: torch.Tensor, temperature: float) -> torch.Tensor:
    """`log_softmax(logprobs / T)` along the last axis (the identity at `T = 1`)."""
    if temperature == 1.0:
        return logprobs
    return torch.log_softmax(logprobs.float() / temperature, dim=-1)


def next_token_rows(logprobs: torch.Tensor, maps: TokenMaps) -> np.ndarray:
    """Rows over `vocab_eos` from a block of next-token log probabilities.

    `row[x] = logprobs[id(x)]` and `row[EOS] = logsumexp(logprobs[eos_idxs])`; one
    gather and one host transfer for the whole block.
    """
    if len(maps.eos_idxs) == 1:
        eos = logprobs[:, maps.eos_idxs[0]]
    else:
        eos = torch.logsumexp(logprobs[:, list(maps.eos_idxs)], dim=-1)
    span = maps.vocab_span
    if span is not None:
        vocab = logprobs[:, span[0] : span[1]]
    else:
        vocab = logprobs.index_select(1, maps.vocab_idxs.to(logprobs.device))
    if logprobs.device.type != "cpu":
        vocab, eos = vocab.cpu(), eos.cpu()
    block = torch.empty(len(logprobs), vocab.shape[1] + 1, dtype=torch.float64)
    block[:, :-1].copy_(vocab)
    block[:, -1].copy_(eos)
    return block.numpy()


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


def load_model(name: str, backend: str | None = None, **kwargs) -> AsyncLM:
    """Load a genlm-backend `AsyncLM` for `name` (the embedded model's name is resolved).

    The HF backend is a `CachedTransformer`: the queries of one event-loop pass share
    one forward over just the tokens each sequence adds to its cached key/value states.

    Raises:
        ValueError: unknown backend; OSError: a model that is not found locally;
        ImportError: vLLM without CUDA or without the `vllm` package.
    """
    llm_opts = kwargs.pop("llm_opts", None)
    if llm_opts is not None:
        # genlm-backend's `load_model_by_name(name, backend, llm_opts)` spelling.
        if not isinstance(llm_opts, dict):
            raise TypeError(f"llm_opts must be a dict, got {type(llm_opts).__name__}")
        kwargs = {**llm_opts, **kwargs}
    if backend is None:
        backend = "vllm" if _vllm_usable() else "hf"
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: choose one of {list(BACKENDS)}")
    path = resolve(name)
    if backend == "vllm" and not _vllm_usable():
        raise ImportError(
            "the vLLM backend needs CUDA and the vllm package (`pip install genlm-backend[vllm]`); "
            "use backend='hf' on CPU"
        )
    from genlm.backend.llm import AsyncVirtualLM, MockAsyncLM

    try:
        if backend == "hf":
            from genlm.control.potential.built_in._hf_batch import CachedTransformer

            return CachedTransformer.from_name(path, **kwargs)
        if backend == "mock":
            return MockAsyncLM.from_name(path, **kwargs)
        return AsyncVirtualLM.from_name(path, **kwargs)  # pragma: no cover - needs CUDA
    except (OSError, ValueError) as exc:
        if os.path.isdir(path):
            raise
        offline = (
            " (downloads are off: HF_HUB_OFFLINE is set)"
            if os.environ.get("HF_HUB_OFFLINE")
            else ""
        )
        raise OSError(
            f"model {name!r} could not be found locally (it is neither a model directory "
            f"nor in the Hugging Face cache) or fetched from the Hub{offline}"
        ) from exc


def _vllm_usable() -> bool:
    return torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None


class PromptedLLM(Potential):
    """A language model conditioned on a prompt, as a potential over its tokens.

    The vocabulary is the model's tokens (genlm-backend `Token`s: byte strings
    identified by id, so several ids may share bytes) minus the EOS tokens, which
    all map to `EOS`. With `p = log_softmax(logits / T)` after `prompt + ctx`:

        logw_next(ctx)[x] = p(x | prompt + ctx)
        logw_next(ctx)[EOS] = log Σ_{e ∈ eos} exp p(e | prompt + ctx)
        prefix(ctx) = Σ_i logw_next(ctx[:i])[ctx[i]]
        complete(ctx) = prefix(ctx) + logw_next(ctx)[EOS]

    An empty prompt starts from the tokenizer's BOS token (its EOS token when it
    has no BOS), since the model needs at least one token to predict from.

    Args:
        llm: a genlm-backend `AsyncLM` (see `from_name`).
        prompt_ids: the prompt's token ids.
        eos_byte_strings: the byte strings (or `Token`s) that end a sequence;
            default the tokenizer's EOS token.
        temperature: `T > 0`.
        lora_name: the LoRA adapter to query, per request (backends that support LoRA).
        token_maps: `TokenMaps` to share (from a `PromptedLLM` over the same model and EOS).
        eos_tokens: deprecated alias of `eos_byte_strings`.
    """

    def __init__(
        self,
        llm: AsyncLM,
        prompt_ids: Sequence[int] | None = None,
        eos_byte_strings: Sequence[bytes] | None = None,
        temperature: float = 1.0,
        *,
        lora_name: str | None = None,
        token_maps: TokenMaps | None = None,
        eos_tokens: Sequence[bytes] | None = None,
    ):
        if not isinstance(llm, AsyncLM):
            raise TypeError(f"llm must be a genlm-backend AsyncLM, got {type(llm).__name__}")
        eos_byte_strings = _eos_alias(eos_byte_strings, eos_tokens)
        self.model = llm
        self.temperature = temperature
        self.lora_name = _check_lora(llm, lora_name)
        if token_maps is None:
            if eos_byte_strings is None:
                eos_byte_strings = [_default_eos(llm)]
            token_maps = build_token_maps(llm.byte_vocab, eos_byte_strings)
        elif eos_byte_strings is not None:
            raise ValueError("give eos_byte_strings or token_maps, not both")
        self.token_maps = token_maps
        super().__init__(tables=token_maps.tables)
        self.prompt_ids = [] if prompt_ids is None else prompt_ids

    @classmethod
    def from_name(
        cls,
        name: str,
        backend: str | None = None,
        eos_byte_strings: Sequence[bytes] | None = None,
        prompt_ids: Sequence[int] | None = None,
        temperature: float = 1.0,
        *,
        lora_name: str | None = None,
        eos_tokens: Sequence[bytes] | None = None,
        **kwargs,
    ) -> "PromptedLLM":
        """Load a model by name or path and wrap it.

        Args:
            name: a Hugging Face name, a local directory, or the embedded model's name
                (`genlm.control.embedded.EMBEDDED_MODEL`).
            backend: "hf", "vllm" or "mock"; default "vllm" where CUDA and vllm are
                available, else "hf".
            **kwargs: passed to the backend's `from_name` (e.g. `hf_opts`, `cache_bytes`,
                vLLM's `engine_opts`); `llm_opts={...}` is accepted and merged, as
                genlm-backend's `load_model_by_name` spells it.

        Raises:
            ValueError: unknown backend, bad temperature, EOS not in the vocabulary.
            OSError: a model that cannot be found locally.
            ImportError: vLLM without CUDA or without the vllm package.
        """
        eos_byte_strings = _eos_alias(eos_byte_strings, eos_tokens, stacklevel=3)
        check_temperature(temperature)
        model = load_model(name, backend, **kwargs)
        return cls(model, prompt_ids, eos_byte_strings, temperature, lora_name=lora_name)

    # Settings ---------------------------------------------------------------

    @property
    def temperature(self) -> float:
        return self._temperature

    @temperature.setter
    def temperature(self, value: float) -> None:
        self._temperature = check_temperature(value)

    @property
    def prompt_ids(self) -> list[int]:
        """The prompt's token ids (assign a list to change the prompt)."""
        return self._prompt_ids

    @prompt_ids.setter
    def prompt_ids(self, ids: Sequence[int]) -> None:
        ids = [int(i) for i in ids]
        n = len(self.token_maps.decode)
        bad = next((i for i in ids if not 0 <= i < n), None)
        if bad is not None:
            raise ValueError(f"prompt token id {bad} is outside the vocabulary (0..{n - 1})")
        self._prompt_ids = ids

    @property
    def _start(self) -> tuple:
        """The ids every query starts with: the prompt, or BOS when it is empty."""
        return tuple(self._prompt_ids) or (_start_id(self.model),)

    @property
    def prompt(self) -> list[Token]:
        """The prompt as tokens."""
        return self.decode_tokens(self._prompt_ids)

    def set_prompt_from_str(self, prompt_str: str) -> None:
        """Set the prompt to the tokenizer's encoding of `prompt_str` (with its special tokens)."""
        if not isinstance(prompt_str, str):
            raise TypeError(f"prompt must be a str, got {type(prompt_str).__name__}")
        self.prompt_ids = self.model.tokenizer.encode(prompt_str)

    # Tokens -----------------------------------------------------------------

    def tokenize(self, text: str) -> list[Token]:
        """The tokens of `text` (no special tokens added)."""
        return self.decode_tokens(self.model.tokenizer.encode(text, add_special_tokens=False))

    def encode_tokens(self, tokens: Sequence[Any]) -> list[int]:
        """Token ids of `tokens` (`Token`s by id; plain bytes: the first id with those bytes).

        Raises:
            ValueError: a token the model does not have.
        """
        maps, ids = self.token_maps, []
        for tok in tokens:
            if isinstance(tok, Token) and 0 <= tok.token_id < len(maps.decode):
                ids.append(tok.token_id)
            elif isinstance(tok, bytes) and not isinstance(tok, Token) and tok in maps.encode:
                ids.append(maps.encode[tok])
            else:
                raise ValueError(f"token {tok!r} is not in the language model's vocabulary")
        return ids

    def decode_tokens(self, ids: Sequence[int]) -> list[Token]:
        """The `Token` of each id.

        Raises:
            ValueError: an id outside the vocabulary.
        """
        decode = self.token_maps.decode
        out = []
        for i in ids:
            if not 0 <= int(i) < len(decode):
                raise ValueError(f"token id {i} is outside the vocabulary (0..{len(decode) - 1})")
            out.append(decode[int(i)])
        return out

    # Weights ----------------------------------------------------------------

    async def _logprobs(self, keys: Sequence[tuple]) -> torch.Tensor:
        """Tempered next-token log probabilities after each id sequence, in one backend batch."""
        kw = {} if self.lora_name is None else {"lora_name": self.lora_name}
        limit = _max_positions(self.model)
        longest = max((len(k) for k in keys), default=0)
        if limit is not None and longest > limit:
            raise ValueError(
                f"prompt and context are {longest} tokens, over the model's limit of "
                f"{limit} positions: shorten the prompt or lower max_tokens"
            )
        # Shielded: the backend may batch these queries with other prompts' queries and
        # set every result of the batch at once, which fails on a cancelled future and
        # would then fail the other prompts' queries too. A cancelled caller leaves its
        # queries to finish unobserved instead.
        queries = asyncio.ensure_future(
            self.model.batch_next_token_logprobs([list(k) for k in keys], **kw)
        )
        queries.add_done_callback(_retrieve)
        try:
            rows = await asyncio.shield(queries)
        except ValueError as exc:
            if self.lora_name is None:
                raise
            raise ValueError(
                f"LoRA adapter {self.lora_name!r} is not available on {type(self.model).__name__}: {exc}"
            ) from exc
        return temper(rows, self._temperature)

    async def batch_logw_next(self, contexts: Sequence[list]) -> list[LazyWeights]:
        """`logw_next` of each context from one backend batch (one forward on HF)."""
        if not contexts:
            return []
        maps, start = self.token_maps, self._start
        keys = [start + tuple(maps.context_ids(c)) for c in contexts]
        uniq, inverse = _unique(keys)
        rows = next_token_rows(await self._logprobs(uniq), maps)
        return self.rows_to_weights(rows if len(uniq) == len(keys) else rows[inverse])

    async def logw_next(self, context: list) -> LazyWeights:
        return (await self.batch_logw_next([context]))[0]

    async def _batch_logp(self, contexts: Sequence[list], finished: Sequence[bool]) -> np.ndarray:
        """`prefix` of each context, plus its EOS term where `finished`; one backend batch.

        Every prefix `prompt + ctx[:i]` of every context is queried once; the log
        probability of each next id is picked from its row and summed per context.
        """
        start, rows = self._start, {}
        picks: list[tuple[int, int, int]] = []  # (context, row, next id or -1 for EOS)
        for k, (ctx, done) in enumerate(zip(contexts, finished)):
            full = start + tuple(self.token_maps.context_ids(ctx))
            for n in range(len(start), len(full) + bool(done)):
                r = rows.setdefault(full[:n], len(rows))
                picks.append((k, r, full[n] if n < len(full) else -1))
        total = np.zeros(len(contexts), dtype=np.float64)
        if not picks:
            return total
        lp = await self._logprobs(list(rows))
        eos = torch.logsumexp(lp[:, list(self.token_maps.eos_idxs)], dim=-1, keepdim=True)
        lp = torch.cat([lp, eos], dim=1)  # column -1 is EOS
        owner, r, col = torch.tensor(picks, dtype=torch.long, device=lp.device).T
        picked = lp[r, col].to("cpu", torch.float64).numpy()
        total += np.bincount(owner.cpu().numpy(), picked, minlength=len(contexts))
        return total

    async def batch_prefix(self, contexts: Sequence[list]) -> np.ndarray:
        """`prefix(ctx) = Σ_i log p(ctx[i] | prompt + ctx[:i])` of each context."""
        return await self._batch_logp(contexts, [False] * len(contexts))

    async def batch_complete(self, contexts: Sequence[list]) -> np.ndarray:
        """`complete(ctx) = prefix(ctx) + log p(EOS | prompt + ctx)` of each context."""
        return await self._batch_logp(contexts, [True] * len(contexts))

    async def batch_score(self, contexts: Sequence[list]) -> np.ndarray:
        """`complete(ctx[:-1])` for contexts that end in EOS, `prefix(ctx)` for the others."""
        done = [bool(c) and c[-1] == self.eos for c in contexts]
        trimmed = [list(c[:-1]) if d else c for c, d in zip(contexts, done)]
        return await self._batch_logp(trimmed, done)

    async def prefix(self, context: list) -> float:
        return float((await self.batch_prefix([context]))[0])

    async def complete(self, context: list) -> float:
        return float((await self.batch_complete([context]))[0])

    async def log_probability(self, context: list) -> float:
        """`log P(context | prompt)`: `prefix(ctx)`, or `complete(ctx[:-1])` when it ends in EOS."""
        return await self.score(context)

    # Copies -----------------------------------------------------------------

    def spawn(
        self,
        prompt_ids: Sequence[int] | None = None,
        eos_byte_strings: Sequence[bytes] | None = None,
        temperature: float | None = None,
        lora_name: str | None = _INHERIT,
        *,
        eos_tokens: Sequence[bytes] | None = None,
    ) -> "PromptedLLM":
        """A copy over the same model; unspecified settings are this one's.

        Copies with the same EOS share `token_maps` (no O(V) work).
        """
        eos_byte_strings = _eos_alias(eos_byte_strings, eos_tokens)
        maps = self.token_maps
        if eos_byte_strings is not None:
            new = build_token_maps(maps.decode, eos_byte_strings)
            if new.eos_idxs == maps.eos_idxs:
                new = maps
            maps = new
        return PromptedLLM(
            self.model,
            prompt_ids=self._prompt_ids if prompt_ids is None else prompt_ids,
            temperature=self._temperature if temperature is None else temperature,
            lora_name=self.lora_name if lora_name is _INHERIT else lora_name,
            token_maps=maps,
        )

    def spawn_new_eos(self, eos_byte_strings: Sequence[bytes]) -> "PromptedLLM":
        """A copy whose EOS tokens are `eos_byte_strings`."""
        return self.spawn(eos_byte_strings=eos_byte_strings)

    def constrain(
        self,
        *,
        regex: str | None = None,
        lark: str | None = None,
        json_schema: Any = None,
        cache_size: int = 4096,
    ):
        """A Boolean constraint over this model's tokens from a compiled grammar engine
        (`GuidedConstraint`): give exactly one of `regex`, `lark`, `json_schema`.

        Use it as `llm * llm.constrain(...)`, as AWRS `condition`, or as a critic.

        Raises:
            ValueError: not exactly one grammar, or one the engine rejects (its message).
        """
        from genlm.control.potential.built_in.guided import GuidedConstraint

        grammars = {"regex": regex, "lark": lark, "json_schema": json_schema}
        given = {k: v for k, v in grammars.items() if v is not None}
        if len(given) != 1:
            raise ValueError(f"give exactly one of regex=, lark=, json_schema= (got {sorted(given)})")
        ((kind, source),) = given.items()
        build = {
            "regex": GuidedConstraint.from_regex,
            "lark": GuidedConstraint.from_lark,
            "json_schema": GuidedConstraint.from_json_schema,
        }[kind]
        return build(self, source, cache_size=cache_size)

    def __repr__(self) -> str:
        return (
            f"PromptedLLM(|V|={len(self.vocab)}, prompt={len(self._prompt_ids)} tokens, "
            f"T={self._temperature}, eos={[bytes(t) for t in self.token_maps.eos_tokens]!r})"
        )


def _retrieve(future: asyncio.Future) -> None:
    """Mark a future's exception as seen (its caller may have been cancelled)."""
    if not future.cancelled():
        future.exception()


def _unique(keys: Sequence[tuple]) -> tuple[list, np.ndarray]:
    index: dict = {}
    inverse = np.fromiter(
        (index.setdefault(k, len(index)) for k in keys), dtype=np.intp, count=len(keys)
    )
    return list(index), inverse


def _max_positions(model: Any) -> int | None:
    """The longest sequence a Hugging Face model can read (None when unknown)."""
    config = getattr(getattr(model, "model", None), "config", None)
    for name in ("n_positions", "max_position_embeddings"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _eos_alias(eos_byte_strings, eos_tokens, stacklevel: int = 3):
    if eos_tokens is None:
        return eos_byte_strings
    warnings.warn(
        "eos_tokens= is deprecated; use eos_byte_strings=",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    if eos_byte_strings is not None:
        raise ValueError("give eos_byte_strings or eos_tokens (deprecated), not both")
    return eos_tokens


def _default_eos(llm: AsyncLM) -> Token:
    eos_id = llm.tokenizer.eos_token_id
    if eos_id is None:
        raise ValueError("the tokenizer has no EOS token: pass eos_byte_strings")
    return llm.byte_vocab[eos_id]


def _start_id(llm: AsyncLM) -> int:
    tok = llm.tokenizer
    start = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    if start is None:
        raise ValueError("the tokenizer has neither BOS nor EOS token: give a non-empty prompt")
    return start


def _check_lora(llm: AsyncLM, lora_name: str | None) -> str | None:
    if lora_name is None:
        return None
    if not isinstance(lora_name, str):
        raise TypeError(f"lora_name must be a str, got {lora_name!r}")
    if type(llm).add_new_lora is AsyncLM.add_new_lora:
        raise ValueError(
            f"LoRA adapter {lora_name!r} requested, but {type(llm).__name__} does not support LoRA adapters"
        )
    return lora_name


__all__ = ["PromptedLLM", "TokenMaps", "build_token_maps", "load_model", "BACKENDS"]
