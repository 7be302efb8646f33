"""The batched SMC step, moved to `genlm.control.smc.step` (names kept here)."""

from genlm.control.smc.particle import step_all, step_many
from genlm.control.smc.step import SlotStreams
from genlm.control.smc.step import retrying as _retrying

__all__ = ["SlotStreams", "step_many", "step_all", "_retrying"]
