"""Alias of `genlm.control.constraints.fsa.wfsa`, kept so the import path from
before the subpackage split, `genlm.control.potential.built_in.wfsa`, works: it only
re-exports that module's public names."""

from genlm.control.constraints.fsa.wfsa import WFSA, BoolFSA

__all__ = ["WFSA", "BoolFSA"]
