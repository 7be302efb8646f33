"""Alias of `genlm.control.lm.bytelm`, kept so the import path from
before the subpackage split, `genlm.control.potential.built_in.bytelm`, works: it
only re-exports that module's public names."""

from genlm.control.lm.bytelm import ByteLLM

__all__ = ["ByteLLM"]
