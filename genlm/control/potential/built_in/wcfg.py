"""Alias of `genlm.control.constraints.cfg.wcfg`, kept so the import path from
before the subpackage split, `genlm.control.potential.built_in.wcfg`, works: it only
re-exports that module's public names."""

from genlm.control.constraints.cfg.wcfg import WCFG, BoolCFG

__all__ = ["WCFG", "BoolCFG"]
