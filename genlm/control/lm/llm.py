"""`PromptedLLM`: a language model, conditioned on a prompt, as a potential over its tokens."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any, Sequence

import numpy as np
import torch
from genlm.backend.llm import AsyncLM
from genlm.backend.tokenization.token import Token

from genlm.control._device import to_host
from genlm.control._held import HeldByRuns
from genlm.control._warn import warn_user
from genlm.control.lm._errors import PromptTooLongError
from genlm.control.lm._llm_loading import (
    _check_lora,
    _default_eos,
    _max_positions,
    _start_id,
    load_model,
)
from genlm.control.lm._rows_memo import ContextKeys, ContextTails, LastRows, compose
from genlm.control.lm._text_encoding import continuation_encoder
from genlm.control.lm._threads import intra_op_threads
from genlm.control.lm.chat import chat_prompt_ids
from genlm.control.lm.token_maps import (
    TokenMaps,
    build_token_maps,
    check_prompt_ids,
    check_rows,
    check_temperature,
    check_text,
    eos_of,
    next_token_rows,
    temper,
)
from genlm.control.potential.base import Potential
from genlm.control.weights import LazyWeights

_INHERIT: Any = object()  # spawn(): keep the parent's value


class PromptedLLMArgumentError(TypeError, ValueError):
    """A bad argument whose type differs between this package and genlm-control 0.4.1:
    a prompt that is not a str (ours: TypeError, 0.4.1: ValueError), or both
    `eos_byte_strings=` and the deprecated `eos_tokens=` (ours: ValueError, 0.4.1:
    TypeError). It is both, so code catching either type keeps working."""


class PromptedLLM(Potential, HeldByRuns):
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

    The prompt may change between runs, never during one: while an SMC run uses the
    model, setting a different prompt is a RuntimeError naming `spawn()` (each
    concurrent prompt needs its own copy).

    Args:
        llm: a genlm-backend `AsyncLM` (see `from_name`); as in genlm-control 0.4.1, any
            object with its `byte_vocab`, `tokenizer` and `batch_next_token_logprobs`
            (a test double, say) is accepted.
        prompt_ids: the prompt's token ids.
        eos_byte_strings: the byte strings (or `Token`s) that end a sequence;
            default the tokenizer's EOS token.
        temperature: any finite `T > 0`; a tiny `T` (down to `5e-324`) is greedy
            decoding with finite weights (see `token_maps.temper`).
        lora_name: the LoRA adapter to query, per request (backends that support LoRA).
        token_maps: `TokenMaps` to share (from a `PromptedLLM` over the same model and EOS).
        rows: where `logw_next` rows live. `"auto"` (default): torch tensors on the
            model's device when that is an accelerator (float32, EOS folded in on
            the device; products, masks and draws stay there), float64 NumPy
            arrays on the host when the model runs on the CPU. `"device"`: tensors
            on the model's device, the CPU included. `"host"`: NumPy always.
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
        rows: str = "auto",
    ):
        if not isinstance(llm, AsyncLM) and not (
            hasattr(llm, "byte_vocab") and hasattr(llm, "tokenizer")
        ):
            raise TypeError(
                f"llm must be a genlm-backend AsyncLM (or an object with its byte_vocab, "
                f"tokenizer and next-token methods), got {type(llm).__name__}"
            )
        eos_byte_strings = _eos_alias(eos_byte_strings, eos_tokens)
        self.model = llm
        self._last_rows = LastRows()  # the latest block of rows, for the next call
        self._context_keys = ContextKeys()  # the latest calls' keys, for the next call
        self._context_tails = ContextTails()  # the latest calls' contexts' ids
        self._scored_setting: tuple | None = None  # the setting `_scored_keys` hold sums under
        self._scored_keys = ContextKeys()  # the keys scored by `_batch_logp`, with their sums
        self.temperature = temperature
        self.lora_name = _check_lora(llm, lora_name)
        if token_maps is None:
            if eos_byte_strings is None:
                eos_byte_strings = [_default_eos(llm)]
            token_maps = build_token_maps(llm.byte_vocab, eos_byte_strings)
        elif eos_byte_strings is not None:
            raise ValueError(
                "eos_byte_strings must not be provided when token_maps is provided: the "
                "token maps already fix the EOS tokens"
            )
        self.token_maps = token_maps
        self.rows = check_rows(rows)
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
        rows: str = "auto",
        **kwargs,
    ) -> "PromptedLLM":
        """Load a model by name or path and wrap it.

        Args:
            name: a Hugging Face name, a local directory, or the embedded model's name
                (`genlm.control.embedded.EMBEDDED_MODEL`).
            backend: "hf", "vllm" or "mock"; default "vllm" where CUDA and vllm are
                available, else "hf".
            rows: where rows live (`"auto"`, `"device"`, `"host"`; see the class).
            **kwargs: passed to the backend's `from_name` (e.g. `hf_opts`, `cache_bytes`,
                vLLM's `engine_opts`); `llm_opts={...}` is accepted and merged, as
                genlm-backend's `load_model_by_name` spells it.

        Raises:
            TypeError: `name` is not a str (None, say).
            ValueError: unknown backend, bad temperature, EOS not in the vocabulary.
            ModelNotAvailableError (an OSError and a ValueError): a model that is not
                found locally and cannot be downloaded (offline, or no network); it is
                raised at once, before transformers is called.
            ImportError: backend="vllm" without the vllm package.
        """
        eos_byte_strings = _eos_alias(eos_byte_strings, eos_tokens, stacklevel=3)
        check_temperature(temperature)
        check_rows(rows)
        model = load_model(name, backend, **kwargs)
        return cls(model, prompt_ids, eos_byte_strings, temperature, lora_name=lora_name, rows=rows)

    # Settings ---------------------------------------------------------------

    @property
    def temperature(self) -> float:
        return self._temperature

    @temperature.setter
    def temperature(self, value: float) -> None:
        self._temperature = check_temperature(value)

    @property
    def eos_byte_strings(self) -> list[bytes]:
        """The EOS entries this model was built with, as plain bytes (read-only: use
        `spawn_new_eos` for other EOS tokens)."""
        return list(self.token_maps.eos_byte_strings)

    @eos_byte_strings.setter
    def eos_byte_strings(self, value: Any) -> None:
        raise ValueError(
            "Cannot reset eos_byte_strings after initialization: the vocabulary depends on "
            "them. Use spawn_new_eos(new_eos_byte_strings) for a copy with other EOS tokens"
        )

    @property
    def prompt_ids(self) -> list[int]:
        """The prompt's token ids (assign a list to change the prompt)."""
        return self._prompt_ids

    @prompt_ids.setter
    def prompt_ids(self, ids: Sequence[int]) -> None:
        ids = check_prompt_ids(ids, len(self.token_maps.decode))
        if self.runs_holding and ids != self._prompt_ids:
            raise RuntimeError(
                f"the prompt of this PromptedLLM cannot change while {self.runs_holding} SMC "
                "run(s) use it: the running one(s) would silently continue the new prompt. "
                "Give each concurrent run its own copy: `copy = llm.spawn()`, then "
                "`copy.set_prompt_from_str(...)` (or `llm.spawn(prompt_ids=...)`), and build "
                "that run's sampler over the copy"
            )
        self._prompt_ids = ids

    @property
    def _start(self) -> tuple:
        """The ids every query starts with: the prompt, or BOS when it is empty."""
        return tuple(self._prompt_ids) or (_start_id(self.model),)

    @property
    def prompt(self) -> list[Token]:
        """The prompt as tokens."""
        return self.decode_tokens(self._prompt_ids)

    def prompt_text(self) -> str:
        """The prompt as text (its token bytes decoded as UTF-8, bad bytes escaped)."""
        return b"".join(bytes(t) for t in self.prompt).decode("utf-8", errors="backslashreplace")

    def set_prompt_from_str(self, prompt_str: str) -> None:
        """Set the prompt to the tokenizer's encoding of `prompt_str` (with its special tokens).

        A prompt that ends with a space warns (`UserWarning`): BPE tokenizers attach a
        space to the word after it, so the model has rarely seen a lone trailing space.

        Raises:
            PromptedLLMArgumentError (a TypeError and a ValueError): not a str.
            ValueError: a lone surrogate (not valid Unicode).
        """
        if not isinstance(prompt_str, str):
            raise PromptedLLMArgumentError(
                f"Prompt must a string (0.4.1's words): the prompt must be a str, got "
                f"{type(prompt_str).__name__}; to set the prompt from token ids, assign llm.prompt_ids"
            )
        if prompt_str.endswith(" "):
            warn_user(
                "the prompt ends with a space: tokenizers attach a space to the next word "
                "(' world'), so the model rarely sees a lone trailing space; consider "
                "ending the prompt without it",
                UserWarning,
            )
        self.prompt_ids = self.model.tokenizer.encode(check_text(prompt_str, "prompt"))

    def set_prompt_from_messages(
        self, messages: Sequence[dict], add_generation_prompt: bool = True, **template_kwargs: Any
    ) -> None:
        """Set the prompt to `messages` rendered by the tokenizer's chat template, its
        special tokens as their single ids (`genlm.control.lm.chat.chat_prompt_ids`;
        `template_kwargs` such as `reasoning_effort=` or `enable_thinking=` go to the template)."""
        self.prompt_ids = chat_prompt_ids(
            self.model.tokenizer, messages, add_generation_prompt, **template_kwargs
        )

    # Tokens -----------------------------------------------------------------

    def tokenize(self, text: str) -> list[Token]:
        """The tokens of `text` as a continuation: no special tokens added, and no prefix
        space (a SentencePiece tokenizer's dummy `▁`), so their bytes are `text`'s UTF-8."""
        text = check_text(text, "text")
        return self.decode_tokens(continuation_encoder(self.model.tokenizer).encode(text))

    def encode_tokens(self, tokens: Sequence[Any]) -> list[int]:
        """Token ids of `tokens` (`Token`s by id; plain bytes, deprecated as in 0.4.1 and
        warned with a `DeprecationWarning`: the first id with those bytes).

        Raises:
            ValueError: a token the model does not have.
        """
        maps, ids, warned = self.token_maps, [], False
        for tok in tokens:
            if isinstance(tok, Token) and 0 <= tok.token_id < len(maps.decode):
                ids.append(tok.token_id)
                continue
            first = maps.encode.first_id(tok) if Token.is_plain_bytes(tok) else None
            if first is None:
                raise ValueError(
                    f"Token {tok!r} not in vocabulary: it is not in the language model's vocabulary"
                )
            if not warned:
                warn_user(
                    "Passing bytes to encode_tokens is deprecated: pass Tokens (from "
                    "llm.tokenize or llm.vocab), which name one token id each",
                    DeprecationWarning,
                )
                warned = True
            ids.append(first)
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
        return temper(await self._ask(keys, "batch_next_token_logprobs"), self._temperature)

    async def _logprobs_at(self, keys: Sequence[tuple]) -> tuple[torch.Tensor, np.ndarray | None]:
        """`(block, positions)`: the tempered log probabilities after `keys[i]` are row
        `positions[i]` of `block` (None: row `i`). A backend that can answer where its
        forward left the rows (`batch_next_token_logprobs_at`, the HF backend) is not
        asked to copy them into the keys' order: `next_token_rows` reads them in place."""
        if getattr(self.model, "batch_next_token_logprobs_at", None) is None:
            return await self._logprobs(keys), None
        block, positions = await self._ask(keys, "batch_next_token_logprobs_at")
        return temper(block, self._temperature), positions

    async def _ask(self, keys: Sequence[tuple], method: str) -> Any:
        """`self.model.<method>` of the id sequences (untempered), checked against the
        model's length and shielded."""
        kw = {} if self.lora_name is None else {"lora_name": self.lora_name}
        limit = _max_positions(self.model)
        longest = max((len(k) for k in keys), default=0)
        if limit is not None and longest > limit:
            raise PromptTooLongError(
                f"prompt and context are {longest} tokens, over the model's limit of "
                f"{limit} positions: shorten the prompt or lower max_tokens"
            )
        # Shielded: the backend may batch these queries with other prompts' queries and
        # set every result of the batch at once, which fails on a cancelled future and
        # would then fail the other prompts' queries too. A cancelled caller leaves its
        # queries to finish unobserved instead.
        # a backend that reads `Ids` keys (ours) gets them as they are: no copy, and
        # their hashes are already made; any other gets lists, as genlm-backend's take
        queries = keys if getattr(self.model, "reads_ids_keys", False) else [list(k) for k in keys]
        queries = asyncio.ensure_future(getattr(self.model, method)(queries, **kw))
        queries.add_done_callback(_retrieve)
        try:
            rows = await asyncio.shield(queries)
        except ValueError as exc:
            if self.lora_name is None:
                raise
            raise ValueError(
                f"LoRA adapter {self.lora_name!r} is not available on {type(self.model).__name__}: {exc}"
            ) from exc
        return rows

    async def _block_of(self, contexts: Sequence[list]) -> tuple[torch.Tensor, np.ndarray | None]:
        """The log probabilities after each context as `(block, order)`: context `i`'s
        are row `order[i]` of `block` (row `i` when `order` is None). One backend batch
        of the distinct contexts, or none when the latest block holds them all
        (`LastRows`)."""
        maps = self.token_maps
        # `Ids`: ints, hashed once however often the memo and the backend look them up,
        # the same objects for a context asked for again, made from the previous key
        # for one a token longer (`ContextKeys`); marked as checked against the
        # vocabulary (`context_ids` checks the contexts' ids, the prompt is checked once)
        tails = self._context_tails.tails(maps.context_ids, contexts)
        keys = self._context_keys.keys(self._start, tails, len(maps.decode))
        uniq, inverse = _unique(keys)
        block, positions = await self._last_rows.rows(uniq, self._rows_setting(), self._logprobs_at)
        return block, compose(positions, None if len(uniq) == len(keys) else inverse)

    def _rows_setting(self) -> tuple:
        """What a kept row or score depends on besides its ids: the model, its closed
        state (a closed backend answers nothing, kept rows included: its error names
        it), the temperature and the adapter."""
        return (id(self.model), bool(getattr(self.model, "closed", False)), self._temperature, self.lora_name)

    async def batch_logw_next(self, contexts: Sequence[list]) -> list[LazyWeights]:
        """`logw_next` of each context from one backend batch (one forward on HF)."""
        if not contexts:
            return []
        logprobs, order = await self._block_of(contexts)
        on_device = self.rows == "device" or (self.rows == "auto" and logprobs.device.type != "cpu")
        with intra_op_threads(getattr(self.model, "threads", None)):  # the backend's thread policy
            rows = next_token_rows(logprobs, self.token_maps, on_device, order)
        return self.rows_to_weights(rows)

    async def batch_eos_entries(self, contexts: Sequence[list]) -> np.ndarray:
        """`logw_next(ctx)[EOS]` of each context (NaN as `-inf`), without building the
        rows: the EOS tokens' log-sum-exp, read back in one transfer
        (`fast_paths.EosEntries`)."""
        if not contexts:
            return np.zeros(0)
        logprobs, order = await self._block_of(contexts)
        eos = to_host(eos_of(logprobs, self.token_maps))
        eos = eos if order is None else eos[order]
        return np.where(eos == eos, eos, float("-inf"))

    async def logw_next(self, context: list) -> LazyWeights:
        return (await self.batch_logw_next([context]))[0]

    async def _batch_logp(self, contexts: Sequence[list], finished: Sequence[bool]) -> np.ndarray:
        """`prefix` of each context, plus its EOS term where `finished`; one backend batch.

        `prefix(ctx)` is the sum, left to right, of `log p(ctx[i] | prompt + ctx[:i])`.
        A context one token longer than one this view scored in its latest calls (an
        SMC critic's particles, step after step) adds one term to the kept sum, from
        its parent's row; any other context picks every term from the rows of all its
        prefixes. Either way the same float64 additions run in the same order, so the
        sums are the same numbers; a critic's cost per step no longer grows with the
        length of the contexts. The sums are kept on the keys (`Ids.logp`) of a
        `ContextKeys` of this view's own, made again when the model, its temperature
        or its adapter changes.
        """
        maps, start = self.token_maps, self._start
        tails = self._context_tails.tails(maps.context_ids, contexts)
        setting = self._rows_setting()
        if setting != self._scored_setting:
            self._scored_setting, self._scored_keys = setting, ContextKeys()
        keys = self._scored_keys.keys(start, tails, len(maps.decode))
        head = len(start)
        rows: dict = {}  # the rows to ask for, by key
        picks: list[tuple[int, int, int]] = []  # (context, row, next id): the terms to add
        ends: list[tuple[int, int]] = []  # (context, row): the EOS terms, added after the sums
        base = np.zeros(len(contexts), dtype=np.float64)
        for k, (key, done) in enumerate(zip(keys, finished)):
            if key.logp is not None:  # scored already: no term to add
                base[k] = key.logp
            else:
                parent = key.parent
                if parent is not None and parent.logp is not None:
                    base[k] = parent.logp
                    picks.append((k, rows.setdefault(parent, len(rows)), key[-1]))
                else:
                    for n in range(head, len(key)):
                        picks.append((k, rows.setdefault(key[:n], len(rows)), key[n]))
            if done:
                ends.append((k, rows.setdefault(key, len(rows))))
        sums = base
        if rows:
            lp = await self._logprobs(list(rows))
            if picks:
                owner, r, col = np.array(picks, dtype=np.intp).T
                picked = to_host(lp[torch.as_tensor(r, device=lp.device), torch.as_tensor(col, device=lp.device)])
                sums = base + np.bincount(owner, picked, minlength=len(contexts))
        for key, value in zip(keys, sums.tolist()):
            key.logp = value
        if not ends:
            return sums
        owner, r = np.array(ends, dtype=np.intp).T
        eos = torch.logsumexp(lp[:, list(maps.eos_idxs)], dim=-1)
        total = sums.copy()
        total[owner] += to_host(eos[torch.as_tensor(r, device=lp.device)]).astype(np.float64)
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

    def __getstate__(self) -> dict:
        # The kept rows, keys and scores are caches: a copy starts without them rather
        # than carry a block of rows and two generations of keys along.
        state = super().__getstate__()
        state["_last_rows"], state["_context_keys"] = LastRows(), ContextKeys()
        state["_scored_setting"], state["_scored_keys"] = None, ContextKeys()
        state["_context_tails"] = ContextTails()
        return state

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
            rows=self.rows,
        )

    def spawn_new_eos(
        self,
        eos_byte_strings: Sequence[bytes] | None = None,
        *,
        eos_tokens: Sequence[bytes] | None = None,
    ) -> "PromptedLLM":
        """A copy whose EOS tokens are `eos_byte_strings` (`eos_tokens=`: deprecated alias).

        Raises:
            TypeError: no EOS given.
        """
        eos_byte_strings = _eos_alias(eos_byte_strings, eos_tokens)
        if eos_byte_strings is None:
            raise TypeError("spawn_new_eos needs eos_byte_strings (the new EOS tokens)")
        return self.spawn(eos_byte_strings=eos_byte_strings)

    def constrain(
        self,
        *,
        regex: str | None = None,
        lark: str | None = None,
        json_schema: Any = None,
        cache_size: int = 4096,
        spelling: str | None = None,
    ):
        """A Boolean constraint over this model's tokens from a compiled grammar engine
        (`GuidedConstraint`): give exactly one of `regex`, `lark`, `json_schema`.
        `spelling` (with `json_schema` only): how documents are spelled outside the
        schema's strings, "any" (the default), "compact" or "canonical", as for
        `JsonSchema` (the engine's nearest options; see docs/constraint-engines.md).

        Use it as `llm * llm.constrain(...)`, as AWRS `condition`, or as a critic.

        Raises:
            ValueError: not exactly one grammar, or one the engine rejects (its message),
                or `spelling` without `json_schema` or unknown.
        """
        # engine/ loads llguidance: imported on first use (lm/ sits above engine/).
        from genlm.control.engine.guided import GuidedConstraint

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
        if kind == "json_schema":
            return build(self, source, spelling=spelling or "any", cache_size=cache_size)
        if spelling is not None:
            raise ValueError("spelling= applies to json_schema= only (a JSON spelling)")
        return build(self, source, cache_size=cache_size)

    def compiled_coercion(self, constraint: Any, f: Any, engine: bool | None, form: Any):
        """The compiled token-mask route of `constraint.coerce(self, f, engine=engine)`
        (`fast_paths.CompiledCoercion`): this model hands its token maps to the engine,
        which serves `form` (the constraint's `EngineSource`) or returns None for the
        generic path.

        Raises:
            ValueError: `engine=True` and the engine cannot serve the constraint.
        """
        from genlm.control.engine.route import engine_coerce

        return engine_coerce(constraint, self.token_maps, f, engine, form)

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


def _eos_alias(eos_byte_strings, eos_tokens, stacklevel: int = 3):
    if eos_tokens is None:
        return eos_byte_strings
    if eos_byte_strings is not None:
        raise PromptedLLMArgumentError(
            "Cannot specify both eos_byte_strings and the deprecated eos_tokens: give eos_byte_strings"
        )
    warnings.warn(
        "eos_tokens= is deprecated; use eos_byte_strings=",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return eos_tokens


#: genlm-control 0.4.1's name of `load_model`: a genlm-backend `AsyncLM` by model name.
load_model_by_name = load_model

__all__ = ["PromptedLLM", "load_model_by_name"]
