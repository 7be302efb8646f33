"""Fault injection: a potential that raises on its k-th call of a method, for every k
a run makes, through every sampler path; and cancellation of gathered runs at
random points.

Each faulty run must raise the injected error, leave no task running and no request
in any window, and the same objects must then give the same run as before.
"""

import asyncio
import math

import numpy as np
import pytest
from toys.reliability import (
    AB,
    CountCritic,
    Faulty,
    InjectedFault,
    NoBB,
    ab_lm,
    assert_quiescent,
    same,
)

from genlm.control import AWRS, SMC, Potential
from genlm.control.sampler.token import DirectTokenSampler

RUN = dict(n_particles=5, ess_threshold=0.6, max_tokens=6, seed=11)


def _direct(autobatch):
    def build():
        f = Faulty(ab_lm())
        return f, SMC(DirectTokenSampler(f, autobatch=autobatch), autobatch=autobatch)

    return build


def _direct_proposal(autobatch):
    def build():
        f = Faulty(ab_lm())
        sampler = DirectTokenSampler(ab_lm() * NoBB(), proposal=f, autobatch=autobatch)
        return f, SMC(sampler, autobatch=autobatch)

    return build


def _awrs_condition(autobatch):
    def build():
        f = Faulty(NoBB())

        async def smc(**kwargs):
            # a fresh AWRS per run: an AWRS remembers its condition's answers for its
            # lifetime, so a second run on the same one would ask fewer questions
            return await SMC(AWRS(ab_lm(), f, autobatch=autobatch), autobatch=autobatch)(**kwargs)

        return f, smc

    return build


def _awrs_potential(autobatch):
    def build():
        f = Faulty(ab_lm())
        return f, SMC(AWRS(f, NoBB(), autobatch=autobatch), autobatch=autobatch)

    return build


def _critic(autobatch, critic):
    def build():
        f = Faulty(critic())
        return f, SMC(DirectTokenSampler(ab_lm(), autobatch=autobatch), f, autobatch=autobatch)

    return build


PATHS = {
    "direct": _direct(True),
    "direct-unbatched": _direct(False),
    "direct-proposal": _direct_proposal(True),
    "direct-proposal-unbatched": _direct_proposal(False),
    "awrs-condition": _awrs_condition(True),
    "awrs-condition-unbatched": _awrs_condition(False),
    "awrs-potential": _awrs_potential(True),
    "critic": _critic(True, CountCritic),
    "critic-unbatched": _critic(False, CountCritic),
    "boolean-critic": _critic(True, NoBB),
}


@pytest.mark.parametrize("late", [False, True], ids=["raise-at-call", "raise-after-await"])
@pytest.mark.parametrize("path", sorted(PATHS))
async def test_every_call_of_every_method_can_fail_cleanly(path, late):
    faulty, smc = PATHS[path]()
    baseline = await smc(**RUN)
    counts = dict(faulty.calls)
    assert counts, "the path never called the potential"
    swept = 0
    for method, n in sorted(counts.items()):
        for k in range(n):
            faulty.arm(method, k, late=late)
            with pytest.raises(InjectedFault):
                await smc(**RUN)
            assert_quiescent(faulty)
            faulty.disarm()
            assert same(await smc(**RUN), baseline), (method, k)
            assert dict(faulty.calls) == counts, "a rerun must make the same calls"
            swept += 1
    assert swept == sum(counts.values())


async def test_every_particle_failing_at_once_reports_one_error_and_nothing_unretrieved():
    seen = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, ctx: seen.append(ctx))
    try:
        faulty = Faulty(ab_lm())
        smc = SMC(DirectTokenSampler(faulty, autobatch=False), autobatch=False)
        faulty.arm("logw_next", 0, late=True)
        # make every call after the first fail too: each particle raises on its own
        faulty._tick = lambda name, f=faulty: name == "logw_next"
        with pytest.raises(InjectedFault):
            await smc(**RUN)
        import gc

        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert not seen, seen
    assert_quiescent(faulty)


# Cancellation -------------------------------------------------------------


GATHERED = dict(n_particles=6, ess_threshold=0.5, max_tokens=8)


def _samplers():
    lm = ab_lm()
    return {
        "direct+critic": SMC(DirectTokenSampler(lm), CountCritic()),
        "awrs": SMC(AWRS(lm, NoBB())),
        "awrs+critic": SMC(AWRS(lm, NoBB()), CountCritic()),
    }


@pytest.mark.parametrize("name", ["direct+critic", "awrs", "awrs+critic"])
async def test_cancelling_gathered_runs_at_random_points_leaves_the_others_exact(name):
    smc = _samplers()[name]
    seeds = list(range(4))
    solos = [await smc(seed=s, **GATHERED) for s in seeds]
    rng = np.random.default_rng(7)
    for trial in range(25):
        victims = set(rng.choice(len(seeds), size=int(rng.integers(1, 3)), replace=False).tolist())
        delays = {v: int(rng.integers(0, 60)) for v in victims}
        tasks = [asyncio.ensure_future(smc(seed=s, **GATHERED)) for s in seeds]
        for tick in range(max(delays.values()) + 1):
            for v, d in delays.items():
                if d == tick:
                    tasks[v].cancel()
            await asyncio.sleep(0)
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for i, r in enumerate(results):
            if i in victims and isinstance(r, asyncio.CancelledError):
                continue
            assert not isinstance(r, BaseException), (trial, i, r)
            assert same(r, solos[i]), (trial, i, delays)
        assert_quiescent(smc.unit_sampler.target, smc.critic)
    # the same objects still give the solo results
    assert same(await smc(seed=0, **GATHERED), solos[0])


