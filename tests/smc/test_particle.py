"""`SequenceModel.step` and `step_many`: one particle at a time, with explicit generators."""

from __future__ import annotations

import math

import numpy as np
from pinned_runs import VOCAB, Bigram, Letters

from genlm.control import direct_token_sampler
from genlm.control.constant import EOS
from genlm.control.sampler.smc import SequenceModel, step_many


async def test_a_step_adds_the_direct_weight_and_the_twist():
    """Direct sampler on a normalized LM: logw = log Σ row = 0; with the critic the
    increment is `0 + critic.prefix(x) - 0` (−0.3 per digit)."""
    lm = Bigram(VOCAB, seed=3)
    tokens = set()
    for seed in range(40):
        model = SequenceModel(direct_token_sampler(lm), Letters(VOCAB), max_tokens=10)
        inc = await model.step(rng=np.random.default_rng(seed))
        (token,) = model.context
        want = 0.0 if token == EOS else -0.3 * token.isdigit()  # complete([]) = 0 at EOS
        assert math.isclose(inc, want, abs_tol=1e-12)
        assert math.isclose(model.twist_amount, want, abs_tol=1e-12)
        tokens.add(token)
    assert any(t != EOS and t.isdigit() for t in tokens) and any(t != EOS and t.isalpha() for t in tokens)


async def test_a_step_repeats_under_the_same_generator():
    lm = Bigram(VOCAB, seed=3)
    runs = []
    for _ in range(2):
        model = SequenceModel(direct_token_sampler(lm), max_tokens=10)
        incs = [await model.step(rng=np.random.default_rng(s)) for s in range(4)]
        runs.append((model.context, incs))
    assert runs[0] == runs[1]


async def test_step_many_serves_two_samplers_and_commits_each():
    """Particles of two samplers step together; each draws with its own generator and
    gets its own sampler's token (the two LMs give disjoint first tokens)."""
    only_a = Bigram(VOCAB, seed=3)
    only_a.rows[0] = np.where(np.arange(len(VOCAB) + 1) == 0, 0.0, -np.inf)
    only_b = Bigram(VOCAB, seed=3)
    only_b.rows[0] = np.where(np.arange(len(VOCAB) + 1) == 1, 0.0, -np.inf)
    particles = [SequenceModel(direct_token_sampler(lm), max_tokens=5) for lm in (only_a, only_b, only_a)]
    incs = await step_many(particles, [np.random.default_rng(i) for i in range(3)])
    assert [p.context for p in particles] == [[b"a"], [b"b"], [b"a"]]
    assert incs.tolist() == [0.0, 0.0, 0.0]
