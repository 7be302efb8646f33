"""The tests' one conftest: offline model loading, and the embedded-model fixtures
shared across directories (test potentials live in the `toys` package)."""

import os

import pytest

from genlm.control import PromptedLLM
from genlm.control.embedded import EMBEDDED_MODEL

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def llm():
    """The embedded model on the Hugging Face backend (a module may define its own)."""
    return PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")


@pytest.fixture(scope="module")
def pieces(llm):
    """bytes → a vocabulary token with those bytes (every single byte has one)."""
    out = {}
    for t in llm.vocab:
        out.setdefault(bytes(t), t)
    return out
