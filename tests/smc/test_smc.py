"""SMC: exactness by enumeration, semantics of EOS/critic/termination, seeds, batching, faults."""

import asyncio
import json
import math

import numpy as np
import pytest
from toys import (
    AB,
    BoolPotential,
    CountCritic,
    Failing,
    Poisoned,
    Tabular,
    ab_lm,
    enumerate_target,
    no_bb,
    toy_backend,
)

from genlm.control import EOS, SMC, Sequences, direct_token_sampler, set_draw_method
from genlm.control.draw import get_draw_method
from genlm.control.sampler.smc import SequenceModel, smc_standard
from genlm.control.sampler.token import DirectTokenSampler, TokenSampler
from genlm.control.smc.deaths import ZeroWeightWarning
from genlm.control.smc.record import RunRecord
from genlm.control.smc.resampling import RESAMPLING_METHODS

METHODS = sorted(RESAMPLING_METHODS)
# The critic of these tests: `prefix = -0.9·#b`, `complete = -1.5·#b - 0.5·[odd length]`.
CRITIC = (0.9, 1.5, 0.5)


async def _runs(smc: SMC, runs: int, **kw):
    """`runs` seeded runs, gathered; (exp log_ml, list of posteriors)."""
    out = await asyncio.gather(*(smc(seed=r, **kw) for r in range(runs)))
    z = np.array([math.exp(s.log_ml) for s in out])
    return z, [s.posterior for s in out]


def _assert_unbiased(z, posts, exact: dict, rare: float = 0.005):
    """E[Ẑ] = Z and E[Ẑ · p̂(x)] = w(x) for every sequence x, within a few σ.

    Sequences of posterior mass below `rare` are checked together as one tail
    event (a run may never see one of them, which leaves no σ to compare with).
    """
    runs = len(z)
    big_z = sum(exact.values())
    sem = z.std(ddof=1) / math.sqrt(runs)
    assert abs(z.mean() - big_z) <= 4 * sem, (z.mean(), big_z, sem)
    tail = [x for x, w in exact.items() if w < rare * big_z]
    events = [[x] for x in exact if x not in tail] + [tail]
    for xs in events:
        w = sum(exact[x] for x in xs)
        u = z * np.array([sum(p.get(x, 0.0) for x in xs) for p in posts])
        sem = u.std(ddof=1) / math.sqrt(runs)
        slack = rare * big_z if xs is tail else 0.0
        assert abs(u.mean() - w) <= 4.5 * sem + slack, (xs, u.mean(), w, sem)
    live = [{x for x, v in p.items() if v > 0} for p in posts]  # weight-zero entries stay (0.4.1)
    assert all(xs <= set(exact) for xs in live), "a sequence outside the target's support"


# Exactness ---------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
async def test_zero_variance_log_ml_is_exact(method):
    table = {(): 0.1, (b"a",): 0.4, (b"b",): 0.2, (b"a", b"b"): 0.7, (b"b", b"b"): 0.05}
    tab = Tabular(AB, table)
    smc = SMC(direct_token_sampler(tab))
    seqs = await smc(7, 1.0, 5, resampling_method=method, seed=0)
    want = math.log(sum(table.values()))
    assert seqs.log_ml == pytest.approx(want, abs=1e-12)
    np.testing.assert_allclose(seqs.log_weights, want, atol=1e-12)


@pytest.mark.parametrize("method", METHODS)
async def test_product_proposal_matches_exact_posterior(method):
    target = ab_lm() * no_bb()
    exact = await enumerate_target(target.complete, AB, 4)
    z, posts = await _runs(
        SMC(direct_token_sampler(target)), 300,
        n_particles=6, ess_threshold=1.0, max_tokens=4, resampling_method=method,
    )
    _assert_unbiased(z, posts, exact)


@pytest.mark.parametrize("method", METHODS)
async def test_critic_matches_exact_posterior(method):
    lm, critic = ab_lm(), CountCritic(*CRITIC)
    exact = await enumerate_target(lambda xs: _sum(lm.complete(xs), critic.complete(xs)), AB, 5)
    z, posts = await _runs(
        SMC(direct_token_sampler(lm), critic), 300,
        n_particles=6, ess_threshold=0.9, max_tokens=5, resampling_method=method,
    )
    _assert_unbiased(z, posts, exact)


