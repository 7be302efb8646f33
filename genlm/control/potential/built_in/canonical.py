"""Alias of `genlm.control.lm.canonical`, kept so the import path
from before the subpackage split, `genlm.control.potential.built_in.canonical`,
works: it only re-exports that module's public names."""

from genlm.control.lm.canonical import CanonicalTokenization

__all__ = ["CanonicalTokenization"]
