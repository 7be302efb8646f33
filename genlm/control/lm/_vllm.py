"""`VLLMBackend`: a genlm-backend `AsyncLM` over vLLM's public V1 engine API.

Each next-token query is one engine request for one greedy token (`max_tokens=1`)
whose prompt is the query's token ids. A V1 logits processor (`RowCapture`,
passed as `logits_processors=[cls]`) sees the batch's float32 logits on the
engine's device before sampling; `update_state` keeps which batch slot holds
which of our requests (named in `SamplingParams.extra_args`), and `apply` stores
`log_softmax(logits[slot])` for each of them, on that device. A request's row is
the one captured at its last step (a prompt prefilled in chunks passes through
`apply` once per chunk, and only the last chunk's row is the next-token row).

vLLM's prefix cache stands in for the HF backend's key/value cache: a query that
extends an evaluated sequence recomputes only the blocks past their shared
prefix. The queries of one event-loop pass are joined by a `Window` into one
batch of requests, stepped until every one has finished; nothing runs in the
background, so a cancelled caller cannot interrupt a batch half way (a failing
step aborts the batch's unfinished requests and the engine stays usable).

Only public vLLM names are used: `EngineArgs`, `LLMEngine` (`add_request`,
`step`, `abort_request`, `add_lora`, `remove_lora`, `reset_prefix_cache`,
`engine_core.shutdown`), `SamplingParams`, `LoRARequest` and the logits
processor interface; on the CPU build, the CPU attention backend's list of head
sizes is read where present, to refuse a model it cannot run before the engine
starts. The engine runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so
the captured rows are the engine's own tensors, on vLLM's V1 model runner (`VLLM_USE_V2_MODEL_RUNNER=0`; the V2
runner takes logits processors of another interface).

The rows of recently evaluated queries are kept (`row_cache_rows` of them, least
recently used first out, about `ROW_CACHE_BYTES` of device memory), as the HF
backend keeps its rows: SMC reads the row after a particle's new token twice (the
default end twist prices ending there, and the next step draws from it), and a row
is a function of the query's ids and adapter alone. `clear_cache()` and any change
of an adapter drop them.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import sys
import time
from collections import OrderedDict
from typing import Any, Iterator, Sequence

import torch
from genlm.backend.llm import AsyncLM

from genlm.control.window import Window

#: The key of `SamplingParams.extra_args` that marks a request whose row is captured.
ROW_KEY = "genlm_control_row"
#: Device memory the kept rows may take (at least 16 rows are kept).
ROW_CACHE_BYTES = 256 * 2**20
_ids = itertools.count()


def _capture_class(sink: dict[str, torch.Tensor]) -> type:
    """A logits-processor class that stores each marked request's row in `sink`."""
    from vllm.v1.sample.logits_processor import LogitsProcessor, MoveDirectionality

    class RowCapture(LogitsProcessor):
        """Stores `log_softmax(logits)` of every request marked with `ROW_KEY`; the
        logits are left as they are."""

        def __init__(self, vllm_config, device, is_pin_memory):
            self.slots: dict[int, str] = {}

        def is_argmax_invariant(self) -> bool:
            # False, so that `apply` runs for greedy requests too.
            return False

        def update_state(self, batch_update) -> None:
            if batch_update is None:
                return
            slots = self.slots
            for index in batch_update.removed:
                slots.pop(index, None)
            for index, params, _, _ in batch_update.added:
                extra = getattr(params, "extra_args", None) or {}
                rid = extra.get(ROW_KEY)
                if rid is None:
                    slots.pop(index, None)
                else:
                    slots[index] = rid
            for a, b, direction in batch_update.moved:
                at_a, at_b = slots.pop(a, None), slots.pop(b, None)
                if at_a is not None:
                    slots[b] = at_a
                if at_b is not None and direction == MoveDirectionality.SWAP:
                    slots[a] = at_b

        def apply(self, logits: torch.Tensor) -> torch.Tensor:
            if self.slots:
                order = sorted(self.slots)
                index = torch.tensor(order, device=logits.device)
                rows = torch.log_softmax(logits.index_select(0, index).float(), dim=-1)
                for j, slot in enumerate(order):
                    sink[self.slots[slot]] = rows[j]
            return logits

    return RowCapture


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
        steps: engine steps taken; engine_seconds: time spent in vLLM's
            `add_request` and `step` (the rest of a sampler step is ours).
        row_cache_rows: how many evaluated rows are kept; row_hits: queries
            answered from them without an engine request.
    """

    def __init__(self, engine: Any, tokenizer: Any, sink: dict[str, torch.Tensor]):
        super().__init__(tokenizer)
        self.engine = engine
        self._sink = sink
        self._loras: dict[str, Any] = {}
        self._lora_ids = itertools.count(1)
        self.max_model_len = int(engine.model_config.max_model_len)
        self.vocab_size = int(engine.model_config.get_vocab_size())
        self._window: Window = Window(self._flush)
        self.steps = 0
        self.engine_seconds = 0.0
        self.closed = False
        self._rows: OrderedDict[tuple, torch.Tensor] = OrderedDict()
        self.row_cache_rows = max(16, ROW_CACHE_BYTES // (4 * max(self.vocab_size, 1)))
        self.row_hits = 0

    @classmethod
    def from_name(cls, model_name: str, engine_opts: dict | None = None, **kwargs) -> "VLLMBackend":
        """Start an engine on `model_name` (a local directory or a Hugging Face name).

        Args:
            engine_opts: `vllm.EngineArgs` fields (e.g. `max_model_len`, `dtype`,
                `gpu_memory_utilization`, `enable_lora`, `block_size`);
                keyword arguments are merged into them. Prefix caching is on and
                async scheduling off unless set here.

        Raises:
            ValueError: the tokenizer has more tokens than the model's vocabulary,
                options that put the workers in other processes (a parallel size
                above 1), or on vLLM's CPU build an attention head size its kernels do
                not take; all checked before the engine starts; any option vLLM rejects.
            TypeError: an option `EngineArgs` does not have.
        """
        opts = {**(engine_opts or {}), **kwargs}
        opts.pop("model", None)
        check_one_process(opts)
        # In-process engine (the rows are its tensors), on the V1 model runner (the
        # runner that takes V1 logits processors).
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"
        from transformers import AutoConfig, AutoTokenizer
        from vllm import EngineArgs, LLMEngine

        tokenizer_name = opts.get("tokenizer") or model_name
        trust = bool(opts.get("trust_remote_code", False))
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_name, trust_remote_code=trust)
        config = AutoConfig.from_pretrained(model_name, trust_remote_code=trust)
        check_vocabulary(len(tokenizer), getattr(config.get_text_config(), "vocab_size", None), tokenizer_name, model_name)
        check_head_size(config.get_text_config(), model_name, _cpu_head_sizes())
        sink: dict[str, torch.Tensor] = {}
        capture = _capture_class(sink)
        opts["logits_processors"] = list(opts.get("logits_processors") or []) + [capture]
        opts.setdefault("enable_prefix_caching", True)
        opts.setdefault("async_scheduling", False)
        opts.setdefault("disable_log_stats", True)
        args = EngineArgs(model=model_name, **opts)
        with _hidden_from_kernel_scan():
            engine = LLMEngine.from_engine_args(args)
        return cls(engine, tokenizer, sink)

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
        return torch.stack([rows[(k, lora_name)] for k in keys])

    async def _flush(self, requests: list[tuple[list, Any]]) -> list[torch.Tensor]:
        wanted = [(k, lora) for keys, lora in requests for k in keys]
        rows = self.evaluate(wanted)
        return [torch.stack([rows[(k, lora)] for k in keys]) for keys, lora in requests]

    def _check(self, token_ids_list, lora_name) -> list[tuple]:
        if self.closed:
            raise RuntimeError("the vLLM engine is closed")
        if lora_name is not None and lora_name not in self._loras:
            raise ValueError(f"unknown LoRA adapter {lora_name!r}; register it with add_new_lora()")
        keys = []
        limit = self.max_model_len - 1
        for ids in token_ids_list:
            key = tuple(map(int, ids))
            if not key:
                raise ValueError("Token ids must not be empty")
            if len(key) > limit:
                raise ValueError(
                    f"a query of {len(key)} tokens is longer than the engine allows: "
                    f"max_model_len={self.max_model_len} leaves {limit} tokens to read "
                    "(raise max_model_len or shorten the prompt)"
                )
            if min(key) < 0 or max(key) >= self.vocab_size:
                raise ValueError(f"token ids must lie in [0, {self.vocab_size}), got {key!r}")
            keys.append(key)
        return keys

    # Evaluation -------------------------------------------------------------

    def evaluate(self, wanted: Sequence[tuple[tuple, str | None]]) -> dict[tuple, torch.Tensor]:
        """The row of each distinct `(ids, lora_name)` in `wanted`: a kept row, or one
        from a batch of engine requests stepped until all have finished."""
        rows: dict[tuple, torch.Tensor] = {}
        missing = []
        for item in dict.fromkeys(wanted):
            row = self._rows.get(item)
            if row is None:
                missing.append(item)
            else:
                self._rows.move_to_end(item)
                rows[item] = row
                self.row_hits += 1
        if missing:
            fresh = self._run(missing)
            for item in missing:
                # a captured row is a view of its batch's tensor: keep a copy of its own
                rows[item] = self._rows[item] = fresh[item].clone()
            while len(self._rows) > self.row_cache_rows:
                self._rows.popitem(last=False)
        return rows

    def _run(self, wanted: list[tuple[tuple, str | None]]) -> dict[tuple, torch.Tensor]:
        """The rows of the distinct queries `wanted`, from the engine."""
        from vllm import SamplingParams

        pending: dict[str, tuple] = {}
        try:
            for item in wanted:
                rid = f"genlm-{next(_ids)}"
                params = SamplingParams(
                    max_tokens=1, temperature=0.0, detokenize=False, extra_args={ROW_KEY: rid}
                )
                lora = None if item[1] is None else self._loras[item[1]]
                start = time.perf_counter()
                self.engine.add_request(rid, {"prompt_token_ids": list(item[0])}, params, lora_request=lora)
                self.engine_seconds += time.perf_counter() - start
                pending[rid] = item
            rows: dict[tuple, torch.Tensor] = {}
            while pending:
                start = time.perf_counter()
                outputs = self.engine.step()
                self.engine_seconds += time.perf_counter() - start
                self.steps += 1
                for out in outputs:
                    if out.finished and out.request_id in pending:
                        item = pending.pop(out.request_id)
                        rows[item] = self._sink.pop(out.request_id)
                if not outputs and pending and not self.engine.has_unfinished_requests():
                    raise RuntimeError(f"the vLLM engine dropped {len(pending)} requests")
            return rows
        finally:
            if pending:
                self.engine.abort_request(list(pending))
                for rid in pending:
                    self._sink.pop(rid, None)

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

        self._loras[lora_name] = LoRARequest(lora_name, next(self._lora_ids), str(lora_path))
        self._forget(lora_name)

    def remove_lora(self, lora_name):
        request = self._loras.pop(lora_name, None)
        if request is None:
            raise ValueError(f"unknown LoRA adapter {lora_name!r}")
        self._forget(lora_name)
        self.engine.remove_lora(request.lora_int_id)

    def _forget(self, lora_name) -> None:
        """Drop the kept rows read under the adapter `lora_name`."""
        for item in [k for k in self._rows if k[1] == lora_name]:
            del self._rows[item]

    def clear_cache(self) -> None:
        """Drop the kept rows and vLLM's cached prefix blocks."""
        self._rows.clear()
        if not self.closed:
            self.engine.reset_prefix_cache()

    def close(self) -> None:
        """Shut the engine down and free it (idempotent)."""
        if self.closed:
            return
        self.closed = True
        engine, self.engine = self.engine, None
        try:
            engine.engine_core.shutdown()
        finally:
            del engine
            self._sink.clear()
            self._rows.clear()
            gc.collect()

    def __enter__(self) -> "VLLMBackend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def _hidden_from_kernel_scan() -> Iterator[None]:
    """Modules that vLLM's start-up scan of `sys.modules` cannot read, out of
    `sys.modules` while the engine starts.

    On a CPU without Triton, vLLM rebinds its Triton kernels to C++ ones by
    reading `vars(value).get("kernel")` for every attribute of every loaded module;
    an attribute whose `__dict__` is not a dict (llvmlite's `ffi.lib`, loaded with
    numba by genlm-backend) makes that start fail with an AttributeError. Those
    modules are left out of the scan (nothing else is changed) and put back after.
    """
    hidden = {name: m for name, m in list(sys.modules.items()) if _unscannable(name, m)}
    for name in hidden:
        del sys.modules[name]
    try:
        yield
    finally:
        for name, module in hidden.items():
            sys.modules.setdefault(name, module)


