"""AWRS on the embedded model: a character-level condition coerced onto the LLM (its
vocabulary a pruned subset of the LLM's), and a low temperature with and without
the compiled engine."""

import math
import re
import string

import numpy as np
import pytest

from genlm.control import AWRS, BoolFSA, Potential, PromptedLLM
from genlm.control.embedded import EMBEDDED_MODEL
from genlm.control.testing import assert_properly_weighted, expected_logws

NEG_INF = float("-inf")


class Chars(Potential):
    """A character-level Boolean potential over `alphabet` (ints, as `b"".join`
    gives them) that refuses the characters of `banned`."""

    def __init__(self, alphabet: str, banned: str = ""):
        super().__init__(list(map(ord, alphabet)))
        self.banned = set(map(ord, banned))

    async def prefix(self, context):
        return NEG_INF if self.banned & set(context) else 0.0

    async def complete(self, context):
        return await self.prefix(context)


@pytest.fixture(scope="module")
def llm():
    llm = PromptedLLM.from_name(EMBEDDED_MODEL)
    llm.set_prompt_from_str("The value is")
    return llm


async def test_the_harness_pattern_samples_a_pruned_character_condition(llm):
    """`Chars(string.printable).coerce(llm, f=b"".join)` keeps a subset of the LLM's
    tokens; AWRS accepts it and every sampled string obeys the condition."""
    coerced = Chars(string.printable, banned=string.digits).coerce(llm, f=b"".join)
    assert set(coerced.vocab) < set(llm.vocab)
    seqs = await AWRS(llm, coerced).smc(n_particles=4, ess_threshold=0.5, max_tokens=8, seed=0)
    texts = [b"".join(c[:-1]) for c in seqs.contexts]
    assert texts and all(not set(t) & set(string.digits.encode()) for t in texts)
    assert all(set(t) <= set(string.printable.encode()) for t in texts)
    assert all(w > NEG_INF for w in seqs.log_weights)


@pytest.mark.parametrize("enumerate_at", [0, 10**6])
async def test_a_tiny_pruned_condition_is_properly_weighted_on_the_model(llm, enumerate_at):
    """Over the six LLM tokens spelled with "ab." (searched, or checked whole), the
    law and weights of AWRS are those of `llm * coerced`, by exact enumeration."""
    coerced = Chars("ab.", banned="b").coerce(llm, f=b"".join)
    assert len(coerced.vocab) == 6
    sampler = AWRS(llm, coerced)
    sampler.enumerate_at = enumerate_at
    want = await expected_logws(sampler, [])
    got = await assert_properly_weighted(sampler, [], expected=want)
    assert sum(math.exp(v) for v in got.values()) == pytest.approx(
        math.exp(np.logaddexp.reduce([v for v in want.values()])), rel=1e-6
    )


@pytest.mark.parametrize("engine", [True, False])
async def test_low_temperature_runs_with_and_without_the_engine(llm, engine):
    """T = 0.2 puts allowed tokens far below 1e-16 of the mass: no math error, and every
    particle of positive weight spells the pattern."""
    llm_t = llm.spawn(temperature=0.2)
    cond = BoolFSA.from_regex(r" [0-9]+\.").coerce(llm_t, f=b"".join, engine=engine)
    seqs = await AWRS(llm_t, cond).smc(n_particles=4, ess_threshold=0.5, max_tokens=6, seed=0)
    assert math.isfinite(seqs.log_ml)
    for ctx, w in zip(seqs.contexts, seqs.log_weights):
        if w > NEG_INF and ctx[-1] == llm_t.eos:
            assert re.fullmatch(rb" [0-9]+\.", b"".join(ctx[:-1]))


async def test_low_temperature_search_is_properly_weighted_at_the_first_token(llm):
    """The generic path (a plain Potential, no engine rows) at T = 0.2, over the tokens
    spelled with "0." (those with a "0" refused): exact enumeration of the search."""
    llm_t = llm.spawn(temperature=0.2)
    coerced = Chars("0.", banned="0").coerce(llm_t, f=b"".join)
    sampler = AWRS(llm_t, coerced)
    sampler.enumerate_at = 0
    got = await assert_properly_weighted(sampler, [])
    assert all(math.isfinite(v) or v == NEG_INF for v in got.values())
