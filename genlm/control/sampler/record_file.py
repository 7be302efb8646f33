"""Alias of `genlm.control.smc.record_file`, the module's home; this path serves its names on first access."""

from genlm.control._lazy import lazy_exports

_EXPORTS = {
    "RecordNotWrittenWarning": "genlm.control.smc.record_file",
    "check_output_path": "genlm.control.smc.record_file",
    "write_text_atomically": "genlm.control.smc.record_file",
    "write_record_or_warn": "genlm.control.smc.record_file",
    "read_text_file": "genlm.control.smc.record_file",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
