import asyncio
import importlib.util
import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from genlm.backend.llm import AsyncLM, AsyncTransformer, MockAsyncLM  # noqa: E402
from genlm.backend.tokenization import Token  # noqa: E402

from genlm.control import EOS, Potential, PromptedLLM  # noqa: E402
from genlm.control.embedded import EMBEDDED_MODEL  # noqa: E402
from genlm.control.testing import check_potential  # noqa: E402

MODEL = EMBEDDED_MODEL


@pytest.fixture(scope="module")
def llm_backend():
    return PromptedLLM.from_name(MODEL, backend="hf").model


@pytest.fixture
def llm(llm_backend):
    return PromptedLLM(llm_backend)


def reference_logprobs(model, ids, temperature=1.0):
    """Next-token log probabilities from a plain forward of the HF model (no cache, no batch)."""
    with torch.no_grad():
        logits = model.model(torch.tensor([ids])).logits[0, -1].double()
    return torch.log_softmax(logits / temperature, dim=-1).numpy()


def count_forwards(model):
    """Wrap `model.model.forward` to count calls; returns the counter list."""
    calls = []
    inner = model.model.forward

    def forward(*args, **kwargs):
        calls.append(kwargs.get("input_ids", args[0] if args else None).shape[0])
        return inner(*args, **kwargs)

    model.model.forward = forward
    return calls


def uncount(model):
    model.model.__dict__.pop("forward", None)


# The potential contract --------------------------------------------------------


async def test_check_potential_with_prompt(llm):
    llm.set_prompt_from_str("The module")
    ctx = llm.tokenize(" provides functions for")
    await check_potential(llm, [[], ctx[:1], ctx])


async def test_check_potential_without_prompt(llm):
    ctx = llm.tokenize("import os")
    await check_potential(llm, [[], ctx])


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
async def test_weights_are_tempered_model_log_probs(llm_backend, temperature):
    llm = PromptedLLM(llm_backend, temperature=temperature)
    llm.set_prompt_from_str("Return the")
    ctxs = [[], llm.tokenize(" value of"), llm.tokenize(" list")]
    rows = await llm.batch_logw_next(ctxs)
    eos_id = llm_backend.tokenizer.eos_token_id
    for ctx, row in zip(ctxs, rows):
        want = reference_logprobs(llm_backend, llm.prompt_ids + llm.encode_tokens(ctx), temperature)
        ids = [t.token_id for t in llm.vocab]
        np.testing.assert_allclose(row.weights[:-1], want[ids], atol=1e-4)
        assert row[EOS] == pytest.approx(want[eos_id], abs=1e-4)
        assert row.sum() == pytest.approx(0.0, abs=1e-4)


async def test_prefix_and_complete_are_sums_of_model_log_probs(llm):
    llm.set_prompt_from_str("A list")
    ctx = llm.tokenize(" of items")
    ids = llm.prompt_ids + llm.encode_tokens(ctx)
    n = len(llm.prompt_ids)
    want = sum(reference_logprobs(llm.model, ids[:i])[ids[i]] for i in range(n, len(ids)))
    eos = reference_logprobs(llm.model, ids)[llm.model.tokenizer.eos_token_id]
    assert await llm.prefix(ctx) == pytest.approx(want, abs=1e-3)
    assert await llm.complete(ctx) == pytest.approx(want + eos, abs=1e-3)
    assert await llm.log_probability(ctx) == pytest.approx(want, abs=1e-3)
    assert await llm.log_probability(ctx + [EOS]) == pytest.approx(want + eos, abs=1e-3)
    assert await llm.prefix([]) == 0.0


async def test_empty_prompt_starts_from_bos(llm):
    bos = llm.model.tokenizer.bos_token_id
    row = await llm.logw_next([])
    want = reference_logprobs(llm.model, [bos])
    tok = llm.vocab[5]
    assert row[tok] == pytest.approx(want[tok.token_id], abs=1e-4)


async def test_product_with_itself_and_a_constraint(llm):
    class NoDigits(Potential):
        """0 on contexts whose tokens have no ASCII digit, -inf otherwise."""

        async def prefix(self, context):
            ok = not any(any(48 <= b <= 57 for b in bytes(t)) for t in context)
            return 0.0 if ok else float("-inf")

        async def complete(self, context):
            return await self.prefix(context)

    llm.set_prompt_from_str("The")
    ctx = llm.tokenize(" file")
    await check_potential(llm * llm, [[], ctx])
    await check_potential(llm * NoDigits(tables=llm.tables), [[], ctx])


# Batching ----------------------------------------------------------------------


