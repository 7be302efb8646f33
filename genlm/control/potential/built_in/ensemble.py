"""Alias of `genlm.control.lm.ensemble`, kept so the import path
from before the subpackage split, `genlm.control.potential.built_in.ensemble`,
works: it only re-exports that module's public names."""

from genlm.control.lm.ensemble import Ensemble

__all__ = ["Ensemble"]
