"""The real-tokenizer checks (`realtok_cases.py`) on a vLLM engine over the Llama-shaped
model with Mistral 7B's SentencePiece vocabulary (32,000 pieces, byte fallback: ids
3-258 are `<0x00>`..`<0xFF>`), built by `toys/real_tokenizers.py`. One engine for the
module. Checks whose result does not depend on the backend, as they read no LM rows (the converted
tokenizer against the original, the regex/Lark/JSON engine coercions pinned to the
generic ones), run once, on the HF backend, in `tests/realtok`; see `realtok_cases.py`."""

import pytest
from realtok_cases import *  # noqa: F403 (the shared tests)
from realtok_cases import start

KIND = "spm"


@pytest.fixture(scope="module")
def kind():
    return KIND


@pytest.fixture(scope="module")
def byte_base():
    return 3


@pytest.fixture(scope="module")
def runs():
    """Seeded SMC runs per sampler."""
    return 96


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
