"""`PromptedLLM` over the vLLM backend's interface, in CI, without vLLM or CUDA.

`StandInVirtualLM` has the interface our code uses of genlm-backend's `AsyncVirtualLM`
(`tokenizer`, `byte_vocab`, `next_token_logprobs` / `batch_next_token_logprobs` with
`lora_name=`, `add_new_lora` / `remove_lora`, `clear_cache`; no `.model`, so no
position limit is read) and returns what it returns: a stacked `[N, width]` tensor of
normalised log-probabilities, on the engine's device (the CPU stands in for CUDA), of
width the model's vocabulary, which can be larger than the tokenizer's (the extra
columns are given no mass here), in float32 (`AsyncVirtualLM`: `log_softmax(logits.float())`) or, to cover
engines that hand back half precision, bf16 / fp16. An unknown adapter is a
`ValueError`, as in `AsyncVirtualLM._enqueue`. Rows are a fixed function of
(ids, adapter), so every value is checked exactly against the stand-in's own row.
"""

from __future__ import annotations

import os
import re
import zlib

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from genlm.backend.llm import AsyncLM  # noqa: E402

from genlm.control import AWRS, EOS, BoolFSA, PromptedLLM, direct_token_sampler  # noqa: E402
from genlm.control.embedded import EMBEDDED_MODEL, resolve  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
#: Unit roundoff of each dtype (round to nearest: relative error at most 2^-precision bits).
EPS = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


class StandInVirtualLM(AsyncLM):
    """The vLLM backend's interface over the embedded model's tokenizer (see module doc)."""

    def __init__(
        self, tokenizer, dtype: torch.dtype = torch.float32, pad: int = 64, device: str = "cpu", pad_mass: bool = False
    ):
        super().__init__(tokenizer)
        self.dtype, self.device, self.pad_mass = dtype, torch.device(device), pad_mass
        self.width = len(self.byte_vocab) + pad
        self.adapters: dict[str, str] = {}
        self.calls: list[tuple[int, str | None]] = []  # (rows, lora_name) per batch

    def reference(self, ids, lora_name: str | None = None) -> torch.Tensor:
        """The float32 row (before the cast to `dtype`) for `ids` under `lora_name`."""
        key = f"{lora_name}:{','.join(map(str, ids))}".encode()
        gen = torch.Generator().manual_seed(zlib.crc32(key))
        logits = 3.0 * torch.randn(self.width, generator=gen)
        if not self.pad_mass:
            logits[len(self.byte_vocab) :] = -torch.inf  # columns past the tokenizer's vocabulary
        return torch.log_softmax(logits, dim=-1)

    async def batch_next_token_logprobs(self, token_ids_list, lora_name=None):
        if lora_name is not None and lora_name not in self.adapters:
            raise ValueError(f"unknown LoRA adapter {lora_name!r}: register it with add_new_lora")
        if any(not ids for ids in token_ids_list):
            raise ValueError("token_ids must not be empty")
        self.calls.append((len(token_ids_list), lora_name))
        rows = [self.reference(ids, lora_name).to(self.dtype) for ids in token_ids_list]
        return torch.stack(rows).to(self.device)

    async def next_token_logprobs(self, token_ids, lora_name=None):
        return (await self.batch_next_token_logprobs([token_ids], lora_name))[0]

    def next_token_logprobs_sync(self, token_ids, lora_name=None):
        return self.reference(token_ids, lora_name).to(self.dtype)

    def add_new_lora(self, lora_path, lora_name="lora_1"):
        self.adapters[lora_name] = lora_path

    def remove_lora(self, lora_name):
        del self.adapters[lora_name]

    def clear_cache(self):
        pass


class NoLoraLM(StandInVirtualLM):
    """A backend that does not override `add_new_lora`: no adapter support."""

    add_new_lora = AsyncLM.add_new_lora


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve(EMBEDDED_MODEL))


