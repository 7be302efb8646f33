"""The embedded model on the HF backend, with its forward in plain torch (fast start-up).

`EmbeddedTransformer` is a `CachedTransformer` whose model is `TinyGPT2` (the shipped
weights, read without transformers' modeling code) and whose tokenizer is the
shipped one, loaded by transformers' `AutoTokenizer` as the HF backend loads it. Its
rows are those of `PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")` up to float
rounding, and its byte vocabulary is the same (tests/lm/test_embedded_forward.py pins
both). The command line uses it; it skips the two seconds of CPU that importing
transformers' GPT-2 module costs.
"""

from __future__ import annotations

from typing import Any, Sequence

from genlm.control.embedded import model_path
from genlm.control.embedded.gpt2 import Cache, TinyGPT2
from genlm.control.lm._hf_batch import CachedTransformer


class EmbeddedTransformer(CachedTransformer):
    """`CachedTransformer` over `TinyGPT2` (no LoRA adapters: use `from_name` for those)."""

    @classmethod
    def from_dir(cls, path: str | None = None, **kwargs) -> "EmbeddedTransformer":
        """The model in `path` (default: the embedded model's directory).

        Args:
            **kwargs: `CachedTransformer`'s `batch_size`, `cache_bytes`, `timeout`.
        """
        from transformers import AutoTokenizer

        path = model_path() if path is None else path
        return cls(TinyGPT2.from_dir(path), AutoTokenizer.from_pretrained(path), **kwargs)

    def _new_cache(self, pasts: Sequence[tuple]) -> Any:
        return Cache(pasts)

    def add_new_lora(self, lora_path, lora_name="lora_1"):
        raise ValueError(
            "EmbeddedTransformer does not support LoRA adapters: load the model with "
            "PromptedLLM.from_name(EMBEDDED_MODEL, backend='hf') for them"
        )


def uses_embedded_forward(backend: str | None) -> bool:
    """Whether `load_embedded(backend)` is an `EmbeddedTransformer`: `backend` is (or
    defaults to) the HF backend, and there is no CUDA device (with one, transformers
    places the model on the GPU)."""
    import torch

    from genlm.control.lm._llm_loading import _vllm_usable

    if backend is None:
        backend = "vllm" if _vllm_usable() else "hf"
    return backend == "hf" and not torch.cuda.is_available()


def load_embedded(backend: str | None = None, **kwargs) -> Any:
    """The embedded model's backend LM, as `load_model(EMBEDDED_MODEL, backend)` chooses
    it: an `EmbeddedTransformer` where `uses_embedded_forward(backend)`, else
    `load_model`'s."""
    from genlm.control.embedded import EMBEDDED_MODEL
    from genlm.control.lm._llm_loading import load_model

    if not uses_embedded_forward(backend):
        return load_model(EMBEDDED_MODEL, backend, **kwargs)
    return EmbeddedTransformer.from_dir(**kwargs)


__all__ = ["EmbeddedTransformer", "load_embedded", "uses_embedded_forward"]