async def _sum(a, b):
    return await a + await b


async def test_boolean_critic_matches_exact_posterior():
    lm, critic = ab_lm(), no_bb()
    exact = await enumerate_target(lambda xs: _sum(lm.complete(xs), critic.complete(xs)), AB, 4)
    z, posts = await _runs(
        SMC(direct_token_sampler(lm), critic), 300, n_particles=5, ess_threshold=0.8, max_tokens=4
    )
    _assert_unbiased(z, posts, exact)


def _lm_logp(lm, xs) -> float:
    """log q(xs): the probability of proposing the tokens of `xs` from the LM."""
    total, prev = 0.0, None
    for x in xs:
        total += float(lm.table[prev][lm.lookup[x]])
        prev = x
    return total


@pytest.mark.parametrize("max_tokens", [1, 2, 3, 5])
async def test_final_weights_are_target_times_critic_over_proposal(max_tokens):
    lm, critic = ab_lm(), CountCritic(*CRITIC)
    seqs = await SMC(direct_token_sampler(lm), critic)(40, 0.0, max_tokens, seed=1)
    for ctx, logw in seqs:
        assert ctx[-1] == EOS and len(ctx) <= max_tokens and EOS not in ctx[:-1]
        xs = ctx[:-1]
        # importance weight: LM(xs)·critic(xs) / q, where q omits p(EOS) when EOS was forced
        q = _lm_logp(lm, xs) + (0.0 if len(ctx) == max_tokens else float(lm._row(xs)[-1]))
        want = await lm.complete(xs) + await critic.complete(xs) - q
        assert logw == pytest.approx(want, abs=1e-12)


async def test_max_tokens_one_forces_eos_immediately():
    lm = ab_lm()
    seqs = await SMC(direct_token_sampler(lm))(4, 0.5, 1, seed=0)
    assert seqs.contexts == [[EOS]] * 4
    np.testing.assert_allclose(seqs.log_weights, math.log(0.2))


async def test_terminate_when_stops_with_eos_correction():
    lm = ab_lm()
    seqs = await SMC(direct_token_sampler(lm))(
        30, 0.0, 6, terminate_when=lambda ctx: ctx[-1] == b"a", seed=2
    )
    stopped = 0
    for ctx, logw in seqs:
        xs = ctx[:-1]
        assert ctx[-1] == EOS and b"a" not in xs[:-1]
        if xs and xs[-1] == b"a":
            stopped += 1
            assert logw == pytest.approx(float(lm._row(xs)[-1]), abs=1e-12)
    assert stopped > 0


# Resampling threshold, records, output ------------------------------------


@pytest.mark.parametrize("threshold, always", [(0.0, False), (1.0, True)])
async def test_ess_threshold_bounds(tmp_path, threshold, always):
    path = tmp_path / "run.json"
    seqs = await SMC(direct_token_sampler(ab_lm()), no_bb())(6, threshold, 5, json_path=path, seed=4)
    record = RunRecord.from_json(path)
    assert record == seqs.record
    resampled = [s.resampled for s in record.steps]
    if always:
        assert all(resampled)  # the last step's too (0.4.1 resampled a finished population)
    else:
        assert not any(resampled)


