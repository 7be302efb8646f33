"""The real-tokenizer checks (`realtok_cases.py`) on a vLLM engine over the Llama-shaped
model with Mistral NeMo's tekken byte-level BPE (131,072 tokens: 1,000 special tokens,
then the 256 bytes at ids 1000-1255, then merged pieces), built by
`toys/real_tokenizers.py`. One engine for the module. Checks whose result does not depend on the backend, as they read no LM rows (the converted
tokenizer against the original, the regex/Lark/JSON engine coercions pinned to the
generic ones), run once, on the HF backend, in `tests/realtok`; see `realtok_cases.py`."""

import pytest
from realtok_cases import *  # noqa: F403 (the shared tests)
from realtok_cases import start

KIND = "tekken"


@pytest.fixture(scope="module")
def kind():
    return KIND


@pytest.fixture(scope="module")
def byte_base():
    return 1000


@pytest.fixture(scope="module")
def runs():
    """Seeded SMC runs per sampler: half the SentencePiece module's, as a step over
    131,072 tokens costs more (the bound is σ-based, so it holds at any count)."""
    return 48


@pytest.fixture(scope="module")
def backends():
    vllm, hf = start(KIND)
    yield vllm, hf
    vllm.model.close()


@pytest.fixture(scope="module")
def vllm(backends):
    return backends[0]


@pytest.fixture(scope="module")
def hf(backends):
    return backends[1]