async def test_batch_logw_next_is_one_forward(llm):
    llm.model.clear_cache()
    llm.set_prompt_from_str("Batches of")
    ctxs = [llm.tokenize(s) for s in [" one", " two words", " three", " four", " five"]]
    calls = count_forwards(llm.model)
    try:
        rows = await llm.batch_logw_next(ctxs)
        assert calls == [5]
        await llm.batch_prefix([c + [t] for c in ctxs for t in llm.vocab[:3]])
        assert len(calls) == 2
    finally:
        uncount(llm.model)
    for ctx, row in zip(ctxs, rows):
        (await llm.logw_next(ctx)).assert_equal(row)


async def test_concurrent_copies_share_one_forward(llm):
    llm.model.clear_cache()
    a = llm.spawn(prompt_ids=llm.model.tokenizer.encode("Alpha"))
    b = llm.spawn(prompt_ids=llm.model.tokenizer.encode("Beta gamma"))
    ctx = llm.tokenize(" is")
    calls = count_forwards(llm.model)
    try:
        await asyncio.gather(a.logw_next(ctx), b.logw_next(ctx), a.to_autobatched().logw_next([]))
    finally:
        uncount(llm.model)
    # One forward: a's prompt is a prefix of a's query, so its row is read from that query's row.
    assert calls == [2]


async def test_spawned_prompts_are_isolated(llm):
    prompts = ["The function", "Raises an error", "x ="]
    copies = [llm.spawn(prompt_ids=llm.model.tokenizer.encode(p)) for p in prompts]
    ctx = llm.tokenize(" returns")
    solo_rows = [await c.logw_next(ctx) for c in copies]
    solo_prefix = [await c.prefix(ctx) for c in copies]
    llm.model.clear_cache()
    rows = await asyncio.gather(*(c.logw_next(ctx) for c in copies))
    prefixes = await asyncio.gather(*(c.prefix(ctx) for c in copies))
    for want, got in zip(solo_rows, rows):
        got.assert_equal(want, atol=1e-4)
    np.testing.assert_allclose(prefixes, solo_prefix, atol=1e-4)
    assert not np.allclose(rows[0].weights, rows[1].weights, atol=1e-2)


# Settings and copies -------------------------------------------------------------


def test_prompt_ids_assignment_and_tokenizer(llm):
    ids = llm.model.tokenizer.encode("Hello world")
    llm.prompt_ids = ids
    assert llm.prompt_ids == ids
    assert [t.token_id for t in llm.prompt] == ids
    assert b"".join(llm.prompt) == b"Hello world"
    llm.set_prompt_from_str("Hi")
    assert b"".join(llm.prompt) == b"Hi"
    assert llm.model.tokenizer is llm.model.tokenizer
    assert isinstance(llm.model, AsyncLM)


def test_tokenize_encode_decode_round_trip(llm):
    toks = llm.tokenize("for item in items:")
    assert all(isinstance(t, Token) for t in toks)
    assert b"".join(toks) == b"for item in items:"
    ids = llm.encode_tokens(toks)
    assert llm.decode_tokens(ids) == toks
    assert llm.encode_tokens([bytes(t) for t in toks]) == ids


def test_vocabulary_excludes_eos_tokens(llm):
    eos_id = llm.model.tokenizer.eos_token_id
    assert len(llm.vocab) == len(llm.model.byte_vocab) - 1
    assert all(t.token_id != eos_id for t in llm.vocab)
    assert llm.vocab_eos[-1] == EOS


async def test_spawn_shares_tables_and_keeps_settings(llm):
    llm.set_prompt_from_str("Start")
    copy = llm.spawn()
    assert copy.tables is llm.tables and copy.token_maps is llm.token_maps
    assert copy.prompt_ids == llm.prompt_ids and copy.temperature == llm.temperature
    copy.prompt_ids = [1, 2]
    assert llm.prompt_ids != [1, 2]
    hot = llm.spawn(temperature=0.5)
    assert hot.temperature == 0.5 and hot.tables is llm.tables
    same = llm.spawn(eos_byte_strings=[llm.model.tokenizer.eos_token.encode()])
    assert same.tables is llm.tables


async def test_spawn_new_eos(llm):
    llm.set_prompt_from_str("Lines end")
    dot = llm.spawn_new_eos([b".", b"\n"])
    dot_ids = [t.token_id for t in llm.model.byte_vocab if bytes(t) in (b".", b"\n")]
    assert sorted(dot.token_maps.eos_idxs) == sorted(dot_ids)
    assert b"." not in [bytes(t) for t in dot.vocab]
    assert llm.model.byte_vocab[llm.model.tokenizer.eos_token_id] in dot.vocab
    want = reference_logprobs(llm.model, llm.prompt_ids)
    row = await dot.logw_next([])
    assert row[EOS] == pytest.approx(np.logaddexp.reduce(want[dot_ids]), abs=1e-4)
    await check_potential(dot, [[], llm.tokenize(" with")])


