"""`ByteLLM`: a token-level language model seen byte by byte, through genlm-bytes' beam."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, NamedTuple, Sequence

import numpy as np
from genlm.backend.llm import AsyncLM
from genlm.bytes import BeamParams, ByteBeamState

from genlm.control._cleanup import Cleaned, cleaned
from genlm.control._lru import LRU
from genlm.control.potential.base import Potential
from genlm.control.weights import NEG_INF, LazyWeights, logsumexp
from genlm.control.window import gather_or_cancel

N_BYTES = 256
BYTE_VOCAB = [bytes([i]) for i in range(N_BYTES)]


def _byte_tables():
    """One-byte `bytes` tokens (0.4.1's vocabulary), with byte values (ints) as a second
    name of each token: `w[97]` is `w[b"a"]`, as before."""
    tables = Potential.build_tables(BYTE_VOCAB)
    return dataclasses.replace(tables, fallback={i: i for i in range(N_BYTES)})


_TABLES = None


def byte_tables():
    """The shared tables of every `ByteLLM` (built once)."""
    global _TABLES
    if _TABLES is None:
        _TABLES = _byte_tables()
    return _TABLES


class BeamEntry(NamedTuple):
    """The pruned beam after a context, and (once asked) its next-byte row over `vocab_eos`."""

    beam: ByteBeamState
    row: np.ndarray | None


def next_byte_row(ps: np.ndarray) -> np.ndarray:
    """A row over bytes + EOS from genlm-bytes' 258 log probabilities.

    `ps` is indexed by byte (0..255), end of token (256) and EOS (257); the end-of-token
    entry is dropped and the rest renormalized:
    `row = [ps[0..255], ps[257]] - logsumexp([ps[0..255], ps[257]])`.
    """
    ps = np.asarray(ps, dtype=np.float64)
    row = np.append(ps[:N_BYTES], ps[N_BYTES + 1])
    z = logsumexp(row)
    return row - z if np.isfinite(z) else row


def context_bytes(context: Sequence[Any]) -> bytes:
    """A context of byte values (ints 0..255, or one-byte `bytes`) as `bytes`.

    Raises:
        TypeError: a token that is neither.
    """
    out = bytearray()
    for t in context:
        if isinstance(t, (int, np.integer)) and not isinstance(t, bool) and 0 <= t < N_BYTES:
            out.append(int(t))
        elif isinstance(t, bytes) and len(t) == 1:
            out += t
        else:
            raise TypeError(
                f"token {t!r} is not a byte value 0..255; ByteLLM reads contexts like list(b'...')"
            )
    return bytes(out)


class ByteLLM(Potential):
    """A token-level LM as a distribution over byte strings, via genlm-bytes' beam.

    The vocabulary is the 256 one-byte `bytes` (0.4.1's; a context may also hold byte
    values 0..255, and `logw_next(ctx)[97]` is `logw_next(ctx)[b"a"]`). After `prompt + ctx` the beam of
    token-level paths consistent with those bytes (at most `beam_params.K`, pruned
    below `beam_params.prune_threshold`) gives the next-byte distribution `q`
    (`next_byte_row`), and

        logw_next(ctx) = log q(· | prompt + ctx)          (bytes and EOS)
        prefix(ctx) = Σ_i log q(ctx[i] | prompt + ctx[:i])
        complete(ctx) = prefix(ctx) + log q(EOS | prompt + ctx)

    so the potential is a locally normalized distribution over finished byte strings
    and keeps the potential contract exactly for every beam width. Without pruning
    (`K` at least the number of live paths, threshold 0) `prefix(ctx)` is the LM's
    probability that its text starts with `ctx` (summed over tokenizations); with
    pruning it approximates it.

    The pruned beam after each context is carried in an LRU of `cache_size` entries,
    so extending a context by one byte costs one beam step.

    Args:
        llm: a genlm-backend `AsyncLM`.
        beam_params: genlm-bytes `BeamParams`; when it names no EOS byte strings the
            tokenizer's EOS token ends a sequence.
        cache_size: the most beams kept.
        prompt: bytes (or text, UTF-8 encoded) the model is conditioned on.

    Raises:
        TypeError: `llm` is not an `AsyncLM`, `beam_params` not `BeamParams`.
        ValueError: a cache size below 1, no EOS for the tokenizer.
    """

    def __init__(
        self,
        llm: AsyncLM,
        beam_params: BeamParams,
        cache_size: int = 1024,
        prompt: bytes | str | None = None,
    ):
        if not isinstance(llm, AsyncLM):
            raise TypeError(f"llm must be a genlm-backend AsyncLM, got {type(llm).__name__}")
        if not isinstance(beam_params, BeamParams):
            raise TypeError(
                f"beam_params must be a genlm.bytes.BeamParams, got {type(beam_params).__name__}"
            )
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
            raise ValueError(f"cache_size must be a positive int, got {cache_size!r}")
        self.llm = llm
        self.beam_params = _with_eos(llm, beam_params)
        self.cache_size = cache_size
        super().__init__(tables=byte_tables())
        self._root: asyncio.Future | None = None
        self._root_row: np.ndarray | None = None
        self._cache: LRU[bytes, BeamEntry] = LRU(cache_size)
        self._prompt = b""
        self.set_prompt(prompt or b"")

    @classmethod
    def from_name(
        cls,
        name: str,
        beam_params: BeamParams,
        backend: str | None = None,
        cache_size: int = 1024,
        **kwargs,
    ) -> "ByteLLM":
        """Load a model by name (the embedded model's name included) and wrap it.

        `backend` and `**kwargs` are as for `PromptedLLM.from_name`.
        """
        from genlm.control.lm._llm_loading import load_model

        return cls(load_model(name, backend, **kwargs), beam_params, cache_size=cache_size)

    # Prompt -------------------------------------------------------------------

    @property
    def prompt_bytes(self) -> bytes:
        """The bytes the model is conditioned on (assigning it is `set_prompt`)."""
        return self._prompt

    @prompt_bytes.setter
    def prompt_bytes(self, prompt: bytes | str) -> None:
        self.set_prompt(prompt)

    def set_prompt(self, prompt: bytes | str) -> None:
        """Condition on `prompt` (text is UTF-8 encoded); cached beams are dropped."""
        if isinstance(prompt, str):
            prompt = prompt.encode("utf-8")
        if not isinstance(prompt, (bytes, bytearray)):
            raise TypeError(f"prompt must be bytes or str, got {type(prompt).__name__}")
        if bytes(prompt) != self._prompt or self._root is None:
            self._prompt = bytes(prompt)
            self._root = None
            self._root_row = None
            self._cache.clear()

    def set_prompt_from_str(self, prompt_str: str) -> None:
        """Condition on the UTF-8 bytes of `prompt_str`."""
        if not isinstance(prompt_str, str):
            raise TypeError(f"prompt must be a str, got {type(prompt_str).__name__}")
        self.set_prompt(prompt_str)

    # Beams ----------------------------------------------------------------------

    async def _root_beam(self) -> ByteBeamState:
        """The beam after the prompt; concurrent first callers share one computation."""
        root = self._root
        if root is not None and root.done() and not root.cancelled() and root.exception() is None:
            return root.result()
        if root is None or root.done() or root.get_loop() is not asyncio.get_running_loop():
            self._root = root = asyncio.ensure_future(self._make_root())
        return await asyncio.shield(root)

    async def _make_root(self) -> ByteBeamState:
        beam = await ByteBeamState.initial(self.llm, self.beam_params)
        if self._prompt:
            beam = await beam.prefill(self._prompt)
        return beam.prune()

    async def _entry(self, data: bytes) -> BeamEntry:
        """The carried beam after `prompt + data`, from the longest cached prefix."""
        k = len(data)
        while k > 0 and data[:k] not in self._cache:
            k -= 1
        if k == 0:
            entry = BeamEntry(await self._root_beam(), None)
        else:
            entry = self._cache.get(data[:k])
        for j in range(k, len(data)):
            beam = (await (entry.beam << data[j])).prune()
            if len(beam) == 0:
                raise ValueError(
                    f"Beam became empty after {self._prompt + data[: j + 1]!r}: no tokenization "
                    f"of these bytes survived; use a wider beam (BeamParams.K), a lower "
                    f"prune_threshold, or BeamParams(heal=True)"
                )
            entry = BeamEntry(beam, None)
            self._cache.put(data[: j + 1], entry)
        return entry

    async def _row(self, data: bytes) -> np.ndarray:
        entry = await self._entry(data)
        if entry.row is None:
            if not data and self._root_row is not None:
                return self._root_row
            entry = BeamEntry(entry.beam, next_byte_row((await entry.beam.logp_next()).ps))
            if data:
                self._cache.put(data, entry)
            else:
                self._root_row = entry.row
        return entry.row

    # Weights --------------------------------------------------------------------

    async def logw_next(self, context: list) -> LazyWeights:
        """`log q(· | prompt + ctx)` over the bytes and EOS."""
        return self.make_lazy_weights(np.array(await self._row(context_bytes(context))))

    async def _path(self, context: Sequence[Any], finished: bool) -> float:
        data = context_bytes(context)
        rows = await gather_or_cancel(*(self._row(data[:i]) for i in range(len(data) + finished)))
        total = 0.0
        for i, row in enumerate(rows):
            total += row[data[i]] if i < len(data) else row[N_BYTES]
            if total == NEG_INF:
                break
        return float(total)

    async def prefix(self, context: list) -> float:
        """`Σ_i log q(ctx[i] | prompt + ctx[:i])`."""
        return await self._path(context, False)

    async def complete(self, context: list) -> float:
        """`prefix(ctx) + log q(EOS | prompt + ctx)`."""
        return await self._path(context, True)

    # Copies -----------------------------------------------------------------------

    def spawn(self) -> "ByteLLM":
        """A copy over the same model with the same parameters and prompt (own beam cache)."""
        return ByteLLM(self.llm, self.beam_params, self.cache_size, self._prompt)

    async def __aenter__(self) -> "ByteLLM":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        self.cleanup()

    def cleanup(self) -> Cleaned:
        """Stop the byte trie's batching task and drop the cached beams (also on leaving
        `async with ByteLLM.from_name(...) as byte_llm:`)."""
        root = self._root
        if root is not None and root.done() and not root.cancelled() and root.exception() is None:
            for state in root.result():
                state.trie.shutdown()
        self._cache.clear()
        self._root = None
        self._root_row = None
        return cleaned()

    def __repr__(self) -> str:
        return f"ByteLLM(K={self.beam_params.K}, prompt={len(self._prompt)} bytes)"


def _with_eos(llm: AsyncLM, params: BeamParams) -> BeamParams:
    if params.eos_byte_strings:
        return params
    eos_id = llm.tokenizer.eos_token_id
    if eos_id is None:
        raise ValueError("the tokenizer has no EOS token: give BeamParams(eos_byte_strings=...)")
    return dataclasses.replace(params, eos_byte_strings=[bytes(llm.byte_vocab[eos_id])])


__all__ = ["ByteLLM"]
