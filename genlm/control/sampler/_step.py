"""Alias of the batched SMC step, whose home is `genlm.control.smc.step` (loaded on first access)."""

from typing import Any

from genlm.control._lazy import lazy_exports

_EXPORTS = {
    "SlotStreams": "genlm.control.smc.step",
    "step_many": "genlm.control.smc.particle",
    "step_all": "genlm.control.smc.particle",
}

_exported, __dir__ = lazy_exports(__name__, _EXPORTS)


def __getattr__(name: str) -> Any:
    if name == "_retrying":
        from genlm.control.smc.step import retrying

        return retrying
    return _exported(name)


__all__ = [*_EXPORTS, "_retrying"]  # noqa: F822  (served by __getattr__)
