"""Numerics: -inf everywhere, NaN and +inf from a user potential, a distribution with
all its mass on one token, and half-precision language models. Every result is either
correct or a clear error: never a NaN `log_ml`, never a posterior that does not sum to 1."""

import math
import os

import numpy as np
import pytest
from toys.reliability import AB, BigramLM, NoBB, ab_lm

from genlm.control import AWRS, EOS, SMC, BoolFSA, Potential, direct_token_sampler
from genlm.control.sampler.token import DirectTokenSampler

os.environ.setdefault("HF_HUB_OFFLINE", "1")


class Scripted(Potential):
    """`logw_next(ctx)` is `rows(len(ctx))` (a row over `vocab + [EOS]`); prefix and
    complete are the matching sums, so the contract holds wherever the rows are finite."""

    def __init__(self, rows):
        super().__init__(AB)
        self.rows = rows

    async def logw_next(self, context):
        return self.make_lazy_weights(np.array(self.rows(len(context)), dtype=np.float64))

    async def prefix(self, context):
        return float(sum(self.rows(i)[self.lookup[x]] for i, x in enumerate(context)))

    async def complete(self, context):
        return await self.prefix(context) + float(self.rows(len(context))[-1])


def _assert_sane(seqs):
    assert not math.isnan(seqs.log_ml)
    assert not np.isnan(seqs.log_weights).any()
    if seqs.log_ml > -math.inf:
        assert sum(seqs.posterior.values()) == pytest.approx(1.0, abs=1e-9)
        assert seqs.normalized_weights.sum() == pytest.approx(1.0, abs=1e-9)
    else:
        assert all(v == 0.0 for v in seqs.posterior.values())  # zero-weight entries stay (0.4.1)
        assert np.all(seqs.normalized_weights == 0)


SAMPLERS = {
    "direct": lambda p: SMC(direct_token_sampler(p)),
    "awrs": lambda p: SMC(AWRS(p, NoBB())),
    "critic": lambda p: SMC(direct_token_sampler(ab_lm()), p),
}


@pytest.mark.parametrize("how", sorted(SAMPLERS))
@pytest.mark.parametrize("at", [0, 2])
async def test_minus_inf_everywhere_gives_minus_inf_log_ml(how, at):
    # no EOS before step `at`, nothing at all from step `at` on
    dead = Scripted(lambda i: [-math.inf] * 3 if i >= at else [math.log(0.5), math.log(0.5), -math.inf])
    with np.errstate(all="raise"):
        seqs = await SAMPLERS[how](dead)(6, 0.5, 5, seed=0)
    _assert_sane(seqs)
    assert seqs.log_ml == -math.inf
    if how != "critic":  # the sampler found no token and drew EOS at weight zero: it ended
        assert all(ctx[-1] == EOS for ctx in seqs.contexts)
    # (killed by the critic, a context ends in EOS only where EOS was drawn: test_deaths.py)


@pytest.mark.parametrize("how", sorted(SAMPLERS))
async def test_nan_from_a_user_potential_counts_as_zero_weight(how):
    def rows(i):
        return [math.nan, math.log(0.5), math.log(0.5)] if i == 1 else [math.log(0.4), math.log(0.4), math.log(0.2)]

    seqs = await SAMPLERS[how](Scripted(rows))(8, 0.5, 5, seed=1)
    _assert_sane(seqs)
    # token a (NaN) never survives after one token
    for ctx, logw in seqs:
        if len(ctx) > 2 and ctx[1] == b"a":
            assert logw == -math.inf


async def test_all_nan_row_kills_the_particle_not_the_run():
    seqs = await SMC(direct_token_sampler(Scripted(lambda i: [math.nan] * 3)))(4, 0.5, 4, seed=0)
    _assert_sane(seqs)
    assert seqs.log_ml == -math.inf


@pytest.mark.parametrize("how", ["direct", "awrs"])
async def test_plus_inf_from_a_user_potential_is_a_clear_error(how):
    pot = Scripted(lambda i: [math.inf, 0.0, 0.0] if i == 1 else [math.log(0.5)] * 3)
    with pytest.raises(ValueError, match=r"\+inf"):
        await SAMPLERS[how](pot)(6, 0.5, 5, seed=0)


async def test_plus_inf_critic_is_a_clear_error():
    class InfCritic(Potential):
        async def prefix(self, context):
            return math.inf if len(context) == 2 else 0.0

        async def complete(self, context):
            return 0.0

    with pytest.raises(ValueError, match=r"\+inf"):
        await SMC(direct_token_sampler(ab_lm()), InfCritic(AB))(6, 0.5, 5, seed=0)


@pytest.mark.parametrize("method", ["multinomial", "stratified", "systematic", "residual"])
@pytest.mark.parametrize("how", ["direct", "awrs"])
async def test_one_token_with_all_mass_is_exact(how, method):
    # a deterministic LM: "a b" then EOS, every other entry exactly zero; log Z = 0 and
    # the posterior is one sequence with weight 1 (NoBB accepts it, so AWRS agrees)
    det = BigramLM(AB, {None: [1.0, 0.0, 0.0], b"a": [0.0, 1.0, 0.0], b"b": [0.0, 0.0, 1.0]})
    with np.errstate(all="raise"):
        seqs = await SAMPLERS[how](det)(5, 1.0, 8, seed=0, resampling_method=method)
    _assert_sane(seqs)
    assert seqs.log_ml == pytest.approx(0.0, abs=1e-12)
    assert dict(seqs.posterior) == {(b"a", b"b", EOS): pytest.approx(1.0)}


async def test_tiny_masses_do_not_underflow_to_nan():
    tiny = Scripted(lambda i: [-1000.0, -1000.5, -1001.0])
    seqs = await SMC(direct_token_sampler(tiny))(6, 0.5, 4, seed=0)
    _assert_sane(seqs)
    assert seqs.log_ml > -5000 and math.isfinite(seqs.log_ml)


# Half-precision language models ---------------------------------------------------


def _as_dtype(llm, dtype):
    import torch

    half = llm.spawn()
    hf = half.model.model
    hf.to(getattr(torch, dtype))
    if hasattr(half.model, "clear_cache"):
        half.model.clear_cache()
    return half


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
async def test_half_precision_rows_and_runs_are_finite_and_normalized(llm, dtype):
    import torch

    half = _as_dtype(llm, dtype)
    try:
        half.set_prompt_from_str("The number is")
        rows = await half.batch_logw_next([[], half.tokenize(" 4"), half.tokenize(" 42,")])
        for row in rows:
            w = row.weights
            assert np.isfinite(w[:-1]).all(), "every token of a softmax row has finite log probability"
            assert not np.isnan(w).any()
            assert float(np.logaddexp.reduce(w)) == pytest.approx(0.0, abs=2e-2)
        digits = BoolFSA.from_regex(r" [0-9]{1,3}\.").coerce(half, f=b"".join)
        for sampler, critic in [(direct_token_sampler(half), digits), (AWRS(half, digits), None)]:
            seqs = await SMC(sampler, critic)(4, 0.5, 6, seed=0)
            _assert_sane(seqs)
    finally:
        half.model.model.to(torch.float32)
        if hasattr(half.model, "clear_cache"):
            half.model.clear_cache()


async def test_direct_sampler_with_proposal_and_dead_target_is_sane():
    dead = Scripted(lambda i: [-math.inf] * 3)
    seqs = await SMC(DirectTokenSampler(dead, proposal=ab_lm()))(5, 0.5, 4, seed=0)
    _assert_sane(seqs)
    assert seqs.log_ml == -math.inf
