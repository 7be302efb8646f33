"""Particles decode in place: a query that extends a live request's context by one
token continues that request (the token forced is the one asked), its row equals
the HF backend's, and runs give the same sequences as with one request per query;
cancelled, failing and many consecutive runs leave nothing behind."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from toys.ab import Failing
from toys.vllm_engine import vllm_llm, wait_until

import genlm.control._host_blocks as host_blocks
from genlm.control import AWRS, BoolFSA, PromptedLLM, direct_token_sampler
from genlm.control._host_blocks import HostBlocks
from genlm.control.embedded import EMBEDDED_MODEL

ATOL = 1e-4


@pytest.fixture(scope="module")
def vllm():
    llm = vllm_llm("The value is")
    llm.model.live_idle_s = 0.2
    yield llm
    llm.model.close()


@pytest.fixture(scope="module")
def hf(vllm):
    return PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf", prompt_ids=vllm.prompt_ids)


def idle(model) -> bool:
    return (
        model.live_requests() == 0
        and not model.engine.has_unfinished_requests()
        and not model._sink
    )


async def test_engine_decodes_in_place_on_the_legacy_runner_of_the_cpu_build(vllm):
    model = vllm.model
    assert model.in_place and model.runner == (
        "v1" if not torch.cuda.is_available() else model.runner
    )
    config = model.engine.vllm_config
    assert not config.scheduler_config.enable_chunked_prefill


async def test_forked_particles_continue_in_place_with_rows_equal_hf(vllm, hf):
    """Passes as SMC makes them, over two prompts at once: draw a token per particle,
    resample (clones repeat a parent), read each new context twice (a kept row the
    second time). Each distinct live parent is continued once; every row equals HF's."""
    model = vllm.model
    model.release()
    model.clear_cache()
    rng = np.random.default_rng(3)
    prompts = [vllm.prompt_ids, model.tokenizer.encode("A list of")]
    contexts = [list(prompts[i % 2]) + [int(rng.integers(50, 4000))] for i in range(8)]
    live: set[tuple] = set()
    for _ in range(6):
        before, steps = model.continued, model.steps
        got = await model.batch_next_token_logprobs(contexts)
        want = await hf.model.batch_next_token_logprobs(contexts)
        np.testing.assert_allclose(got.cpu().numpy(), want.cpu().numpy(), atol=ATOL, rtol=0)
        extended = {tuple(c[:-1]) for c in contexts} & live
        assert model.continued - before == len(extended)
        assert model.live_requests() == len({tuple(c) for c in contexts})
        again = await model.batch_next_token_logprobs(contexts)  # the second read: kept rows
        assert model.steps == steps + 1 and torch.equal(again, got)
        live = {tuple(c) for c in contexts}
        picks = rng.integers(0, len(contexts), size=len(contexts))  # resampling: clones repeat
        gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
        draws = [int(torch.multinomial(got[int(i)].exp(), 1, generator=gen)) for i in picks]
        contexts = [contexts[int(i)] + [t] for i, t in zip(picks, draws)]
    model.release()
    assert idle(model)


async def test_rows_in_kept_host_blocks_equal_hf_and_held_rows_keep_their_values(vllm, hf, monkeypatch):
    """Every host block kept for reuse (`_host_blocks`, however small): the captured
    rows and the stacked blocks reuse freed blocks, rows equal HF's at every step, and
    the blocks a caller still holds are never written again."""
    blocks = HostBlocks()
    monkeypatch.setattr(host_blocks, "MIN_BYTES", 0)
    monkeypatch.setattr(host_blocks.HOST_BLOCKS, "empty", blocks.empty)
    model = vllm.model
    model.release()
    model.clear_cache()
    rng = np.random.default_rng(5)
    contexts = [list(vllm.prompt_ids) + [int(rng.integers(50, 4000))] for _ in range(6)]
    held = []
    for step in range(8):
        got = await model.batch_next_token_logprobs(contexts)
        want = await hf.model.batch_next_token_logprobs(contexts)
        np.testing.assert_allclose(got.cpu().numpy(), want.cpu().numpy(), atol=ATOL, rtol=0)
        if step % 3 == 0:
            held.append((got, got.clone()))
        picks = rng.integers(0, len(contexts), size=len(contexts))
        gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
        draws = [int(torch.multinomial(got[int(i)].exp(), 1, generator=gen)) for i in picks]
        contexts = [contexts[int(i)] + [t] for i, t in zip(picks, draws)]
    model.release()
    assert blocks.reused > 5
    assert all(torch.equal(rows, copy) for rows, copy in held)


