"""Alias of `genlm.control.engine.guided`, kept so the import path
from before the subpackage split, `genlm.control.potential.built_in.guided`, works:
it only re-exports that module's public names."""

from genlm.control.engine.guided import GuidedConstraint

__all__ = ["GuidedConstraint"]