def test_eos_tokens_alias_is_deprecated(llm_backend):
    with pytest.warns(DeprecationWarning, match="eos_byte_strings") as record:
        p = PromptedLLM(llm_backend, eos_tokens=[b"."])
    assert record[0].filename == __file__
    assert [bytes(t) for t in p.token_maps.eos_tokens] == [b"."]
    with pytest.warns(DeprecationWarning) as record:
        q = PromptedLLM.from_name(MODEL, backend="hf", eos_tokens=[b"\n"])
    assert record[0].filename == __file__
    assert [bytes(t) for t in q.token_maps.eos_tokens] == [b"\n"]
    with pytest.warns(DeprecationWarning):
        r = q.spawn(eos_tokens=[b"."])
    assert [bytes(t) for t in r.token_maps.eos_tokens] == [b"."]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the default is vLLM where it can run")
def test_default_backend_batches_without_a_timer():
    p = PromptedLLM.from_name(MODEL)
    assert isinstance(p.model, AsyncTransformer)
    assert p.model.timeout == 0


async def test_mock_backend():
    p = PromptedLLM.from_name(MODEL, backend="mock")
    assert isinstance(p.model, MockAsyncLM)
    row = await p.logw_next(p.tokenize("abc"))
    assert row.sum() == pytest.approx(0.0, abs=1e-4)
    await check_potential(p, [[], p.tokenize("ab")])


# Duplicate byte strings ----------------------------------------------------------


class _Tokenizer:
    eos_token_id = 3
    bos_token_id = 3
    eos_token = "<e>"

    def encode(self, text, add_special_tokens=True):
        return [{"a": 0, "b": 1}[ch] for ch in text]


class DuplicateBytesLM(AsyncLM):
    """Ids 0 and 2 are both b"a"; log p(next) is a fixed function of the context's ids."""

    def __init__(self):
        self.tokenizer = _Tokenizer()
        self.byte_vocab = [Token(0, b"a"), Token(1, b"b"), Token(2, b"a"), Token(3, b"<e>")]

    def _logprobs(self, ids):
        h = sum((i + 1) * (t + 1) for i, t in enumerate(ids))
        logits = torch.tensor([math.sin(h * (k + 1)) for k in range(4)], dtype=torch.float64)
        return torch.log_softmax(logits, dim=0)

    async def next_token_logprobs(self, token_ids, lora_name=None):
        return self._logprobs(token_ids)

    def next_token_logprobs_sync(self, token_ids, lora_name=None):
        return self._logprobs(token_ids)


async def test_duplicate_byte_strings_are_distinct_tokens():
    lm = DuplicateBytesLM()
    p = PromptedLLM(lm, prompt_ids=[1])
    a0, b1, a2 = lm.byte_vocab[:3]
    assert p.vocab == [a0, b1, a2]
    row = await p.logw_next([a2])
    want = lm._logprobs([1, 2]).numpy()
    assert row[a0] == pytest.approx(want[0]) and row[a2] == pytest.approx(want[2])
    assert row[a0] != row[a2]
    assert row[EOS] == pytest.approx(want[3])
    assert p.decode_tokens(p.encode_tokens([a2, a0, b1])) == [a2, a0, b1]
    assert [t.token_id for t in p.decode_tokens([2, 0])] == [2, 0]
    assert p.encode_tokens([b"a"]) == [0]
    assert await p.prefix([b"a"]) == pytest.approx(await p.prefix([a0]))
    assert await p.prefix([a2]) == pytest.approx(lm._logprobs([1]).numpy()[2])
    await check_potential(p, [[], [a2], [a0, a2, b1]])


# Bad input -----------------------------------------------------------------------


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match="unknown backend 'tpu'.*'hf'"):
        PromptedLLM.from_name(MODEL, backend="tpu")


def test_missing_model_is_rejected(tmp_path):
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(OSError, match="could not be found locally") as info:
        PromptedLLM.from_name(missing, backend="hf")
    assert missing in str(info.value) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("temperature", [0, -1.0, float("inf"), float("nan")])
def test_bad_temperature_is_rejected(llm_backend, temperature):
    with pytest.raises(ValueError, match="temperature"):
        PromptedLLM(llm_backend, temperature=temperature)
    with pytest.raises(ValueError, match="temperature"):
        PromptedLLM.from_name(MODEL, backend="mock", temperature=temperature)
    p = PromptedLLM(llm_backend)
    with pytest.raises(ValueError, match="temperature"):
        p.temperature = temperature
    with pytest.raises(ValueError, match="temperature"):
        p.spawn(temperature=temperature)