async def test_the_forced_token_is_the_one_vllm_appends(vllm, hf):
    """One live request continued with the least likely token (never the greedy one)
    to the engine's length: every continuation is in place and the last row, which
    reads every token appended, equals HF's row of the tokens asked."""
    model = vllm.model
    model.release()
    ids = list(vllm.prompt_ids)
    row = await model.next_token_logprobs(ids)
    asked = []
    while len(ids) < model.max_model_len - 1:
        t = int(torch.argmin(row))  # the least likely token: never the greedy pick
        asked.append(t)
        ids.append(t)
        row = await model.next_token_logprobs(ids)
    assert model.continued >= len(asked)
    want = await hf.model.next_token_logprobs(ids)
    np.testing.assert_allclose(row.cpu().numpy(), want.cpu().numpy(), atol=ATOL, rtol=0)
    await wait_until(lambda: idle(model))


def run_both_ways(model, make_runs):
    """The runs `make_runs()` in place, then with one request per query."""
    outs = []
    for in_place in (True, False):
        model.release()
        model.clear_cache()
        model._driver.in_place = in_place
        try:
            continued = model.continued
            outs.append(asyncio.run(make_runs()))
            assert (model.continued > continued) == in_place
        finally:
            model._driver.in_place = True
    return outs


@pytest.mark.parametrize("kind", ["direct", "awrs"])
def test_seeded_runs_give_the_per_query_sequences(vllm, kind):
    """Four gathered runs, with resampling: in place and one request per query give the
    same sequences and weights."""
    if kind == "direct":
        sampler = direct_token_sampler(vllm)
    else:
        sampler = AWRS(vllm, BoolFSA.from_regex(r" [0-9]+(\.[0-9]+)?").coerce(vllm, f=b"".join))

    async def runs():
        return await asyncio.gather(
            *(sampler.smc(n_particles=6, ess_threshold=0.9, max_tokens=8, seed=s) for s in range(4))
        )

    fast, slow = run_both_ways(vllm.model, runs)
    for a, b in zip(fast, slow):
        assert a.contexts == b.contexts
        np.testing.assert_allclose(a.log_weights, b.log_weights, atol=ATOL)


async def test_a_failing_run_does_not_strand_another(vllm):
    """Two gathered runs, one with a critic that raises at its third token: the other
    run gives the sequences it gives alone, and the engine is left idle."""
    model = vllm.model
    sampler = direct_token_sampler(vllm)
    model.release()
    model.clear_cache()
    alone = await sampler.smc(n_particles=5, ess_threshold=0.5, max_tokens=6, seed=7)
    model.clear_cache()
    good, bad = await asyncio.gather(
        sampler.smc(n_particles=5, ess_threshold=0.5, max_tokens=6, seed=7),
        sampler.smc(
            n_particles=5, ess_threshold=0.5, max_tokens=6, seed=8, critic=Failing(vllm, at=3)
        ),
        return_exceptions=True,
    )
    assert isinstance(bad, RuntimeError) and "boom" in str(bad)
    assert good.contexts == alone.contexts
    await wait_until(lambda: idle(model))


async def test_memory_is_bounded_over_200_runs(vllm):
    """200 consecutive runs: at rest, no request, captured row or kept row beyond the
    bounds is left; the engine holds at most one run's live requests."""
    model = vllm.model
    sampler = direct_token_sampler(vllm)
    model.release()
    for seed in range(200):
        seqs = await sampler.smc(n_particles=4, ess_threshold=0.5, max_tokens=3, seed=seed)
        assert len(seqs.contexts) == 4
        assert model.engine.get_num_unfinished_requests() == model.live_requests() <= 4
        assert not model._sink and not model._capture.pending
        assert len(model._rows) <= model.row_cache_rows
        assert len(model._capture.holdable) == model.live_requests()
    await wait_until(lambda: idle(model))
    assert not model._capture.holdable and not model._driver.live
