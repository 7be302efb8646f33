"""Context-free potentials: `WCFG` / `BoolCFG` (Earley parsing over bytes) and the Lark
grammar reader.

The reader's names that other folders use (`read_lark` for the CLI, `LarkGrammar`
and the `%ignore` helpers for the engine's exactness check in `engine/`) are
exported here, lazily; the potentials are exported lazily by
`genlm.control.potential.built_in`. Submodules are imported on demand.
"""

from genlm.control._lazy import lazy_exports

_LARK = "genlm.control.constraints.cfg._cfg_lark"
_EXPORTS = {
    "LarkGrammar": _LARK,
    "read_lark": _LARK,
    "ignore_stop_bytes": _LARK,
    "ignore_blocks_are_plain": _LARK,
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