@pytest.fixture(params=DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def engine(request, tokenizer):
    return StandInVirtualLM(tokenizer, dtype=request.param)


def expected_row(engine, ids, llm, lora_name=None) -> np.ndarray:
    """The row over `llm.vocab + [EOS]` from the stand-in's row cast to its dtype, upcast
    (several EOS tokens are summed in the row's dtype, then upcast)."""
    lp = engine.reference(ids, lora_name).to(engine.dtype)
    vocab_ids = [t.token_id for t in llm.vocab]
    eos = torch.logsumexp(lp[list(llm.token_maps.eos_idxs)], dim=0)
    return np.append(lp.double()[vocab_ids].numpy(), eos.double().item())


async def test_rows_equal_the_engine_rows_upcast(engine):
    llm = PromptedLLM(engine)
    llm.set_prompt_from_str("The value of x is")
    ctx = llm.tokenize(" 42")
    row = await llm.logw_next(ctx)
    ids = llm.prompt_ids + [t.token_id for t in ctx]
    # float32 rows on the host (half precision widened to float32): the engine's values
    assert row.weights.dtype == np.float32 and len(row.weights) == len(engine.byte_vocab)
    np.testing.assert_array_equal(row.weights, expected_row(engine, ids, llm))
    # ... and within the dtype's precision of the engine's float32 row.
    ref = engine.reference(ids).double().numpy()[: len(engine.byte_vocab)]
    want = np.append(ref[[t.token_id for t in llm.vocab]], ref[engine.tokenizer.eos_token_id])
    np.testing.assert_allclose(row.weights, want, rtol=EPS[engine.dtype], atol=0)
    # Normalised over the tokenizer's vocabulary: the extra columns carried no mass.
    assert np.logaddexp.reduce(row.weights) == pytest.approx(0.0, abs=len(want) * EPS[engine.dtype])


async def test_mass_past_the_tokenizer_vocabulary_is_dropped_not_renormalised(tokenizer):
    engine = StandInVirtualLM(tokenizer, pad=512, pad_mass=True)
    llm = PromptedLLM(engine, prompt_ids=[7])
    row = await llm.logw_next([])
    np.testing.assert_array_equal(row.weights, expected_row(engine, [7], llm))
    dropped = torch.logsumexp(engine.reference([7])[len(engine.byte_vocab) :].double(), dim=0)
    assert np.logaddexp.reduce(row.weights) == pytest.approx(np.log1p(-np.exp(dropped.item())), abs=1e-5)
    assert dropped.item() > -3  # 512 extra columns of 4608 carry real mass


async def test_batch_rows_eos_folded_and_duplicates_share_a_row(engine):
    eos_id = engine.tokenizer.eos_token_id
    period = engine.tokenizer.encode(".", add_special_tokens=False)
    assert len(period) == 1
    llm = PromptedLLM(engine, prompt_ids=[5, 6], eos_byte_strings=[engine.byte_vocab[eos_id], b"."])
    assert llm.token_maps.eos_idxs == tuple(sorted((eos_id, period[0])))
    a, b = llm.tokenize(" the"), llm.tokenize(" of")
    rows = await llm.batch_logw_next([a, b, a, []])
    assert engine.calls[-1] == (3, None)  # one backend batch; the duplicate context is asked once
    for ctx, row in zip([a, b, a, []], rows):
        ids = [5, 6] + [t.token_id for t in ctx]
        np.testing.assert_array_equal(row.weights, expected_row(engine, ids, llm))
        lp = engine.reference(ids).to(engine.dtype).double()
        eos = float(torch.logaddexp(lp[eos_id], lp[period[0]]))
        assert row[EOS] == pytest.approx(eos, rel=EPS[engine.dtype], abs=1e-12)


async def test_prefix_and_complete_sum_the_rows(engine):
    llm = PromptedLLM(engine, prompt_ids=[7])
    ctx = llm.tokenize(" a b")
    ids = [7] + [t.token_id for t in ctx]
    rows = [engine.reference(ids[:i], None).to(engine.dtype).double() for i in range(1, len(ids) + 1)]
    prefix = sum(float(rows[i][ids[i + 1]]) for i in range(len(ctx)))
    eos = float(rows[-1][engine.tokenizer.eos_token_id])
    assert await llm.prefix(ctx) == pytest.approx(prefix, rel=1e-12)
    assert await llm.complete(ctx) == pytest.approx(prefix + eos, rel=1e-12)


async def test_temperature_tempers_the_upcast_rows(engine):
    llm = PromptedLLM(engine, prompt_ids=[7], temperature=0.5)
    row = await llm.logw_next([])
    lp = torch.log_softmax(engine.reference([7]).to(engine.dtype).double()[: len(engine.byte_vocab)] / 0.5, dim=-1)
    vocab_ids = [t.token_id for t in llm.vocab]
    np.testing.assert_allclose(row.weights[:-1], lp[vocab_ids].numpy(), rtol=1e-12, atol=1e-12)
    assert np.all(np.isfinite(row.weights))


async def test_direct_sampler_smc_weights_are_the_row_normalisers(engine):
    llm = PromptedLLM(engine)
    llm.set_prompt_from_str("The value of x is")
    seqs = await direct_token_sampler(llm).smc(n_particles=4, ess_threshold=0.0, max_tokens=5, seed=3)
    assert len(seqs.contexts) == 4
    for ctx, logw in zip(seqs.contexts, seqs.log_weights):
        assert 1 <= len(ctx) <= 5 and all(t in llm.vocab or t is EOS for t in ctx)
        # Without resampling, a particle's weight is Σ_t log Σ_x row_t(x), the mass of
        # each float32 row (1 up to the dtype's rounding), summed here in float64; at
        # max_tokens EOS is forced and the last step contributes row[EOS] instead. The
        # draw sums a float32 row's masses in float32 blocks accumulated in float64:
        # float32 precision, a few 1e-7 per step.
        forced = len(ctx) == 5
        want = 0.0
        for t in range(len(ctx)):
            row = await llm.logw_next(ctx[:t])
            want += row[EOS] if forced and t == len(ctx) - 1 else np.logaddexp.reduce(row.weights.astype(np.float64))
        assert logw == pytest.approx(want, abs=2e-6 * len(ctx))
    assert any(len(c) == 5 for c in seqs.contexts)


async def test_awrs_smc_end_to_end(engine):
    llm = PromptedLLM(engine)
    llm.set_prompt_from_str("The value of x is")
    pattern = r" [0-9]\."
    sampler = AWRS(llm, BoolFSA.from_regex(pattern).coerce(llm, f=b"".join))
    seqs = await sampler.smc(n_particles=4, ess_threshold=0.5, max_tokens=8, seed=0)
    assert not np.isnan(seqs.log_weights).any()
    for ctx, logw in zip(seqs.contexts, seqs.log_weights):
        text = b"".join(bytes(t) for t in ctx if t is not EOS)
        # Every context stays in the pattern's prefixes; those with weight are in it.
        assert re.fullmatch(rb"(?: (?:[0-9]\.?)?)?", text), text
        assert (re.fullmatch(pattern.encode(), text) is not None) == np.isfinite(logw), (text, logw)
    assert np.isfinite(seqs.log_weights).any()
    assert all(n is None for _, n in engine.calls)


async def test_lora_name_reaches_the_engine(tokenizer):
    engine = StandInVirtualLM(tokenizer)
    engine.add_new_lora("/adapters/a", "a")
    base = PromptedLLM(engine, prompt_ids=[7])
    tuned = base.spawn(lora_name="a")
    assert tuned.lora_name == "a" and base.spawn().lora_name is None
    row, base_row = await tuned.logw_next([]), await base.logw_next([])
    np.testing.assert_array_equal(row.weights, expected_row(engine, [7], tuned, "a"))
    assert not np.allclose(row.weights, base_row.weights)
    assert [n for _, n in engine.calls] == ["a", None]
    await direct_token_sampler(tuned).smc(n_particles=2, ess_threshold=0.5, max_tokens=3, seed=0)
    assert {n for _, n in engine.calls[2:]} == {"a"}


async def test_lora_unknown_or_unsupported_is_a_clear_error(tokenizer):
    engine = StandInVirtualLM(tokenizer)
    llm = PromptedLLM(engine, prompt_ids=[7], lora_name="missing")
    with pytest.raises(ValueError, match="LoRA adapter 'missing' is not available on StandInVirtualLM"):
        await llm.logw_next([])
    with pytest.raises(ValueError, match="'a'.*NoLoraLM does not support LoRA adapters"):
        PromptedLLM(NoLoraLM(tokenizer), lora_name="a")
    with pytest.raises(TypeError, match="lora_name must be a str"):
        PromptedLLM(engine, lora_name=1)


def test_from_name_vllm_builds_the_adapter_over_the_engine(tokenizer, monkeypatch):
    """`from_name(..., backend="vllm")` hands the name and `engine_opts` to
    `VLLMBackend.from_name` and wraps what it returns (the vllm package faked present)."""
    from genlm.control.lm import _llm_loading, _vllm

    seen = {}

    def fake_from_name(name, **kwargs):
        seen.update(name=name, **kwargs)
        return StandInVirtualLM(tokenizer, dtype=torch.bfloat16)

    monkeypatch.setattr(_llm_loading, "_vllm_importable", lambda: True)
    monkeypatch.setattr(_vllm.VLLMBackend, "from_name", staticmethod(fake_from_name))
    llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend="vllm", engine_opts={"gpu_memory_utilization": 0.3})
    assert isinstance(llm.model, StandInVirtualLM)
    assert seen == {"name": resolve(EMBEDDED_MODEL), "engine_opts": {"gpu_memory_utilization": 0.3}}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the real vLLM engine needs CUDA")
