"""The vLLM backend's checks made before an engine starts, and the start-up hiding of
modules vLLM's kernel scan cannot read (no vllm import at module level)."""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator, Sequence


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


__all__ = ["check_head_size", "check_one_process", "check_vocabulary"]
