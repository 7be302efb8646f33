"""Shared fixtures for the constraint potentials' tests: the embedded model's vocabulary."""

import functools
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@functools.lru_cache(maxsize=1)
def _embedded_tokenizer():
    from transformers import AutoTokenizer

    from genlm.control.embedded import model_path

    if not os.path.exists(os.path.join(model_path(), "tokenizer.json")) and not os.path.exists(
        os.path.join(model_path(), "vocab.json")
    ):
        return None
    return AutoTokenizer.from_pretrained(model_path())


def embedded_tokenizer():
    """The embedded model's tokenizer (skips the test when the model is not shipped)."""
    tok = _embedded_tokenizer()
    if tok is None:
        pytest.skip("the embedded model is not available in this checkout")
    return tok


@functools.lru_cache(maxsize=1)
def _vocab():
    from genlm.backend.tokenization import decode_vocab

    tok = embedded_tokenizer()
    byte_vocab, _ = decode_vocab(tok)
    eos = tok.eos_token_id
    return [t for t in byte_vocab if t.token_id != eos]


def embedded_vocab():
    """The embedded model's tokens (genlm-backend `Token`s), without its EOS token."""
    return _vocab()