async def test_real_engine_rows_match_the_stand_in_contract(tokenizer):  # pragma: no cover - needs a GPU
    pytest.importorskip("vllm")
    llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend="vllm", engine_opts={"gpu_memory_utilization": 0.2})
    rows = await llm.model.batch_next_token_logprobs([[7], [7, 8]])
    assert rows.dtype == torch.float32 and rows.device.type == "cuda"
    assert rows.shape[0] == 2 and rows.shape[1] >= len(llm.model.byte_vocab)
    row = await llm.logw_next([])
    assert row.weights.dtype == np.float64
    assert np.logaddexp.reduce(row.weights) == pytest.approx(0.0, abs=1e-3)


# Rows kept on the engine's device (`rows="device"`, what `"auto"` does on CUDA) --------


async def test_device_rows_are_float32_tensors_with_eos_folded_after_the_upcast(engine):
    """The engine's rows stay tensors: half precision is upcast to float32 once, then
    the EOS tokens are summed (in float32, where the host path sums in the engine's
    dtype); every vocabulary entry is the engine's value exactly."""
    llm = PromptedLLM(engine, rows="device")
    llm.set_prompt_from_str("The value of x is")
    ctx = llm.tokenize(" 42")
    row = await llm.logw_next(ctx)
    ids = llm.prompt_ids + [t.token_id for t in ctx]
    assert isinstance(row.weights, torch.Tensor) and row.weights.dtype == torch.float32
    assert row.weights.device == engine.device
    lp = engine.reference(ids).to(engine.dtype).float()
    want_vocab = lp[[t.token_id for t in llm.vocab]]
    assert torch.equal(row.weights[:-1], want_vocab)
    want_eos = torch.logsumexp(lp[list(llm.token_maps.eos_idxs)], dim=0)
    assert row.weights[-1].item() == pytest.approx(want_eos.item(), abs=1e-6)


