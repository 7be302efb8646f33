"""Reasoning and chat models: constrain the answer, leave the thinking free.

- `HarmonyPotential` / `HarmonyChat`: gpt-oss's Harmony channels (0.4.1's API).
- `ThinkPotential` / `ThinkTags`: `<think>…</think>` models (Qwen3, DeepSeek-R1).
- `answer_posterior`: the posterior over answers with the thinking marginalized out.
"""

from genlm.control._lazy import lazy_exports

_EXPORTS = {
    "HarmonyPotential": "genlm.control.reasoning.harmony",
    "HarmonyChat": "genlm.control.reasoning.harmony",
    "ThinkPotential": "genlm.control.reasoning.think",
    "ThinkTags": "genlm.control.reasoning.think",
    "SectionedPotential": "genlm.control.reasoning.sections",
    "answer_posterior": "genlm.control.reasoning.answers",
    "answer_text": "genlm.control.reasoning.answers",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
