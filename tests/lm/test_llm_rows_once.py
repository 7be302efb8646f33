"""A `PromptedLLM`'s rows are the same numbers however the step asks for them: from a
fresh batch, from the block kept from the latest call (`LastRows`), for repeated
contexts, and as EOS entries alone (`batch_eos_entries`)."""

import numpy as np
import pytest
import torch
from toys.core import counting_calls

from genlm.control import PromptedLLM
from genlm.control.embedded import EMBEDDED_MODEL
from genlm.control.lm import token_maps
from genlm.control.lm.token_maps import next_token_rows
from genlm.control.potential import fast_paths


@pytest.fixture(scope="module")
def backend():
    return PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf").model


def _contexts(llm):
    a, b, c = (llm.vocab[i] for i in (5, 17, 300))
    return [[a], [b], [a, c], [b]]


@pytest.mark.parametrize("rows", ["host", "device"])
async def test_rows_from_the_kept_block_and_repeats_equal_fresh_rows(backend, rows):
    llm = PromptedLLM(backend, rows=rows)
    contexts = _contexts(llm)
    backend.clear_cache()
    llm._logprobs_at, fetched = counting_calls(llm._logprobs_at)
    first = await llm.batch_logw_next(contexts)  # a forward; the block is kept
    again = await llm.batch_logw_next(
        [contexts[3], contexts[0], contexts[0]]
    )  # from the kept block
    assert fetched == [3]  # three distinct contexts, fetched once
    singles = [await PromptedLLM(backend, rows=rows).logw_next(ctx) for ctx in contexts]
    for got, want in zip(first, singles):
        assert np.array_equal(got.host(), want.host())
    for got, want in zip(again, [singles[3], singles[0], singles[0]]):
        assert np.array_equal(got.host(), want.host())


async def test_eos_entries_are_the_rows_last_entries_bit_for_bit(backend):
    llm = PromptedLLM(backend)
    assert "eos_entries" in fast_paths.declared(llm)
    assert "eos_entries" in fast_paths.declared(llm.to_autobatched())
    contexts = _contexts(llm)
    eos = await llm.batch_eos_entries(contexts)
    rows = await PromptedLLM(backend).batch_logw_next(contexts)
    assert eos.dtype == np.float64
    assert eos.tolist() == [float(r.host()[-1]) for r in rows]
    assert (await llm.batch_eos_entries([])).shape == (0,)


@pytest.mark.parametrize("gather_width", [0, 1 << 30])  # host rows row by row / one gather
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_ordered_rows_equal_indexed_rows(monkeypatch, gather_width, dtype):
    monkeypatch.setattr(token_maps, "_GATHER_WIDTH", gather_width)
    llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
    maps = llm.token_maps
    logprobs = torch.log_softmax(torch.randn(3, len(maps.decode)), dim=-1).to(dtype)
    order = np.array([2, 0, 2, 1, 0])
    for on_device in (False, True):
        whole = next_token_rows(logprobs, maps, on_device)
        got = next_token_rows(logprobs, maps, on_device, order)
        want = whole[torch.as_tensor(order)] if on_device else whole[order]
        assert torch.equal(got, want) if on_device else np.array_equal(got, want)
    assert maps.vocab_runs == [(1, len(maps.decode), 0)]  # the embedded model: EOS is id 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("eos", [None, [b".", b"\n"]])  # EOS id 0 alone; two EOS tokens inside the ids
def test_host_rows_by_numpy_slices_equal_torch_copies_bit_for_bit(monkeypatch, dtype, eos):
    base = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
    maps = (base if eos is None else base.spawn(eos_tokens=eos)).token_maps
    assert len(maps.eos_idxs) == (1 if eos is None else 2)
    torch.manual_seed(0)
    logprobs = torch.log_softmax(torch.randn(4, len(maps.decode)), dim=-1).to(dtype)
    for order in (None, np.array([3, 0, 3, 1, 2, 0])):
        monkeypatch.setattr(token_maps, "_GATHER_WIDTH", 0)  # torch's copies
        slow = next_token_rows(logprobs, maps, False, order)
        monkeypatch.setattr(token_maps, "_GATHER_WIDTH", 1 << 30)  # NumPy slices
        fast = next_token_rows(logprobs, maps, False, order)
        assert fast.dtype == slow.dtype == logprobs.numpy().dtype
        assert np.array_equal(fast, slow)
        rows = range(len(logprobs)) if order is None else order
        eos_want = torch.logsumexp(logprobs[:, list(maps.eos_idxs)], dim=-1).numpy()
        assert np.array_equal(fast[:, -1], eos_want[list(rows)])
