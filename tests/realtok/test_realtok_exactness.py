"""Exact enumeration on the SentencePiece vocabulary, whose byte pieces duplicate
one-byte tokens: the target `LM(x) · c(x)`, with `c` a regex over bytes coerced to the
model's tokens, counts every tokenization of every string, duplicates by id included;
enumerating through the coercion equals the brute-force sum over segmentations, and
seeded SMC runs of the direct sampler and AWRS estimate `Z` without bias (mean of
`Ẑ/Z` within `4σ + 0.05` of 1, as in `tests/sampler/test_exactness_llm.py`)."""

import asyncio
import itertools
import math

import numpy as np
import pytest
from toys import segmentations

from genlm.control import AWRS, BoolFSA, direct_token_sampler

PATTERN = r" (a|an)( (a|an)){0,1}\."
WORDS = (b"a", b"an")
MAX_TOKENS = 6
RUNS = 96
GROUP = 48


def language() -> list[bytes]:
    return [b"".join(b" " + w for w in ws) + b"." for n in (1, 2) for ws in itertools.product(WORDS, repeat=n)]


async def enumerate_target(llm, condition, max_tokens: int) -> dict:
    """Every live token sequence of at most `max_tokens - 1` tokens with its weight."""
    vocab_eos, eos = llm.vocab_eos, len(llm.vocab_eos) - 1
    level, ends = [((), float(await llm.prefix([])))], {}
    while level:
        contexts = [[vocab_eos[i] for i in ids] for ids, _ in level]
        lm_rows, c_rows = await asyncio.gather(llm.batch_logw_next(contexts), condition.batch_logw_next(contexts))
        deeper = []
        for (ids, logw), lm_row, c_row in zip(level, lm_rows, c_rows):
            lm_w, c_w = np.asarray(lm_row.weights), np.asarray(c_row.weights)
            if lm_w[eos] + c_w[eos] > -math.inf:
                ends[ids] = float(logw + lm_w[eos] + c_w[eos])
            if len(ids) < max_tokens - 1:
                deeper += [(ids + (int(i),), logw + float(lm_w[i])) for i in np.flatnonzero(c_w[:eos] == 0)]
        level = deeper
    return ends


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
    log_z = float(np.logaddexp.reduce(list(exact.values())))
    cond = conditions[None]
    sampler = direct_token_sampler(llm * cond) if name == "direct" else AWRS(llm, cond)

    async def runs():
        out = []
        for start in range(0, RUNS, GROUP):
            out += await asyncio.gather(
                *(sampler.smc(n_particles=6, ess_threshold=0.0, max_tokens=MAX_TOKENS, seed=s)
                  for s in range(start, start + GROUP))
            )
        return out

    results = asyncio.run(runs())
    ratios = np.array([math.exp(r.log_ml - log_z) for r in results])
    sigma = ratios.std(ddof=1) / math.sqrt(len(ratios))
    language_set = set(language())
    for r in results:
        for ctx, w in zip(r.contexts, r.log_weights):
            if w > -math.inf:
                assert b"".join(bytes(t) for t in ctx[:-1]) in language_set
    assert abs(ratios.mean() - 1.0) < 4 * sigma + 0.05, (ratios.mean(), sigma)