async def test_record_round_trip_is_strict_json(tmp_path):
    path = tmp_path / "run.json"
    seqs = await SMC(direct_token_sampler(ab_lm()), no_bb())(5, 0.9, 4, json_path=str(path), seed=5)

    def no_constants(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    data = json.loads(path.read_text(), parse_constant=no_constants)
    record = RunRecord.from_dict(data)
    assert record.log_ml == pytest.approx(seqs.log_ml)
    assert record.final_log_weights == seqs.log_weights.tolist()
    assert record.steps[0].step == 0 and len(record.steps[0].contexts) == 5
    assert all(c[-1] == "<EOS>" for c in record.final_contexts)
    for s in record.steps:
        if s.resampled:
            assert len(s.ancestors) == 5 and all(0 <= a < 5 for a in s.ancestors)
    with pytest.raises(ValueError, match="not an SMC record"):
        RunRecord.from_dict({"format": "other"})


async def test_verbosity_prints_particles(capsys):
    await SMC(direct_token_sampler(ab_lm()))(3, 0.5, 3, verbosity=1, seed=0)
    out = capsys.readouterr().out
    assert "step 0" in out and "step 1" in out and "logw" in out and "<EOS>" in out
    await SMC(direct_token_sampler(ab_lm()))(3, 0.5, 3, seed=0)
    assert capsys.readouterr().out == ""


async def test_token_sampler_smc_passes_critic_and_options():
    seqs = await direct_token_sampler(ab_lm()).smc(
        4, 0.5, 4, critic=no_bb(), resampling_method="systematic", seed=3
    )
    for ctx, logw in seqs:
        if logw > -math.inf:
            assert ctx[-2] == b"b" if len(ctx) > 1 else True


async def test_smc_standard_with_a_sequence_model():
    model = SequenceModel(direct_token_sampler(ab_lm()), max_tokens=4)
    pop = await smc_standard(model, 5, 0.5, seed=1)
    assert len(pop) == 5 and pop.done.all()
    assert model.context == [], "the model itself is only cloned"
    assert all(p.context[-1] == EOS for p in pop)


# Seeds -------------------------------------------------------------------


def _same(a, b):
    return a.contexts == b.contexts and np.array_equal(a.log_weights, b.log_weights)


@pytest.mark.parametrize("draw_method", ["gumbel_max", "multinomial", "inverse_cdf"])
async def test_seed_is_reproducible_solo_and_gathered(draw_method):
    before = get_draw_method()
    set_draw_method(draw_method)
    try:
        lm = ab_lm()
        smc = SMC(direct_token_sampler(lm), CountCritic(*CRITIC))
        kw = dict(n_particles=8, ess_threshold=0.6, max_tokens=6, resampling_method="stratified")
        solo = await smc(seed=11, **kw)
        again = await smc(seed=11, **kw)
        assert _same(solo, again)
        other = SMC(direct_token_sampler(lm * no_bb()))
        results = await asyncio.gather(
            other(seed=1, **kw), smc(seed=12, **kw), smc(seed=11, **kw), other(seed=2, **kw)
        )
        assert _same(results[2], solo)
        assert not _same(results[1], solo)
    finally:
        set_draw_method(before)


# Batching ----------------------------------------------------------------


class PerParticle(DirectTokenSampler):
    """The direct sampler with its own `sample`, so SMC calls it once per particle."""

    async def sample(self, context, draw=None):
        return await DirectTokenSampler.sample(self, context, draw)


class DuckSampler:
    """A unit sampler that is not a `TokenSampler` (no batch methods)."""

    def __init__(self, inner):
        self.inner, self.target = inner, inner.target

    async def sample(self, context, draw=None):
        return await self.inner.sample(context, draw)

    async def start_weight(self):
        return await self.inner.start_weight()

    async def logw_eos(self, context):
        return await self.inner.logw_eos(context)


@pytest.mark.parametrize("draw_method", ["gumbel_max", "inverse_cdf"])
async def test_batched_step_draws_what_per_particle_steps_draw(draw_method):
    before = get_draw_method()
    set_draw_method(draw_method)
    try:
        kw = dict(n_particles=7, ess_threshold=0.7, max_tokens=5)
        batched = await SMC(direct_token_sampler(ab_lm()), CountCritic(*CRITIC))(seed=3, **kw)
        single = await SMC(PerParticle(ab_lm()), CountCritic(*CRITIC))(seed=3, **kw)
        model = SequenceModel(DuckSampler(direct_token_sampler(ab_lm())), max_tokens=5)
        duck = await smc_standard(model, 7, 0.7, seed=3)
        plain = await smc_standard(SequenceModel(direct_token_sampler(ab_lm()), max_tokens=5), 7, 0.7, seed=3)
    finally:
        set_draw_method(before)
    assert _same(batched, single)
    assert [p.context for p in duck] == [p.context for p in plain]
    assert np.array_equal(duck.log_weights, plain.log_weights)


async def test_batched_step_is_one_potential_call_per_step():
    lm = ab_lm()
    await SMC(direct_token_sampler(lm))(n_particles=9, ess_threshold=0.5, max_tokens=4, seed=0)
    assert lm.batch_calls <= 4  # one per step (fewer when every particle ended early)


async def test_gathered_runs_share_batches():
    lm = ab_lm()
    sampler = direct_token_sampler(lm)
    kw = dict(n_particles=4, ess_threshold=0.5, max_tokens=6)
    solo_calls, solo_rows = [], 0
    for s in range(8):
        lm.batch_calls = lm.contexts_seen = 0
        await SMC(sampler)(seed=s, **kw)
        solo_calls.append(lm.batch_calls)
        solo_rows += lm.contexts_seen
    lm.batch_calls = lm.contexts_seen = 0
    await asyncio.gather(*(SMC(sampler)(seed=s, **kw) for s in range(8)))
    assert lm.contexts_seen == solo_rows, "the same rows are asked for"
    assert lm.batch_calls <= max(solo_calls) + 1 < sum(solo_calls)


async def test_spawned_prompts_share_forwards_and_match_solo_runs():
    backend = toy_backend()
    base = _prompted(backend, "p1")
    prompts = ["p1", "p2", "p3"]
    models = [base.spawn_with(p) for p in prompts]
    kw = dict(n_particles=5, ess_threshold=0.5, max_tokens=5)
    solos = [await SMC(direct_token_sampler(m))(seed=i, **kw) for i, m in enumerate(models)]
    solo_forwards = backend.forwards
    backend.forwards = 0
    together = await asyncio.gather(
        *(SMC(direct_token_sampler(m))(seed=i, **kw) for i, m in enumerate(models))
    )
    assert all(_same(a, b) for a, b in zip(solos, together))
    assert backend.forwards <= kw["max_tokens"] < solo_forwards
    # and each prompt's runs target its own posterior
    exact = await enumerate_target(models[1].complete, AB, 4)
    z, posts = await _runs(SMC(direct_token_sampler(models[1] * no_bb())), 200, **{**kw, "max_tokens": 4})
    exact = await enumerate_target((models[1] * no_bb()).complete, AB, 4)
    _assert_unbiased(z, posts, exact)


def _prompted(backend, prompt):
    from toys import PromptedToy

    return PromptedToy(backend, prompt)


# Faults ------------------------------------------------------------------


def _only_this_task():
    return asyncio.all_tasks() == {asyncio.current_task()}


@pytest.mark.parametrize("at", [0, 2])
async def test_potential_error_raises_promptly_and_leaves_no_task(at):
    bad = Failing(ab_lm(), at=at)
    with pytest.raises(RuntimeError, match="boom"):
        await SMC(direct_token_sampler(bad))(6, 0.5, 6, seed=0)
    assert _only_this_task()
    seqs = await SMC(direct_token_sampler(ab_lm()))(6, 0.5, 6, seed=0)
    assert len(seqs) == 6


async def test_critic_error_raises():
    class Broken(CountCritic):
        async def prefix(self, context):
            if len(context) == 2:
                raise KeyError("critic broke")
            return await super().prefix(context)

    with pytest.raises(KeyError, match="critic broke"):
        await SMC(direct_token_sampler(ab_lm()), Broken(*CRITIC))(5, 0.5, 5, seed=0)
    assert _only_this_task()


async def test_failing_run_does_not_corrupt_a_gathered_run():
    good = SMC(direct_token_sampler(ab_lm()), CountCritic(*CRITIC))
    kw = dict(n_particles=6, ess_threshold=0.5, max_tokens=6)
    solo = await good(seed=3, **kw)
    bad = SMC(direct_token_sampler(Failing(ab_lm(), at=2)))
    results = await asyncio.gather(bad(seed=1, **kw), good(seed=3, **kw), return_exceptions=True)
    assert isinstance(results[0], RuntimeError)
    assert _same(results[1], solo)
    assert _only_this_task()


@pytest.mark.parametrize("victim", [0, 1])
async def test_cancelling_one_gathered_run_leaves_the_others_correct(victim):
    # the first run's particles usually hold the shared batches, so cancelling it
    # abandons the others' requests, which must be served again
    lm = ab_lm()
    smc = SMC(direct_token_sampler(lm), CountCritic(*CRITIC))
    kw = dict(n_particles=6, ess_threshold=0.5, max_tokens=8)
    solos = [await smc(seed=s, **kw) for s in range(3)]
    for delay in range(0, 40, 3):
        tasks = [asyncio.ensure_future(smc(seed=s, **kw)) for s in range(3)]
        for _ in range(delay):
            await asyncio.sleep(0)
        tasks[victim].cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for i in range(3):
            if i != victim:
                assert _same(results[i], solos[i]), (delay, i)
        assert isinstance(results[victim], asyncio.CancelledError) or _same(results[victim], solos[victim])
        assert _only_this_task()


class ScriptedWeights(TokenSampler):
    """Draws from the LM but reports a fixed log weight after contexts of length 1."""

    def __init__(self, value):
        self.inner = DirectTokenSampler(ab_lm())
        super().__init__(self.inner.target)
        self.value = value

    async def sample(self, context, draw=None):
        token, logw, logp = await self.inner.sample(context, draw)
        return token, (self.value if len(context) == 1 else logw), logp


async def test_nan_weight_folds_to_minus_inf():
    with np.errstate(all="raise"):
        seqs = await SMC(ScriptedWeights(float("nan")))(5, 0.5, 5, seed=0)
    assert not np.isnan(seqs.log_weights).any()
    for ctx, logw in seqs:
        if len(ctx) > 2 or (len(ctx) == 2 and ctx[-1] != EOS):
            assert logw == -math.inf


async def test_positive_infinite_weight_is_a_clear_error():
    with pytest.raises(ValueError, match=r"\+inf"):
        await SMC(ScriptedWeights(float("inf")))(5, 0.5, 5, seed=0)
    assert _only_this_task()
    with pytest.raises(ValueError, match=r"\+inf"):
        await SMC(direct_token_sampler(Poisoned(ab_lm(), b"a", float("inf"))))(5, 0.5, 5, seed=0)
    assert _only_this_task()


@pytest.mark.parametrize("empty_ok", [True, False])
async def test_all_particles_dead_gives_minus_inf_log_ml(empty_ok):
    never = BoolPotential(AB, lambda ctx: empty_ok and not ctx, lambda ctx: False)
    with np.errstate(all="raise"):
        seqs = await SMC(direct_token_sampler(ab_lm() * never))(6, 0.5, 4, seed=0)
        assert seqs.log_ml == -math.inf and seqs.ess == 0.0
        assert not np.isnan(seqs.log_weights).any()
        assert np.all(seqs.normalized_weights == 0)
    assert all(ctx[-1] == EOS for ctx in seqs.contexts)
    assert all(v == 0.0 for v in seqs.posterior.values())  # zero-weight entries stay (0.4.1)
    assert all(v == 0.0 for v in seqs.decoded_posterior.values())


# Arguments ----------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, err, match",
    [
        (dict(n_particles=0), ValueError, "n_particles"),
        (dict(n_particles=2.5), ValueError, "n_particles"),
        (dict(ess_threshold=1.5), ValueError, "ess_threshold"),
        (dict(max_tokens=0), ValueError, "max_tokens"),
        (dict(resampling_method="bogus"), ValueError, "resampling"),
        (dict(seed=-1), ValueError, "seed"),
        (dict(terminate_when=3), TypeError, "terminate_when"),
    ],
)
async def test_bad_arguments_are_clear_errors(kw, err, match):
    args = dict(n_particles=2, ess_threshold=0.5, max_tokens=3, **{})
    args.update(kw)
    with pytest.raises(err, match=match):
        await SMC(direct_token_sampler(ab_lm()))(**args)