async def test_device_rows_smc_weights_are_the_row_normalisers(engine):
    """Direct-sampler SMC on tensor rows: each weight is the sum of the rows' log
    masses (float32 rounding)."""
    llm = PromptedLLM(engine, rows="device")
    llm.set_prompt_from_str("The value of x is")
    seqs = await direct_token_sampler(llm).smc(n_particles=4, ess_threshold=0.0, max_tokens=5, seed=3)
    for ctx, logw in zip(seqs.contexts, seqs.log_weights):
        forced = len(ctx) == 5
        want = 0.0
        for t in range(len(ctx)):
            row = (await llm.logw_next(ctx[:t])).host()
            want += row[-1] if forced and t == len(ctx) - 1 else np.logaddexp.reduce(row)
        assert float(logw) == pytest.approx(want, abs=1e-4)


async def test_device_rows_awrs_smc_end_to_end(engine):
    llm = PromptedLLM(engine, rows="device")
    llm.set_prompt_from_str("The value of x is")
    pattern = r" [0-9]\."
    sampler = AWRS(llm, BoolFSA.from_regex(pattern).coerce(llm, f=b"".join))
    seqs = await sampler.smc(n_particles=4, ess_threshold=0.5, max_tokens=8, seed=0)
    for ctx, logw in zip(seqs.contexts, seqs.log_weights):
        text = b"".join(bytes(t) for t in ctx if t is not EOS)
        assert (re.fullmatch(pattern.encode(), text) is not None) == np.isfinite(logw), (text, logw)
    assert np.isfinite(seqs.log_weights).any()