def test_absent_eos_is_rejected(llm_backend):
    with pytest.raises(ValueError, match="not a token of the model's vocabulary"):
        PromptedLLM(llm_backend, eos_byte_strings=[b"\xff\xfe no such token"])
    with pytest.raises(ValueError, match="no such"):
        PromptedLLM(llm_backend).spawn_new_eos([b"no such token!"])
    with pytest.raises(ValueError, match="empty"):
        PromptedLLM(llm_backend, eos_byte_strings=[])


async def test_tokens_outside_the_vocabulary_are_rejected(llm):
    eos_token = llm.model.byte_vocab[llm.model.tokenizer.eos_token_id]
    with pytest.raises(ValueError, match="no such token"):
        await llm.logw_next([b"no such token"])
    with pytest.raises(ValueError, match="not in the language model's vocabulary"):
        await llm.prefix([eos_token])
    with pytest.raises(ValueError, match="not in"):
        llm.encode_tokens([b"no such token"])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm.decode_tokens([10**7])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm.prompt_ids = [-1]


async def test_lora_on_backends_without_adapters(llm_backend):
    with pytest.raises(ValueError, match="'adapter'.*does not support LoRA"):
        PromptedLLM.from_name(MODEL, backend="mock", lora_name="adapter")
    p = PromptedLLM(llm_backend, lora_name="missing")
    with pytest.raises(ValueError, match="LoRA adapter 'missing'"):
        await p.logw_next([])


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="checks the error raised without vllm")
def test_vllm_without_the_package_is_a_clear_error():
    with pytest.raises(ImportError, match=r"needs the vllm package.*genlm-control\[vllm\].*docs/vllm.md"):
        PromptedLLM.from_name(MODEL, backend="vllm")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="vLLM needs CUDA")
async def test_vllm_backend_matches_hf():  # pragma: no cover - needs a GPU
    pytest.importorskip("vllm")
    gpu = PromptedLLM.from_name(MODEL, backend="vllm", engine_opts={"gpu_memory_utilization": 0.2})
    cpu = PromptedLLM.from_name(MODEL, backend="hf")
    for p in (gpu, cpu):
        p.set_prompt_from_str("The module")
    ctx = cpu.tokenize(" provides")
    got, want = await gpu.logw_next(ctx), await cpu.logw_next(ctx)
    np.testing.assert_allclose(got.weights, want.weights, atol=1e-2)
    assert isinstance(cpu.model, AsyncTransformer)


def test_backend_options_in_either_spelling():
    a = PromptedLLM.from_name(MODEL, backend="hf", llm_opts={"batch_size": 64, "timeout": 0.02})
    b = PromptedLLM.from_name(MODEL, backend="hf", batch_size=64, timeout=0.02)
    assert a.model.batch_size == b.model.batch_size == 64
    with pytest.raises(TypeError, match="llm_opts must be a dict"):
        PromptedLLM.from_name(MODEL, backend="hf", llm_opts=[("batch_size", 2)])


async def test_sequences_longer_than_the_model_reads_are_a_clear_error():
    llm = PromptedLLM.from_name(MODEL, backend="hf")
    llm.set_prompt_from_str("word " * 250)
    n = len(llm.prompt_ids)
    context = llm.tokenize(" word" * (257 - n))
    with pytest.raises(ValueError, match="over the model's limit of 256 positions"):
        await llm.logw_next(context)
    with pytest.raises(IndexError, match="over the model's limit"):  # 0.4.1's type, too
        await llm.logw_next(context)
    assert len((await llm.logw_next(context[: 255 - n])).weights) == len(llm.vocab_eos)


# Model names, offline loading, prompts and temperatures ------------------------------


def _no_transformers(monkeypatch):
    """Make every backend loader fail the test: the error must come before it."""
    from genlm.backend.llm import MockAsyncLM

    from genlm.control.lm import _hf_batch

    def reached(*args, **kwargs):
        raise AssertionError("the backend loader was called")

    monkeypatch.setattr(_hf_batch.CachedTransformer, "from_name", reached)
    monkeypatch.setattr(MockAsyncLM, "from_name", reached)


@pytest.mark.parametrize("name, err", [(None, TypeError), (3, TypeError), ("", ValueError), ("  ", ValueError)])
def test_model_name_must_be_a_string(name, err):
    with pytest.raises(err, match="name must be"):
        PromptedLLM.from_name(name)