def test_bad_sampler_or_critic_is_a_clear_error():
    with pytest.raises(TypeError, match="TokenSampler"):
        SMC(ab_lm())
    with pytest.raises(TypeError, match="critic"):
        SMC(direct_token_sampler(ab_lm()), critic="no")
    ints = BoolPotential([1, 2], lambda c: True, lambda c: True)
    with pytest.raises(ValueError, match="token type"):
        SMC(direct_token_sampler(ab_lm()), critic=ints)


async def test_progress_bar_is_silent_when_not_interactive(capsys):
    await SMC(direct_token_sampler(ab_lm()))(4, 0.5, 6, seed=0)
    assert capsys.readouterr().err == ""


async def test_without_autobatch_the_critic_is_called_per_particle():
    critic = no_bb()
    sampler = DirectTokenSampler(ab_lm(), autobatch=False)
    seqs = await SMC(sampler, critic, autobatch=False)(6, 0.5, 4, seed=0)
    assert critic.batch_calls == 0
    batched = no_bb()
    same = await SMC(DirectTokenSampler(ab_lm()), batched)(6, 0.5, 4, seed=0)
    assert batched.batch_calls > 0
    assert _same(seqs, same), "batching changes the schedule, not the result"


def test_slot_streams_depend_on_seed_step_and_slot_only():
    from genlm.control.sampler.smc import SlotStreams

    def first(streams, step, slots):
        return [g.random(3).tolist() for g in streams.at(step, slots)]

    a, b = SlotStreams(np.random.SeedSequence(5)), SlotStreams(np.random.SeedSequence(5))
    ref = first(a, 2, [0, 1, 2])
    first(b, 7, [2, 1])  # another history of use
    assert first(b, 2, [2, 0, 1]) == [ref[2], ref[0], ref[1]]
    assert first(a, 2, [0, 1, 2]) == ref  # re-pointed at the start of the stream
    values = {tuple(v) for v in ref + first(a, 3, [0, 1, 2])}
    assert len(values) == 6
    assert first(SlotStreams(np.random.SeedSequence(6)), 2, [0]) != ref[:1]


