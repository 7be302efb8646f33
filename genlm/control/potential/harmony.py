"""0.4.1's import path of the Harmony potential (its home: `genlm.control.reasoning.harmony`)."""

from genlm.control.reasoning.harmony import HarmonyChat, HarmonyPotential

__all__ = ["HarmonyChat", "HarmonyPotential"]
