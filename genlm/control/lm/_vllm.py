"""`VLLMBackend`: a genlm-backend `AsyncLM` over vLLM's public V1 engine API.

Particles decode in place. A query whose ids are new to the engine starts a request
whose prompt is its ids (`max_tokens` up to the engine's length, temperature 0,
`ignore_eos`); a logits processor (`_vllm_capture.RowCapture`, passed as
`logits_processors=[cls]`) stores `log_softmax(logits)` of the request's row on the
engine's device, which answers the query. The request is then *live*: its step is
held until the next pass of queries, and a query of that pass that extends its ids
by one token `t` makes the processor force `t` (vLLM appends the token SMC drew, and
the next step computes only that token's position, as vLLM's own decode does). Live
requests that no query of a stepping pass continues are aborted; a clone made by
resampling, whose parent already continues, starts a new request (vLLM's prefix
cache shares the blocks); a particle that ended (EOS) asks nothing and its request is
aborted. Queries that extend nothing live (a user's `logw_next` on any context, a
critic's look-ahead) start requests too, which end at the next pass. A held step
waits `live_idle_s` seconds at most for the next pass, then ends its requests. The
mechanism and why it is exact are in `_vllm_driver`; the queries of one event-loop
pass are joined by a `Window` into one job for the engine thread.

Only public vLLM names are used: `EngineArgs`, `LLMEngine` (`add_request`, `step`,
`abort_request`, `has_unfinished_requests`, `add_lora`, `remove_lora`,
`reset_prefix_cache`, `engine_core.shutdown`), `SamplingParams`, `RequestOutputKind`,
`LoRARequest`, `vllm.inputs.engine.tokens_input` and both logits-processor
interfaces (the legacy V1 runner's and Model Runner V2's); on the CPU build, the CPU
attention backend's list of head sizes is read where present, to refuse a model it
cannot run before the engine starts. The engine runs in this process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so the captured rows are the engine's own tensors.

The rows of recently evaluated queries are kept (`row_cache_rows` of them, least
recently used first out, about `ROW_CACHE_BYTES` of device memory), as the HF
backend keeps its rows: SMC reads the row after a particle's new token twice (the
default end twist prices ending there, and the next step draws from it), and a row
is a function of the query's ids and adapter alone. `clear_cache()` and any change
of an adapter drop them.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import threading
from collections import OrderedDict
from typing import Any, Sequence

import torch
from genlm.backend.llm import AsyncLM

from genlm.control._host_blocks import kept_stack
from genlm.control.lm._errors import PromptTooLongError
from genlm.control.lm._kv_cache import id_keys
from genlm.control.lm._vllm_capture import ROW_KEY, Capture, capture_class
from genlm.control.lm._vllm_checks import (
    _cpu_head_sizes,
    _hidden_from_kernel_scan,
    _unscannable,
    check_head_size,
    check_one_process,
    check_vocabulary,
)
from genlm.control.lm._vllm_driver import Driver
from genlm.control.window import Window

#: Device memory the kept rows may take (at least 16 rows are kept).
ROW_CACHE_BYTES = 256 * 2**20


class VLLMBackend(AsyncLM):
    """Next-token log probabilities from an in-process vLLM V1 engine.

    The genlm-backend API of `AsyncVirtualLM` is kept (`tokenizer`, `byte_vocab`,
    `next_token_logprobs`, `batch_next_token_logprobs`, their `_sync` forms,
    `add_new_lora` / `remove_lora`, `clear_cache`); rows are float32 tensors on
    the engine's device, of the model's vocabulary width.

    Build it with `from_name`. `close()` shuts the engine down and frees it, after
    which another engine can start in the same process.

    Attributes:
        engine: the `vllm.LLMEngine`.
        max_model_len: the engine's longest sequence; a query reads at most
            `max_model_len - 1` tokens (vLLM keeps one position for the token it samples).
        in_place: whether live requests are continued (off where the engine chunks
            prefills, schedules asynchronously or decodes speculatively; then every
            query is a one-token request).
        runner: "v2" (Model Runner V2) or "v1" (the legacy V1 model runner).
        live_idle_s: how long a held step waits for the next pass.
        steps: engine steps taken; engine_seconds: time spent in vLLM's
            `add_request`, `abort_request` and `step`, less the time steps were held
            (the rest of a sampler step is ours); continued: queries answered by
            continuing a live request; started: requests started.
        row_cache_rows: how many evaluated rows are kept; row_hits: queries
            answered from them without an engine request.
    """

    #: `PromptedLLM` hands its queries over as `Ids` (see `id_keys`)
    reads_ids_keys = True

    def __init__(self, engine: Any, tokenizer: Any, capture: Capture, in_place: bool = True):
        super().__init__(tokenizer)
        self.engine = engine
        self._capture = capture
        self._sink = capture.sink
        self._loras: dict[str, Any] = {}
        self._lora_ids = itertools.count(1)
        self.max_model_len = int(engine.model_config.max_model_len)
        self.vocab_size = int(engine.model_config.get_vocab_size())
        self.runner = "v2" if getattr(engine.vllm_config, "use_v2_model_runner", False) else "v1"
        self._window: Window = Window(self._flush)
        self.steps = 0
        self.engine_seconds = 0.0
        self.closed = False
        self._rows: OrderedDict[tuple, torch.Tensor] = OrderedDict()
        self._rows_lock = threading.Lock()  # the engine thread and callers share the kept rows
        self.row_cache_rows = max(16, ROW_CACHE_BYTES // (4 * max(self.vocab_size, 1)))
        self.row_hits = 0
        self._driver = Driver(
            engine, capture, self._add_request, in_place and _decodes_in_place(engine), self
        )

    @classmethod
    def from_name(cls, model_name: str, engine_opts: dict | None = None, **kwargs) -> "VLLMBackend":
        """Start an engine on `model_name` (a local directory or a Hugging Face name).

        Args:
            engine_opts: `vllm.EngineArgs` fields (e.g. `max_model_len`, `dtype`,
                `gpu_memory_utilization`, `enable_lora`, `block_size`);
                keyword arguments are merged into them. Prefix caching is on, and
                chunked prefill and async scheduling off, unless set here (either
                on turns in-place decoding off). `in_place=False` makes every
                query a one-token request.

        Raises:
            ValueError: the tokenizer has more tokens than the model's vocabulary,
                options that put the workers in other processes (a parallel size
                above 1), or on vLLM's CPU build an attention head size its kernels do
                not take; all checked before the engine starts; any option vLLM rejects.
            TypeError: an option `EngineArgs` does not have.
        """
        opts = {**(engine_opts or {}), **kwargs}
        opts.pop("model", None)
        in_place = bool(opts.pop("in_place", True))
        check_one_process(opts)
        # In-process engine (the rows are its tensors); vLLM picks its model runner
        # (V2 where it runs; the CPU build has only the legacy V1 runner).
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        from transformers import AutoConfig, AutoTokenizer
        from vllm import EngineArgs, LLMEngine

        if _cpu_head_sizes() is not None:
            os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"
        tokenizer_name = opts.get("tokenizer") or model_name
        trust = bool(opts.get("trust_remote_code", False))
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_name, trust_remote_code=trust)
        config = AutoConfig.from_pretrained(model_name, trust_remote_code=trust)
        check_vocabulary(
            len(tokenizer),
            getattr(config.get_text_config(), "vocab_size", None),
            tokenizer_name,
            model_name,
        )
        check_head_size(config.get_text_config(), model_name, _cpu_head_sizes())
        capture = Capture()
        opts["logits_processors"] = list(opts.get("logits_processors") or []) + [
            capture_class(capture)
        ]
        opts.setdefault("enable_prefix_caching", True)
        opts.setdefault("enable_chunked_prefill", False)
        opts.setdefault("async_scheduling", False)
        opts.setdefault("disable_log_stats", True)
        args = EngineArgs(model=model_name, **opts)
        with _hidden_from_kernel_scan():
            engine = LLMEngine.from_engine_args(args)
        return cls(engine, tokenizer, capture, in_place)

    # Queries ----------------------------------------------------------------

    async def next_token_logprobs(self, token_ids, lora_name=None) -> torch.Tensor:
        """`log p(· | token_ids)` as a float32 tensor, batched with concurrent calls."""
        return (await self.batch_next_token_logprobs([token_ids], lora_name=lora_name))[0]

    async def batch_next_token_logprobs(self, token_ids_list, lora_name=None) -> torch.Tensor:
        """`[len(token_ids_list), V]` next-token log probabilities; concurrent calls made
        in one event-loop pass share one engine batch."""
        keys = self._check(token_ids_list, lora_name)
        return await self._window.submit((keys, lora_name))

    def next_token_logprobs_sync(self, token_ids, lora_name=None) -> torch.Tensor:
        return self.batch_next_token_logprobs_sync([token_ids], lora_name=lora_name)[0]

    def batch_next_token_logprobs_sync(self, token_ids_list, lora_name=None) -> torch.Tensor:
        keys = self._check(token_ids_list, lora_name)
        rows = self.evaluate([(k, lora_name) for k in keys])
        return kept_stack([rows[(k, lora_name)] for k in keys])

    async def _flush(self, requests: list[tuple[list, Any]]) -> list[torch.Tensor]:
        wanted = [(k, lora) for keys, lora in requests for k in keys]
        rows = self._kept(wanted)
        if rows is None:
            try:
                rows = await asyncio.wrap_future(self._driver.submit("rows", wanted))
            except asyncio.CancelledError:
                # the caller's run is cancelled mid-step: end the live requests now
                # (not after live_idle_s; other runs' next queries start new requests)
                self._driver.submit("call", fn=_nothing)
                raise
        return [kept_stack([rows[(k, lora)] for k in keys]) for keys, lora in requests]

    def _kept(self, wanted: Sequence[tuple]) -> dict | None:
        """The kept rows of `wanted` if every one is kept (answered on the caller's
        thread: the live requests stay held), else None."""
        with self._rows_lock:
            kept = self._rows
            if not all(item in kept for item in wanted):
                return None
            for item in wanted:
                kept.move_to_end(item)
            self.row_hits += len(set(wanted))
            return {item: kept[item] for item in wanted}

    def _check(self, token_ids_list, lora_name) -> list[tuple]:
        if self.closed:
            raise RuntimeError("the vLLM engine is closed")
        if lora_name is not None and lora_name not in self._loras:
            raise ValueError(f"unknown LoRA adapter {lora_name!r}; register it with add_new_lora()")
        keys = []
        limit = self.max_model_len - 1
        for key in id_keys(token_ids_list):
            if len(key) > limit:
                raise PromptTooLongError(
                    f"a query of {len(key)} tokens is longer than the engine allows: "
                    f"max_model_len={self.max_model_len} leaves {limit} tokens to read "
                    "(raise max_model_len or shorten the prompt)"
                )
            checked = key.below is not None and key.below <= self.vocab_size  # by `PromptedLLM`
            if not checked and (min(key) < 0 or max(key) >= self.vocab_size):
                raise ValueError(f"token ids must lie in [0, {self.vocab_size}), got {key!r}")
            keys.append(key)
        return keys

    # Evaluation -------------------------------------------------------------

    @property
    def in_place(self) -> bool:
        return self._driver.in_place

    @property
    def continued(self) -> int:
        return self._driver.continued

    @property
    def started(self) -> int:
        return self._driver.started

    @property
    def live_idle_s(self) -> float:
        return self._driver.idle_s

    @live_idle_s.setter
    def live_idle_s(self, seconds: float) -> None:
        self._driver.idle_s = float(seconds)

    def live_requests(self) -> int:
        """How many of our requests the engine holds now."""
        return len(self._driver.context)

    def evaluate(self, wanted: Sequence[tuple[tuple, str | None]]) -> dict[tuple, torch.Tensor]:
        """The row of each distinct `(ids, lora_name)` in `wanted` (blocking)."""
        if self.closed:
            raise RuntimeError("the vLLM engine is closed")
        rows = self._kept(wanted)
        return rows if rows is not None else self._driver.submit("rows", list(wanted)).result()

    def release(self) -> None:
        """End the live requests now (blocking); the next queries start new ones."""
        self._call(lambda: None)

    def _call(self, fn):
        """Run `fn()` on the engine thread between steps, the live requests ended."""
        if self.closed:
            raise RuntimeError("the vLLM engine is closed")
        return self._driver.submit("call", fn=fn).result()

    def _add_request(self, rid: str, item: tuple, max_tokens: int) -> None:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=0.0,
            ignore_eos=True,
            detokenize=False,
            output_kind=RequestOutputKind.FINAL_ONLY,
            extra_args={ROW_KEY: rid},
        )
        lora = None if item[1] is None else self._loras[item[1]]
        self.engine.add_request(rid, _token_input(item[0]), params, lora_request=lora)

    # Adapters, cache, shutdown ----------------------------------------------

    def add_new_lora(self, lora_path, lora_name="lora_1"):
        """Register the LoRA adapter at `lora_path` as `lora_name` (the engine must have
        been started with `enable_lora=True`)."""
        if self.engine.vllm_config.lora_config is None:
            raise ValueError(
                f"LoRA adapter {lora_name!r}: this vLLM engine was started without LoRA; "
                "pass engine_opts={'enable_lora': True} (and max_lora_rank) to from_name"
            )
        from vllm.lora.request import LoRARequest

        request = LoRARequest(lora_name, next(self._lora_ids), str(lora_path))

        def register():
            self._loras[lora_name] = request
            self._forget(lora_name)

        self._call(register)

    def remove_lora(self, lora_name):
        if lora_name not in self._loras:
            raise ValueError(f"unknown LoRA adapter {lora_name!r}")

        def remove():
            request = self._loras.pop(lora_name)
            self._forget(lora_name)
            self.engine.remove_lora(request.lora_int_id)

        self._call(remove)

    def _forget(self, lora_name) -> None:
        """Drop the kept rows read under the adapter `lora_name` (engine thread)."""
        with self._rows_lock:
            for item in [k for k in self._rows if k[1] == lora_name]:
                del self._rows[item]

    def clear_cache(self) -> None:
        """End the live requests, drop the kept rows and vLLM's cached prefix blocks."""
        if self.closed:
            self._rows.clear()
            return

        def clear():
            with self._rows_lock:
                self._rows.clear()
            self.engine.reset_prefix_cache()

        self._call(clear)

    def close(self) -> None:
        """End the live requests, shut the engine down and free it (idempotent)."""
        if self.closed:
            return
        self.closed = True
        engine, self.engine = self.engine, None
        try:
            self._driver.stop()
            engine.engine_core.shutdown()
        finally:
            del engine
            self._driver.engine = self._driver.backend = None
            self._sink.clear()
            self._rows.clear()
            gc.collect()

    def __enter__(self) -> "VLLMBackend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _nothing() -> None:
    """A job that only ends the live requests."""


def _decodes_in_place(engine: Any) -> bool:
    """Whether every step's row of a request is the row of its whole context, with the
    token forced at the previous step appended: no chunked prefill, no asynchronous
    scheduling, no speculative decoding."""
    config = engine.vllm_config
    scheduler = config.scheduler_config
    if getattr(scheduler, "enable_chunked_prefill", False) or getattr(
        scheduler, "async_scheduling", False
    ):
        return False
    return getattr(config, "speculative_config", None) is None


def _token_input(ids: tuple) -> dict:
    """The engine input of a token-id prompt (vLLM's current request input, which
    its `add_request` takes without the raw-prompt deprecation)."""
    try:
        from vllm.inputs.engine import tokens_input
    except ImportError:  # an older vLLM: a raw token prompt
        return {"prompt_token_ids": list(ids)}
    return tokens_input(list(ids))


__all__ = [
    "ROW_KEY",
    "VLLMBackend",
    "_hidden_from_kernel_scan",
    "_unscannable",
    "check_head_size",
    "check_one_process",
    "check_vocabulary",
]