# The ESS a run reports ---------------------------------------------------


class WeightsByCall(TokenSampler):
    """The `k`-th call proposes `units[k] = (token, logw)` (calls run in slot order)."""

    def __init__(self, units):
        super().__init__(ab_lm())
        self.units, self.calls = list(units), 0

    async def sample(self, context, draw=None):
        token, logw = self.units[self.calls]
        self.calls += 1
        return token, logw, 0.0


ONE_STEP = [
    ([0.0, -math.inf, -math.inf, -math.inf], 1.0),  # one particle carries everything
    ([math.log(w) for w in (1, 2, 3, 4)], 10**2 / 30),  # (Σw)² / Σw²
    ([0.0] * 4, 4.0),
]


@pytest.mark.parametrize("weights, expected", ONE_STEP)
@pytest.mark.parametrize("method", METHODS)
async def test_ess_before_the_final_resample_is_reported(weights, expected, method):
    units = [(EOS, w) for w in weights]
    resampled = await SMC(WeightsByCall(units))(4, 1.0, 3, resampling_method=method, seed=0)
    # 0.4.1's `ess` is that of the returned weights: every weight the mean after resampling
    assert resampled.ess == pytest.approx(4.0)
    assert resampled.ess_before_resample == pytest.approx(expected)
    kept = await SMC(WeightsByCall(units))(4, 0.0, 3, seed=0)
    assert kept.ess == pytest.approx(expected) and kept.ess_before_resample == pytest.approx(expected)


async def test_ess_before_resample_is_that_of_the_last_resampling_not_of_the_last_step():
    # step 1: weights 1, 2, 3, 4 (ESS 10/3 < 0.9·4: resampled); step 2: every particle
    # ends with the same weight (ESS 4: not resampled)
    units = [(b"a", math.log(w)) for w in (1, 2, 3, 4)] + [(EOS, 0.0)] * 4
    seqs = await SMC(WeightsByCall(units))(4, 0.9, 3, seed=0)
    assert seqs.ess == pytest.approx(4.0)
    assert seqs.ess_before_resample == pytest.approx(10 / 3)


async def test_ess_before_resample_of_a_run_dead_at_the_start_and_of_hand_made_sequences():
    never = BoolPotential(AB, lambda ctx: False, lambda ctx: False)
    with pytest.warns(ZeroWeightWarning):
        seqs = await SMC(direct_token_sampler(ab_lm() * never))(3, 0.5, 4, seed=0)
    assert seqs.ess == 0.0 and seqs.ess_before_resample == 0.0
    hand = Sequences([[b"a"], [b"b"]], [0.0, math.log(3)])
    assert hand.ess_before_resample == hand.ess == pytest.approx(16 / 10)
