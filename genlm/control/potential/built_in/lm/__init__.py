"""Language-model potentials: `PromptedLLM` with its Hugging Face runtime (batched
forwards over a prefix KV cache) and token maps, `ByteLLM`, `Ensemble`, and
`CanonicalTokenization` (the tokenizer's canonical encodings).

Submodules are imported on demand; the public names are exported lazily by
`genlm.control.potential.built_in`.
"""
