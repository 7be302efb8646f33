"""Alias of `genlm.control.lm.llm`, kept so the import path from
before the subpackage split, `genlm.control.potential.built_in.llm`, works: it only
re-exports that module's public names."""

from genlm.control.lm.llm import PromptedLLM, load_model_by_name

__all__ = ["PromptedLLM", "load_model_by_name"]