def _unscannable(name: str, module: Any) -> bool:
    """Whether vLLM's scan (`hasattr(value, "__dict__")`, then
    `vars(value).get("kernel")` for each attribute) fails on `module` (vLLM's and
    torch's own modules are never hidden)."""
    if name.split(".")[0] in ("vllm", "torch"):
        return False
    namespace = getattr(module, "__dict__", None)
    if not namespace:
        return False
    for value in list(namespace.values()):
        try:
            if hasattr(value, "__dict__"):
                vars(value).get("kernel")
        except Exception:
            return True
    return False


def check_one_process(opts: dict) -> None:
    """The rows are read in the engine's own process: no engine whose workers run elsewhere.

    Raises:
        ValueError: a parallel size above 1, or an executor other than "uni".
    """
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        if opts.get(key, 1) not in (None, 1):
            raise ValueError(
                f"{key}={opts[key]!r}: the vLLM backend reads each row in the engine's own "
                "process, so it runs one engine on one device (the size must be 1)"
            )
    backend = opts.get("distributed_executor_backend")
    if backend not in (None, "uni"):
        raise ValueError(
            f"distributed_executor_backend={backend!r}: the vLLM backend runs its engine in "
            "this process (use 'uni' or leave it unset)"
        )


def check_vocabulary(n_tokens: int, vocab_size: int | None, tokenizer: str, model: str) -> None:
    """A tokenizer must not have more tokens than the model has logits.

    Raises:
        ValueError: `n_tokens > vocab_size`.
    """
    if vocab_size is not None and n_tokens > vocab_size:
        raise ValueError(
            f"the tokenizer {tokenizer!r} has {n_tokens} tokens but the model {model!r} "
            f"has a vocabulary of {vocab_size}: they do not match (pass the model's own tokenizer)"
        )


def check_head_size(config: Any, model: str, supported: Sequence[int] | None) -> None:
    """The model's attention head size must be one the engine's attention kernels take
    (`supported`; None where unknown, and then nothing is checked).

    Raises:
        ValueError: a head size outside `supported`.
    """
    if supported is None:
        return
    heads = getattr(config, "num_attention_heads", None)
    size = getattr(config, "head_dim", None) or (config.hidden_size // heads if heads else None)
    if size is not None and int(size) not in supported:
        raise ValueError(
            f"the model {model!r} has attention heads of {size} dimensions, which vLLM's CPU "
            f"attention does not take (it takes {sorted(supported)}): use backend='hf' for it"
        )


def _cpu_head_sizes() -> list[int] | None:
    """The head sizes of vLLM's CPU attention backend on its CPU build; None elsewhere
    (on CUDA, vLLM picks among several attention backends itself) or where this vLLM
    does not list them."""
    try:
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return None
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        return [int(n) for n in CPUAttentionBackend.get_supported_head_sizes()]
    except (ImportError, AttributeError):
        return None


__all__ = ["ROW_KEY", "VLLMBackend", "check_head_size", "check_one_process", "check_vocabulary"]