@pytest.mark.parametrize("backend", ["hf", "mock"])
def test_unknown_model_fails_at_once_when_offline(monkeypatch, backend):
    _no_transformers(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="'no-such-org/no-such-model' is not available offline.*HF_HUB_OFFLINE") as info:
        PromptedLLM.from_name("no-such-org/no-such-model", backend=backend)
    assert isinstance(info.value, OSError)  # what a missing model raised before


def test_unknown_model_fails_at_once_without_network(monkeypatch):
    from genlm.control.lm import _llm_loading

    _no_transformers(monkeypatch)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "http://127.0.0.1:9")  # nothing listens
    with pytest.raises(ValueError, match=r"not available offline.*http://127.0.0.1:9\) cannot be reached"):
        _llm_loading.load_model("no-such-org/no-such-model", backend="hf")


def test_a_cached_model_goes_to_the_loader(monkeypatch, tmp_path):
    from genlm.control.lm import _llm_loading

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    (tmp_path / "models--some-org--cached-model").mkdir()
    _llm_loading.require_available("some-org/cached-model", "some-org/cached-model")
    with pytest.raises(ValueError, match="not available offline"):
        _llm_loading.require_available("some-org/other", "some-org/other")


def test_hub_probe():
    from genlm.control.lm._llm_loading import _hub_reachable

    assert _hub_reachable("http://127.0.0.1:9", timeout=1.0) is False


@pytest.mark.parametrize("text, position", [("a\ud800b", 1), ("\udfff", 0), ("héllo \ud83d", 6)])
def test_lone_surrogate_in_a_prompt_is_a_value_error_naming_its_position(llm, text, position):
    with pytest.raises(ValueError, match=f"lone surrogate .* at position {position}"):
        llm.set_prompt_from_str(text)
    with pytest.raises(ValueError, match=f"at position {position}"):
        llm.tokenize(text)
    llm.set_prompt_from_str("héllo 😀")  # valid non-ASCII text is fine
    assert llm.model.tokenizer.decode(llm.prompt_ids) == "héllo 😀"


@pytest.mark.parametrize("ids", ["123", b"12", 5, [1, 2.0], [1, True], [1, None]])
def test_prompt_ids_must_be_a_list_of_ints(llm, ids):
    with pytest.raises(TypeError, match="prompt_ids must be a list of token ids"):
        llm.prompt_ids = ids
    assert llm.prompt_ids == []


def test_prompt_ids_accept_numpy_and_torch_integers(llm):
    llm.prompt_ids = np.array([5, 7])
    assert llm.prompt_ids == [5, 7] and all(type(i) is int for i in llm.prompt_ids)
    llm.prompt_ids = torch.tensor([3, 4])
    assert llm.prompt_ids == [3, 4]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm.prompt_ids = [1, -1]


@pytest.mark.parametrize("temperature", [1e-300, 5e-324])
async def test_tiny_temperature_is_greedy_with_finite_weights(llm_backend, temperature, recwarn):
    hot = PromptedLLM(llm_backend)
    hot.set_prompt_from_str("Return the")
    greedy = int(np.argmax((await hot.logw_next([])).weights))
    cold = hot.spawn(temperature=temperature)
    with np.errstate(all="raise"):
        row = (await cold.logw_next([])).weights
        prefix = await cold.prefix([hot.vocab[greedy]])
    assert not np.isnan(row).any() and row[greedy] == 0.0
    assert np.all(row[np.arange(len(row)) != greedy] < -1e290)  # weight zero to double precision
    assert prefix == 0.0
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    from_name = PromptedLLM.from_name(MODEL, backend="mock", temperature=temperature)
    assert from_name.temperature == temperature


def test_prompt_ids_from_a_chat_template_batch_encoding(llm):
    # transformers 5's apply_chat_template(..., tokenize=True) returns a BatchEncoding;
    # 0.4.1's README assigns it to llm.prompt_ids directly
    tok = llm.model.tokenizer
    enc = tok("Return the value")
    llm.prompt_ids = enc
    assert llm.prompt_ids == list(enc["input_ids"])
    llm.prompt_ids = tok("Return", return_tensors="pt")  # a batch of one row
    assert llm.prompt_ids == tok("Return")["input_ids"]
    llm.prompt_ids = [[5, 6]]
    assert llm.prompt_ids == [5, 6]
    with pytest.raises(TypeError, match="without 'input_ids'"):
        llm.prompt_ids = {"ids": [1]}
    with pytest.raises(TypeError, match="a batch of 2"):
        llm.prompt_ids = tok(["a", "b"], return_tensors="pt")
