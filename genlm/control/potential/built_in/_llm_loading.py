"""Loading a genlm-backend `AsyncLM` for `PromptedLLM`, and facts read off it."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import torch
from genlm.backend.llm import AsyncLM
from genlm.backend.tokenization.token import Token

from genlm.control.embedded import resolve

BACKENDS = ("hf", "vllm", "mock")


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


def _max_positions(model: Any) -> int | None:
    """The longest sequence a Hugging Face model can read (None when unknown)."""
    config = getattr(getattr(model, "model", None), "config", None)
    for name in ("n_positions", "max_position_embeddings"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


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


__all__ = ["BACKENDS", "load_model"]
