"""Fixtures over the two real-tokenizer models (`toys.real_tokenizers`): each is built
once per machine (cached under the system's temporary directory) and loaded once per
test session on the Hugging Face backend."""

import os

import pytest
from toys.real_tokenizers import KINDS, model_dir

from genlm.control import PromptedLLM

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("mistral_common")

_LOADED: dict = {}


def load(kind: str) -> PromptedLLM:
    """The `kind` model as a `PromptedLLM` (HF backend), loaded once per session."""
    if kind not in _LOADED:
        _LOADED[kind] = PromptedLLM.from_name(str(model_dir(kind)), backend="hf")
    return _LOADED[kind]


@pytest.fixture(scope="session")
def spm_llm() -> PromptedLLM:
    """Mistral 7B's SentencePiece vocabulary (32,000 pieces, byte fallback)."""
    return load("spm")


@pytest.fixture(scope="session")
def tekken_llm() -> PromptedLLM:
    """Mistral NeMo's byte-level BPE (131,072 tokens)."""
    return load("tekken")


@pytest.fixture(scope="session", params=KINDS)
def kind(request) -> str:
    """Each real-tokenizer kind in turn."""
    return request.param


@pytest.fixture(scope="session")
def real_llm(kind) -> PromptedLLM:
    """The `kind` model."""
    return load(kind)


@pytest.fixture(scope="session")
def first_token(real_llm) -> dict:
    """bytes → the vocabulary token of lowest id with those bytes."""
    out: dict = {}
    for t in real_llm.vocab:
        out.setdefault(bytes(t), t)
    return out
