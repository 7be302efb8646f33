"""Loading a genlm-backend `AsyncLM` for `PromptedLLM`, and facts read off it."""

from __future__ import annotations

import importlib.util
import os
import socket
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from genlm.control.embedded import resolve

if TYPE_CHECKING:  # torch and genlm-backend are imported on use: seconds at start-up
    from genlm.backend.llm import AsyncLM
    from genlm.backend.tokenization.token import Token

BACKENDS = ("hf", "vllm", "mock")
_TRUE = {"1", "on", "yes", "true"}


class ModelNotAvailableError(OSError, ValueError):
    """A model that is neither a local directory nor in the Hugging Face cache, and cannot
    be downloaded (downloads are off, or the Hub cannot be reached). It is both an
    `OSError` (what a missing model raised before) and a `ValueError` (a bad name)."""


def load_model(name: str, backend: str | None = None, **kwargs) -> AsyncLM:
    """Load a genlm-backend `AsyncLM` for `name` (the embedded model's name is resolved).

    The HF backend is a `CachedTransformer`: the queries of one event-loop pass share
    one forward over just the tokens each sequence adds to its cached key/value states.

    Raises:
        TypeError: `name` is not a str or path.
        ValueError: unknown backend, empty name.
        ModelNotAvailableError (an OSError and a ValueError): a model that is not found
            locally and cannot be downloaded; raised before transformers is called.
        ImportError: `backend="vllm"` without the `vllm` package.
    """
    name = check_name(name)
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
    require_available(name, path, _cache_dir(kwargs))
    if backend == "vllm" and not _vllm_importable():
        raise ImportError(
            "the vLLM backend needs the vllm package: `pip install \"genlm-control[vllm]\"` "
            "on CUDA, or the CPU build (see docs/vllm.md); or use backend='hf'"
        )
    from genlm.backend.llm import MockAsyncLM

    try:
        if backend == "hf":
            from genlm.control.lm._hf_batch import CachedTransformer

            return CachedTransformer.from_name(path, **kwargs)
        if backend == "mock":
            return MockAsyncLM.from_name(path, **kwargs)
        from genlm.control.lm._vllm import VLLMBackend

        return VLLMBackend.from_name(path, **kwargs)
    except (OSError, ValueError) as exc:
        if os.path.isdir(path):
            raise
        offline = " (downloads are off: HF_HUB_OFFLINE is set)" if _offline() else ""
        raise ModelNotAvailableError(
            f"model {name!r} could not be found locally (it is neither a model directory "
            f"nor in the Hugging Face cache) or fetched from the Hub{offline}"
        ) from exc


def check_name(name: Any) -> str:
    """`name` as a str.

    Raises:
        TypeError: not a str or `os.PathLike`; ValueError: empty.
    """
    if not isinstance(name, (str, os.PathLike)):
        raise TypeError(f"name must be a model name or a local path (a str), got {name!r}")
    name = os.fspath(name)
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name must be a non-empty model name or local path, got {name!r}")
    return name


def require_available(name: str, path: str, cache_dir: str | None = None) -> None:
    """Fail at once for a model that cannot be loaded without the network when there is
    none: `path` is not a directory, not in the Hugging Face cache, and downloads are
    off (`HF_HUB_OFFLINE`) or the Hub does not answer a TCP connection within 3 s.

    Raises:
        ModelNotAvailableError: such a model (or a name that is neither a directory nor
            a Hugging Face model id).
    """
    if os.path.isdir(path):
        return
    from huggingface_hub import constants
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(path)
    except HFValidationError:
        raise ModelNotAvailableError(
            f"model {name!r} could not be found locally: it is not a model directory, "
            "nor a Hugging Face model name of the form 'org/name'"
        ) from None
    cache = cache_dir or constants.HF_HUB_CACHE
    if os.path.isdir(os.path.join(cache, "models--" + path.replace("/", "--"))):
        return
    if _offline():
        why = "downloads are off (HF_HUB_OFFLINE is set)"
    elif not _hub_reachable(constants.ENDPOINT):
        why = f"the Hugging Face Hub ({constants.ENDPOINT}) cannot be reached"
    else:
        return
    raise ModelNotAvailableError(
        f"model {name!r} is not available offline: it could not be found locally (not a "
        f"model directory, not in the Hugging Face cache {cache}) and {why}; download it "
        "once with network access, or pass a local model directory"
    )


def _offline() -> bool:
    from huggingface_hub import constants

    flags = (os.environ.get(k, "").strip().lower() for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    return bool(constants.HF_HUB_OFFLINE) or any(f in _TRUE for f in flags)


def _hub_reachable(endpoint: str, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the Hub's host opens within `timeout` seconds (True
    when a proxy is configured: the proxy, not this host, reaches the Hub)."""
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urlsplit(endpoint)
    if not url.hostname:
        return True
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((url.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


def _cache_dir(kwargs: dict) -> str | None:
    hf_opts = kwargs.get("hf_opts")
    opts = hf_opts if isinstance(hf_opts, dict) else {}
    return kwargs.get("cache_dir") or opts.get("cache_dir")


def _vllm_importable() -> bool:
    """Whether the vllm package is installed (a bare `vllm` folder on the path, a
    namespace package, is not it)."""
    spec = importlib.util.find_spec("vllm")
    return spec is not None and spec.origin is not None


def _vllm_usable() -> bool:
    """Whether the default backend is vLLM: CUDA and the vllm package."""
    if not _vllm_importable():
        return False
    import torch

    return torch.cuda.is_available()


def _max_positions(model: Any) -> int | None:
    """The longest sequence a model can read (None when unknown): a vLLM engine's
    `max_model_len - 1` (one position is kept for the token it samples), else the
    Hugging Face config's position count."""
    engine_len = getattr(model, "max_model_len", None)
    if isinstance(engine_len, int) and engine_len > 1:
        return engine_len - 1
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
    from genlm.backend.llm import AsyncLM

    if type(llm).add_new_lora is AsyncLM.add_new_lora:
        raise ValueError(
            f"LoRA adapter {lora_name!r} requested, but {type(llm).__name__} does not support LoRA adapters"
        )
    return lora_name


__all__ = ["BACKENDS", "ModelNotAvailableError", "check_name", "load_model", "require_available"]
