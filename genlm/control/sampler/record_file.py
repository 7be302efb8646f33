"""Alias of `genlm.control.smc.record_file` (its home); this path re-exports its names."""

from genlm.control.smc.record_file import (
    RecordNotWrittenWarning,
    check_output_path,
    write_text_atomically,
    write_record_or_warn,
    read_text_file,
)

__all__ = [
    'RecordNotWrittenWarning',
    'check_output_path',
    'write_text_atomically',
    'write_record_or_warn',
    'read_text_file',
]
