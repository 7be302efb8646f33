"""Exact enumeration on the SentencePiece vocabulary, whose byte pieces duplicate
one-byte tokens: the target `LM(x) · c(x)`, with `c` a regex over bytes coerced to the
model's tokens, counts every tokenization of every string, duplicates by id included;
enumerating through the coercion equals the brute-force sum over segmentations, and
seeded SMC runs of the direct sampler and AWRS estimate `Z` without bias (mean of
`Ẑ/Z` within `4σ + 0.05` of 1, as in `tests/sampler/test_exactness_llm.py`)."""

import asyncio

import pytest
from toys import segmentations
from toys.realtok_checks import (
    MAX_TOKENS,
    PATTERN,
    assert_unbiased,
    enumerate_target,
    language,
    smc_ratios,
)

from genlm.control import AWRS, BoolFSA, direct_token_sampler

RUNS = 96
GROUP = 48


@pytest.fixture(scope="module")
def setup(spm_llm):
    llm = spm_llm.spawn()
    llm.set_prompt_from_str("The value is")
    fsa = BoolFSA.from_regex(PATTERN)
    conditions = {engine: fsa.coerce(llm, f=b"".join, engine=engine) for engine in (None, False)}
    exact = asyncio.run(enumerate_target(llm, conditions[False], MAX_TOKENS))
    return llm, conditions, exact


def test_enumeration_counts_every_tokenization_duplicates_included(setup):
    llm, conditions, exact = setup
    pieces: dict = {}
    for i, t in enumerate(llm.vocab):
        pieces.setdefault(bytes(t), []).append(i)
    assert len(pieces[b" "]) == 2 and len(pieces[b"a"]) == 2  # `▁`/`<0x20>`, `a`/`<0x61>`
    seqs = [s for text in language() for s in segmentations(text, pieces, MAX_TOKENS - 1)]
    weights = asyncio.run(llm.batch_complete([[llm.vocab_eos[i] for i in s] for s in seqs]))
    brute = dict(zip(seqs, weights))
    assert exact.keys() == brute.keys()
    for ids, logw in brute.items():
        assert exact[ids] == pytest.approx(float(logw), abs=1e-4)
    engine = asyncio.run(enumerate_target(llm, conditions[None], MAX_TOKENS))
    assert engine.keys() == exact.keys()


@pytest.mark.parametrize("name", ["direct", "awrs"])
def test_smc_is_unbiased_on_the_spm_vocabulary(setup, name):
    llm, conditions, exact = setup
    cond = conditions[None]
    sampler = direct_token_sampler(llm * cond) if name == "direct" else AWRS(llm, cond)
    assert_unbiased(smc_ratios(sampler, exact, RUNS, GROUP))
