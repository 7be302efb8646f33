"""The real-tokenizer checks on vLLM rows, shared by `test_realtok_spm.py` and
`test_realtok_tekken.py` (each imports these tests and gives the fixtures `vllm`, the
model of its kind on a real vLLM engine, one per module; `hf`, the same model
directory on the Hugging Face backend, the reference; `kind`; `byte_base`, the id of
the byte token `0x00`; and `runs`, the number of seeded SMC runs per sampler).

What reads the LM's rows runs here: the byte vocabulary the vLLM backend builds
(duplicate byte tokens condition the model on their own ids), prompt round trips
through the engine, `CanonicalTokenization` over the vLLM backend's tokenizer, and the
exact enumeration of `tests/realtok/test_realtok_exactness.py` with seeded SMC of the
direct sampler and AWRS on vLLM rows. What does not read rows is checked once, on the
HF backend, in `tests/realtok`: the converted tokenizers against the originals and the
regex/Lark/JSON engine coercions pinned to the generic ones (a coercion reads only the
vocabulary, which the first test here pins equal to the HF backend's).
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from toys.real_tokenizers import model_dir
from toys.realtok_checks import (
    MAX_TOKENS,
    PATTERN,
    TEXTS,
    assert_unbiased,
    enumerate_target,
    random_texts,
    smc_ratios,
)
from toys.vllm_engine import engine_opts

from genlm.control import AWRS, BoolFSA, CanonicalTokenization, PromptedLLM, direct_token_sampler
from genlm.control.weights import NEG_INF

#: Rows of the two backends agree to this (float32 on both; measured ≤ 1e-5).
ROW_ATOL = 1e-4
PROMPT = "The value is"


def start(kind: str):
    """The `kind` model on a fresh vLLM engine, and on the HF backend."""
    pytest.importorskip("mistral_common")
    path = str(model_dir(kind))
    return PromptedLLM.from_name(path, backend="vllm", **engine_opts()), PromptedLLM.from_name(path, backend="hf")


def run(coro):
    return asyncio.run(coro)


def rows(llm, contexts) -> np.ndarray:
    return np.stack([np.asarray(r.weights) for r in run(llm.batch_logw_next(contexts))])


def first_tokens(llm) -> dict:
    """bytes → the vocabulary token of lowest id with those bytes."""
    out: dict = {}
    for t in llm.vocab:
        out.setdefault(bytes(t), t)
    return out


def test_vocabulary_is_the_hf_backends(vllm, hf, byte_base):
    """Token by token (id and bytes) and EOS; the 256 byte tokens decode to their byte."""
    assert [(t.token_id, bytes(t)) for t in vllm.vocab] == [(t.token_id, bytes(t)) for t in hf.vocab]
    assert vllm.token_maps.eos_idxs == hf.token_maps.eos_idxs
    decode = vllm.token_maps.decode
    assert [bytes(decode[byte_base + b]) for b in range(256)] == [bytes([b]) for b in range(256)]


def test_byte_tokens_condition_on_their_own_ids(vllm, hf, kind, byte_base):
    """SentencePiece's byte tokens duplicate one-byte pieces (`a` and `<0x61>`): two
    tokens, told apart by id, after which vLLM's rows differ from each other; the
    byte-level BPE has one token per byte. vLLM's rows after each equal the HF backend's."""
    decode = vllm.token_maps.decode
    byte_a = decode[byte_base + ord("a")]
    pieces = [t for t in vllm.vocab if bytes(t) == b"a" and t.token_id != byte_a.token_id]
    assert len(pieces) == (1 if kind == "spm" else 0)
    other = pieces[0] if pieces else vllm.tokenize(" a")[0]
    contexts = [[byte_a], [other], [byte_a, other], [other, byte_a]]
    got = rows(vllm, contexts)
    np.testing.assert_allclose(got, rows(hf, contexts), atol=ROW_ATOL)
    assert not np.allclose(got[0], got[1]) and not np.allclose(got[2], got[3])


def test_prompt_round_trips_on_vllm_rows(vllm, hf, kind):
    """Each text as a prompt: the HF backend's token ids (BOS first), its bytes after BOS
    (behind SentencePiece's dummy `▁`), decoded back to itself; vLLM's rows at the
    prompt and after the text's own continuation encoding equal the HF backend's."""
    tok = vllm.model.tokenizer
    prompted = []
    for text in TEXTS:
        a, b = vllm.spawn(), hf.spawn()
        a.set_prompt_from_str(text)
        b.set_prompt_from_str(text)
        assert a.prompt_ids == b.prompt_ids and a.prompt_ids[0] == tok.bos_token_id
        body = b"".join(bytes(t) for t in a.prompt[1:])
        assert body == (b" " if kind == "spm" else b"") + text.encode()
        assert tok.decode(a.prompt_ids, skip_special_tokens=True) == text
        cont = a.tokenize(text)
        assert b"".join(bytes(t) for t in cont) == text.encode()
        prompted.append((a, b, cont))

    async def all_rows(side: int) -> np.ndarray:
        """Rows at each prompt and after its text, all in one batch, on vLLM (0) or HF (1)."""
        calls = []
        for pair in prompted:
            llm, cont = pair[side], pair[2]
            calls += [llm.logw_next([]), llm.logw_next(cont)]
        return np.stack([np.asarray(r.weights) for r in await asyncio.gather(*calls)])

    got = run(all_rows(0))
    np.testing.assert_allclose(got, run(all_rows(1)), atol=ROW_ATOL)
    np.testing.assert_allclose(np.logaddexp.reduce(got, axis=1), 0.0, atol=1e-4)


def test_canonical_tokenization_over_the_vllm_backends_tokenizer(vllm):
    """`CanonicalTokenization.from_llm` on the vLLM model: the tokenizer's encodings of
    random text pass `prefix` at every length and `complete`; the same text spelled
    one byte token at a time, and a two-byte character split into its bytes, fail."""
    c = CanonicalTokenization.from_llm(vllm)
    first = first_tokens(vllm)
    for text in random_texts(8, seed=3):
        toks = vllm.tokenize(text)
        assert run(c.complete(toks)) == 0.0, repr(text)
        assert all(run(c.prefix(toks[: k + 1])) == 0.0 for k in range(len(toks))), repr(text)
    text = "hello world"
    assert run(c.complete([first[bytes([b])] for b in text.encode()])) == NEG_INF
    assert run(c.complete(vllm.tokenize(text))) == 0.0
    assert run(c.complete([first[b"\xc3"], first[b"\xa9"]])) == NEG_INF


# Exact enumeration on vLLM rows --------------------------------------------------

GROUP = 48


@pytest.fixture(scope="module")
def setup(vllm):
    llm = vllm.spawn()
    llm.set_prompt_from_str(PROMPT)
    fsa = BoolFSA.from_regex(PATTERN)
    conditions = {engine: fsa.coerce(llm, f=b"".join, engine=engine) for engine in (None, False)}
    exact = run(enumerate_target(llm, conditions[False], MAX_TOKENS))
    return llm, conditions, exact


def test_enumeration_on_vllm_rows_equals_hf(setup, hf):
    """Every tokenization of every string (duplicate byte tokens included) with its
    weight, on vLLM rows, equals the enumeration on HF rows; through the engine's
    coercion the same sequences."""
    llm, conditions, exact = setup
    ref = hf.spawn()
    ref.set_prompt_from_str(PROMPT)
    want = run(enumerate_target(ref, BoolFSA.from_regex(PATTERN).coerce(ref, f=b"".join, engine=False), MAX_TOKENS))
    assert exact.keys() == want.keys() and len(exact) > len(set(b"".join(bytes(llm.vocab[i]) for i in k) for k in exact))
    for ids, logw in want.items():
        assert exact[ids] == pytest.approx(logw, abs=ROW_ATOL)
    assert run(enumerate_target(llm, conditions[None], MAX_TOKENS)).keys() == exact.keys()


@pytest.mark.parametrize("name", ["direct", "awrs"])
def test_smc_is_unbiased_on_vllm_rows(setup, runs, name):
    """Seeded runs of the direct sampler and AWRS (over the engine's coercion) on vLLM
    rows: mean `Ẑ/Z` within `4σ + 0.05` of 1, no weight off the language."""
    llm, conditions, exact = setup
    cond = conditions[None]
    sampler = direct_token_sampler(llm * cond) if name == "direct" else AWRS(llm, cond)
    assert_unbiased(smc_ratios(sampler, exact, runs, GROUP))
