"""The vLLM backend's rows against the HF backend's, its batching, errors and recovery."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from toys.vllm_engine import vllm_llm, wait_until

from genlm.control import PromptedLLM, direct_token_sampler
from genlm.control.draw import counting_readbacks
from genlm.control.embedded import EMBEDDED_MODEL

ATOL = 1e-4


@pytest.fixture(scope="module")
def vllm():
    llm = vllm_llm("The value is")
    yield llm
    llm.model.close()


@pytest.fixture(scope="module")
def hf(vllm):
    return PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf", prompt_ids=vllm.prompt_ids)


def random_contexts(llm, rng, n, longest=40):
    picks = [rng.integers(len(llm.vocab), size=int(rng.integers(0, longest))) for _ in range(n)]
    return [[llm.vocab[int(i)] for i in ids] for ids in picks]


def assert_rows_equal(got, want):
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g.weights), np.asarray(w.weights), atol=ATOL, rtol=0)


async def test_backend_is_ours_with_rows_on_the_engine_device(vllm):
    from genlm.control.lm._vllm import VLLMBackend

    assert isinstance(vllm.model, VLLMBackend)
    rows = await vllm.model.batch_next_token_logprobs([[1, 2, 3], [4]])
    assert rows.dtype == torch.float32 and rows.shape[0] == 2
    assert rows.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    np.testing.assert_allclose(torch.logsumexp(rows, dim=-1).cpu().numpy(), 0.0, atol=1e-5)


async def test_a_repeated_query_is_answered_from_kept_rows(vllm):
    """The row after a particle's new token is read twice per SMC step (the end
    twist, then the next draw): the second read takes no engine request, gives the
    same row, and `clear_cache()` or a full cache sends the query to the engine again."""
    model = vllm.model
    model.clear_cache()
    ids = [[5, 6, 7], [5, 6, 8]]
    first = await model.batch_next_token_logprobs(ids)
    steps, hits = model.steps, model.row_hits
    again = await model.batch_next_token_logprobs(ids[::-1])
    assert model.steps == steps and model.row_hits == hits + 2
    assert torch.equal(again, first.flip(0))
    model.clear_cache()
    await model.batch_next_token_logprobs(ids)
    assert model.steps > steps and model.row_hits == hits + 2
    # least recently used rows leave first once more than row_cache_rows are kept
    kept, model.row_cache_rows = model.row_cache_rows, 2
    try:
        await model.batch_next_token_logprobs([[9], [10], [11]])
        steps = model.steps
        await model.batch_next_token_logprobs([[10], [11]])
        assert model.steps == steps
        await model.batch_next_token_logprobs([[9]])
        assert model.steps > steps
    finally:
        model.row_cache_rows = kept
        model.clear_cache()


async def test_rows_equal_hf_at_random_contexts(vllm, hf):
    rng = np.random.default_rng(0)
    contexts = random_contexts(vllm, rng, 24)
    got, want = await asyncio.gather(vllm.batch_logw_next(contexts), hf.batch_logw_next(contexts))
    assert_rows_equal(got, want)


async def test_rows_equal_hf_after_fork_like_reuse(vllm, hf):
    """Resampling copies particles: the batch repeats contexts and extends shared
    prefixes (vLLM's prefix cache serves the shared blocks)."""
    rng = np.random.default_rng(1)
    base = random_contexts(vllm, rng, 4, longest=60)
    for _ in range(3):
        parents = [base[int(i)] for i in rng.integers(0, len(base), size=8)]
        base = [p + [vllm.vocab[int(rng.integers(len(vllm.vocab)))]] for p in parents]
        got, want = await asyncio.gather(vllm.batch_logw_next(base), hf.batch_logw_next(base))
        assert_rows_equal(got, want)


async def test_several_prompts_share_one_engine_batch(vllm, hf):
    prompts = ["The module", "A list of", "x = 1\n"]
    llms = [vllm.spawn(prompt_ids=vllm.model.tokenizer.encode(p)) for p in prompts]
    refs = [hf.spawn(prompt_ids=p.prompt_ids) for p in llms]
    ctx = vllm.tokenize(" value")
    calls = []
    driver = vllm.model._driver
    submit = driver.submit
    driver.submit = lambda kind, wanted=None, fn=None: (
        calls.append(len(wanted or [])) or submit(kind, wanted, fn)
    )
    try:
        got = await asyncio.gather(*(p.logw_next(ctx) for p in llms))
    finally:
        del driver.submit
    assert calls == [3]  # one job of the engine thread for the three prompts' queries
    want = [await r.logw_next(ctx) for r in refs]
    assert_rows_equal(got, want)
    # each prompt's row is its own: the prompts' rows differ
    assert np.abs(np.asarray(got[0].weights) - np.asarray(got[1].weights)).max() > 1e-2


async def test_sync_queries_equal_async_ones(vllm):
    ids = vllm.prompt_ids + [5, 9]
    a = vllm.model.next_token_logprobs_sync(ids)
    b = await vllm.model.next_token_logprobs(ids)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


async def test_direct_sampler_step_reads_back_once(vllm):
    device = PromptedLLM(vllm.model, prompt_ids=vllm.prompt_ids, rows="device")
    sampler = direct_token_sampler(device)
    for n in (2, 16):
        contexts = [[] for _ in range(n)]
        await sampler.batch_sample(contexts, [np.random.default_rng(0)] * n)
        with counting_readbacks() as count:
            await sampler.batch_sample(contexts, [np.random.default_rng(k) for k in range(n)])
        assert count.value == 1


async def test_prompt_longer_than_max_model_len_is_a_clear_error(vllm):
    long = vllm.spawn(prompt_ids=[5] * 300)
    with pytest.raises(ValueError, match=r"300 tokens, over the model's limit of 255 positions"):
        await long.logw_next([])
    with pytest.raises(IndexError, match=r"query of 300 tokens .* max_model_len=256"):  # and ValueError
        await vllm.model.next_token_logprobs([5] * 300)
    assert (await vllm.model.next_token_logprobs([5] * 255)).shape[0] >= len(vllm.vocab)


async def test_ids_outside_the_vocabulary_are_refused_unless_checked_by_their_maker(vllm):
    from genlm.control.lm._kv_cache import Ids

    model, v = vllm.model, vllm.model.vocab_size
    for bad in ([5, v], [-1, 5]):
        with pytest.raises(ValueError, match=r"token ids must lie in \[0, \d+\)"):
            await model.next_token_logprobs(bad)
        with pytest.raises(ValueError, match=r"token ids must lie"):  # a bound over the engine's: read
            await model.next_token_logprobs(marked(Ids(bad), v + 1))
    good = marked(Ids([5, 6]), v)  # checked by its maker against the engine's vocabulary
    assert model._check([good], None)[0] is good
    torch.testing.assert_close(await model.next_token_logprobs(good), await model.next_token_logprobs([5, 6]))
    seen = []
    inner = model.batch_next_token_logprobs

    async def spy(token_ids_list, **kw):
        seen.extend(token_ids_list)
        return await inner(token_ids_list, **kw)

    model.batch_next_token_logprobs = spy
    try:
        await vllm.batch_logw_next([[vllm.vocab[3]], []])
    finally:
        del model.batch_next_token_logprobs
    assert seen and all(type(k) is Ids and k.below == len(vllm.token_maps.decode) <= v for k in seen)


def marked(key, below):
    key.below = below
    return key


async def test_lora_without_lora_engine_is_a_clear_error(vllm):
    with pytest.raises(ValueError, match="started without LoRA.*enable_lora"):
        vllm.model.add_new_lora("/nonexistent", "a")
    asking = PromptedLLM(vllm.model, prompt_ids=vllm.prompt_ids, lora_name="missing")
    with pytest.raises(ValueError, match="LoRA adapter 'missing' is not available on VLLMBackend"):
        await asking.logw_next([])


async def test_a_failing_step_aborts_its_requests_and_the_engine_stays_usable(vllm, hf):
    engine = vllm.model.engine
    engine.step = lambda: (_ for _ in ()).throw(RuntimeError("step failed"))
    try:
        with pytest.raises(RuntimeError, match="step failed"):
            await vllm.batch_logw_next([[vllm.vocab[3]], [vllm.vocab[4]]])
    finally:
        del engine.step
    assert not engine.has_unfinished_requests()
    ctx = [vllm.vocab[3]]
    assert_rows_equal([await vllm.logw_next(ctx)], [await hf.logw_next(ctx)])


async def test_cancelled_runs_leave_the_engine_usable(vllm, hf):
    """A run cancelled mid-step has its live requests ended (at once when it is
    cancelled waiting for the engine, else when no pass comes within `live_idle_s`),
    with no call needed."""
    sampler = direct_token_sampler(vllm)
    model = vllm.model
    idle, model.live_idle_s = model.live_idle_s, 0.05
    try:
        for passes in (1, 3, 10, 40):
            task = asyncio.ensure_future(
                sampler.smc(n_particles=8, ess_threshold=0.5, max_tokens=40, seed=1)
            )
            for _ in range(passes):
                await asyncio.sleep(0)
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await wait_until(lambda: not model.engine.has_unfinished_requests())
            assert model.live_requests() == 0 and not model._sink
    finally:
        model.live_idle_s = idle
    rng = np.random.default_rng(2)
    contexts = random_contexts(vllm, rng, 6)
    assert_rows_equal(await vllm.batch_logw_next(contexts), await hf.batch_logw_next(contexts))
    seqs = await sampler.smc(n_particles=4, ess_threshold=0.5, max_tokens=3, seed=0)
    assert len(seqs.contexts) == 4


def test_vocabulary_mismatch_is_a_clear_error(tmp_path):
    """A tokenizer with more tokens than the model's logits fails before an engine starts."""
    from transformers import AutoTokenizer

    from genlm.control.embedded import model_path

    tok = AutoTokenizer.from_pretrained(model_path())
    tok.add_tokens([f"<extra_{i}>" for i in range(8)])
    tok.save_pretrained(tmp_path)
    with pytest.raises(
        ValueError, match=r"has 4104 tokens but the model .* vocabulary of 4096: they do not match"
    ):
        PromptedLLM.from_name(EMBEDDED_MODEL, backend="vllm", tokenizer=str(tmp_path))


def test_head_size_the_cpu_kernels_do_not_take_is_a_clear_error(tmp_path):
    """On vLLM's CPU build, a model with 8-dimensional heads (its attention kernels take
    32 and up) fails before an engine starts, naming the size; elsewhere nothing is checked."""
    import json
    import types

    from genlm.control.embedded import model_path
    from genlm.control.lm._vllm import _cpu_head_sizes, check_head_size

    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": 4096,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    if _cpu_head_sizes() is not None:
        with pytest.raises(
            ValueError,
            match=r"attention heads of 8 dimensions, which vLLM's CPU attention does not take",
        ):
            PromptedLLM.from_name(str(tmp_path), backend="vllm", tokenizer=str(model_path()))
    check_head_size(
        types.SimpleNamespace(hidden_size=32, num_attention_heads=4, head_dim=32), "m", [32, 64]
    )
    check_head_size(types.SimpleNamespace(hidden_size=32, num_attention_heads=4), "m", None)
    with pytest.raises(ValueError, match="heads of 8 dimensions"):
        check_head_size(
            types.SimpleNamespace(hidden_size=32, num_attention_heads=4, head_dim=None), "m", [32]
        )


def test_unknown_model_offline_is_a_clear_error(monkeypatch):
    from genlm.control.lm._llm_loading import ModelNotAvailableError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotAvailableError, match="not available offline"):
        PromptedLLM.from_name("nobody-here/no-such-model", backend="vllm")


@pytest.mark.parametrize(
    "opts, message",
    [
        ({"tensor_parallel_size": 2}, "tensor_parallel_size=2: the vLLM backend reads each row"),
        ({"pipeline_parallel_size": 2}, "pipeline_parallel_size=2"),
        ({"distributed_executor_backend": "ray"}, "distributed_executor_backend='ray'"),
    ],
)
def test_engines_with_workers_elsewhere_are_a_clear_error(opts, message):
    with pytest.raises(ValueError, match=message):
        PromptedLLM.from_name(EMBEDDED_MODEL, backend="vllm", **opts)