async def test_a_cancelled_run_is_cancelled_not_failed():
    smc = _samplers()["awrs"]
    task = asyncio.ensure_future(smc(seed=1, **GATHERED))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert_quiescent()
    seqs = await smc(seed=1, **GATHERED)
    assert not math.isnan(seqs.log_ml)
    assert all(ctx[-1] == smc.unit_sampler.target.eos for ctx in seqs.contexts)
    assert {t for ctx in seqs.contexts for t in ctx[:-1]} <= set(AB)


async def test_cancelling_a_run_that_shares_llm_forwards_leaves_the_others_exact():
    # spawned prompts meet in the backend's batches: a cancelled run's queries must
    # not fail the other runs' queries in the same forward
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from genlm.control import PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
    prompts = ["Hello", "The cat", "Once upon"]
    samplers = [
        DirectTokenSampler(llm.spawn(prompt_ids=llm.model.tokenizer.encode(p))) for p in prompts
    ]
    kw = dict(n_particles=3, ess_threshold=0.5, max_tokens=5)
    solos = [await s.smc(seed=i, **kw) for i, s in enumerate(samplers)]
    for delay in [0, 3, 5, 9, 17, 34]:
        llm.model.clear_cache()
        tasks = [asyncio.ensure_future(s.smc(seed=i, **kw)) for i, s in enumerate(samplers)]
        for _ in range(delay):
            await asyncio.sleep(0)
        tasks[0].cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for i in (1, 2):
            assert not isinstance(results[i], BaseException), (delay, results[i])
            assert results[i].contexts == solos[i].contexts, delay
            np.testing.assert_allclose(results[i].log_weights, solos[i].log_weights, atol=1e-4)
        for _ in range(3):  # the cancelled run's shielded queries finish unobserved
            await asyncio.sleep(0)
        assert_quiescent()


@pytest.mark.parametrize("late", [False, True])
async def test_a_fault_inside_a_coerced_batch_leaves_no_task(late):
    from genlm.control.potential.base import Potential

    class Bytes(Potential):
        """Uniform over the words `a`, `b`, `ab` of `AB`'s bytes."""

        def __init__(self):
            super().__init__([b"a", b"b", b"ab"])

        async def prefix(self, context):
            return 0.0

        async def complete(self, context):
            return 0.0

    def split(context):  # a homomorphism from words to one-byte tokens
        return [bytes([c]) for c in b"".join(context)]

    inner = Faulty(ab_lm())
    coerced = inner.coerce(Bytes(), f=split, homomorphic=True)
    contexts = [[b"a"], [b"ab"], [b"b", b"a"]]
    clean = await coerced.batch_logw_next(contexts)
    for at in range(3):
        inner.arm("logw_next", at, late=late)
        with pytest.raises(InjectedFault):
            await coerced.batch_logw_next(contexts)
        assert_quiescent()
    inner.disarm()
    again = await coerced.batch_logw_next(contexts)
    assert all(np.array_equal(a.weights, b.weights) for a, b in zip(clean, again))


class _NoDigits(Potential):
    """Byte strings without an ASCII digit, with only prefix/complete (the shape of
    the slow case: one coerced logw_next over the embedded model's 4096 tokens asks
    ~1.7M prefixes); counts prefix calls and cancels `task` at call `at`."""

    def __init__(self):
        super().__init__(list(range(256)))
        self.calls, self.at, self.task = 0, None, None

    async def prefix(self, context):
        self.calls += 1
        if self.calls == self.at:
            self.task.cancel()
        return -math.inf if any(48 <= c <= 57 for c in context) else 0.0

    async def complete(self, context):
        return await self.prefix(context)


@pytest.mark.filterwarnings("ignore:.*no vectorised logw_next")
async def test_cancelling_smc_over_a_coerced_prefix_only_potential_lands_within_one_pacing_interval():
    from genlm.control import PromptedLLM, direct_token_sampler
    from genlm.control.embedded import EMBEDDED_MODEL

    llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
    llm.set_prompt_from_str("Hello")
    inner = _NoDigits()
    sampler = direct_token_sampler(llm * inner.coerce(llm, f=b"".join))
    task = asyncio.ensure_future(sampler.smc(n_particles=4, ess_threshold=0.5, max_tokens=5, seed=0))
    inner.at, inner.task = 20_000, task
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    # Each particle's walk yields at least every 256 prefix calls, and the cancel
    # descends one level of gathered tasks (run, step, particle, product) per pass of
    # the event loop: at most 4 passes of 4 walks. Without pacing, each walk would
    # finish its ~1.7M calls first.
    assert 0 <= inner.calls - 20_000 <= 4 * 4 * 256
    assert_quiescent()
