"""Language-model potentials: `PromptedLLM` with its Hugging Face runtime (batched
forwards over a prefix KV cache) and token maps, `ByteLLM`, `Ensemble`, and
`CanonicalTokenization` (the tokenizer's canonical encodings).

Submodules are imported on demand; the public names are exported lazily by
`genlm.control.potential.built_in`.
"""


def vllm_importable() -> bool:
    """Whether the vllm package can be imported here, found without importing it,
    torch or transformers (the command line asks before the model stack loads)."""
    from genlm.control.lm._llm_loading import _vllm_importable

    return _vllm_importable()
