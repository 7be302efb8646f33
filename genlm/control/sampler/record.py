"""Alias of `genlm.control.smc.record` (its home); this path re-exports its names."""

from genlm.control.smc.record import (
    StepRecord,
    RunRecord,
    RecordError,
    Recorder,
    token_text,
    context_text,
    strict_json,
    FORMAT,
)

__all__ = [
    'StepRecord',
    'RunRecord',
    'RecordError',
    'Recorder',
    'token_text',
    'context_text',
    'strict_json',
    'FORMAT',
]
