"""`ByteLLM` on the embedded model: the contract, and exact byte marginals by enumeration."""

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from genlm.bytes import BeamParams  # noqa: E402

from genlm.control import ByteLLM  # noqa: E402
from genlm.control.embedded import EMBEDDED_MODEL  # noqa: E402
from genlm.control.lm.bytelm import context_bytes, next_byte_row  # noqa: E402
from genlm.control.lm.llm import load_model  # noqa: E402
from genlm.control.testing import check_potential  # noqa: E402

MODEL = os.environ.get("GENLM_TEST_MODEL", EMBEDDED_MODEL)
WIDE = BeamParams(K=256)  # no pruning on these short contexts: the beam is exact


@pytest.fixture(scope="module")
def model():
    return load_model(MODEL, "hf")


@pytest.fixture
def byte_lm(model):
    lm = ByteLLM(model, WIDE)
    yield lm
    lm.cleanup()


async def byte_marginal(model, data: bytes, finished: bool) -> float:
    """`log P(text starts with data)` (or `log P(text == data)` when `finished`) under the
    token LM started at BOS, summed over every tokenization (EOS tokens excluded)."""
    vocab = model.byte_vocab
    eos = model.tokenizer.eos_token_id
    start = model.tokenizer.bos_token_id if model.tokenizer.bos_token_id is not None else eos

    async def walk(ids, rest):
        lp = (await model.next_token_logprobs(ids)).double().cpu().numpy()
        if not rest:
            return lp[eos] if finished else 0.0
        terms = []
        for t in vocab:
            b = bytes(t)
            if t.token_id == eos or not b:
                continue
            if len(b) < len(rest) and rest.startswith(b):
                terms.append(lp[t.token_id] + await walk(ids + [t.token_id], rest[len(b) :]))
            elif b.startswith(rest) and not finished:
                terms.append(lp[t.token_id])
            elif b == rest and finished:
                terms.append(lp[t.token_id] + await walk(ids + [t.token_id], b""))
        return float(np.logaddexp.reduce(terms)) if terms else -math.inf

    return await walk([start], data)


@pytest.mark.parametrize("text", [b"a", b"de", b" th", b"x."])
async def test_prefix_and_complete_are_the_byte_marginals(model, byte_lm, text):
    """With no pruning, prefix/complete equal the LM's byte-level marginals, computed
    independently by enumerating tokenizations (float32 model: rtol 1e-4)."""
    got_p = await byte_lm.prefix(list(text))
    got_c = await byte_lm.complete(list(text))
    assert got_p == pytest.approx(await byte_marginal(model, text, False), rel=1e-4, abs=1e-4)
    assert got_c == pytest.approx(await byte_marginal(model, text, True), rel=1e-4, abs=1e-4)


async def test_prompt_conditions_by_bytes(model):
    """`prefix(ctx)` under prompt b"a" is `log P(a + ctx) - log P(a)` at the byte level."""
    lm = ByteLLM(model, WIDE, prompt=b"a")
    assert lm.prompt_bytes == b"a"
    want = await byte_marginal(model, b"ab", False) - await byte_marginal(model, b"a", False)
    assert await lm.prefix(list(b"b")) == pytest.approx(want, rel=1e-4, abs=1e-4)
    lm.set_prompt_from_str("")
    assert lm.prompt_bytes == b""
    lm.cleanup()


async def test_check_potential(byte_lm):
    """The contract holds to float precision at any beam width (prefix is the product
    of the beam's conditionals), so the tolerance is tight."""
    byte_lm.set_prompt_from_str("The ")
    await check_potential(
        byte_lm, [[], list(b"d"), list(b"def f"), list(b"\xc3")], rtol=1e-9, atol=1e-9
    )


async def test_check_potential_narrow_beam(model):
    lm = ByteLLM(model, BeamParams(K=2, prune_threshold=0.05), prompt="import ")
    await check_potential(lm, [[], list(b"os"), list(b"os.pa")], rtol=1e-9, atol=1e-9)
    row = await lm.logw_next(list(b"os"))
    assert row.sum() == pytest.approx(0.0, abs=1e-9)
    lm.cleanup()


async def test_rows_are_normalized_and_cached(byte_lm):
    w = await byte_lm.logw_next(list(b"ab"))
    assert w.sum() == pytest.approx(0.0, abs=1e-9)
    assert len(byte_lm.vocab_eos) == 257 and byte_lm.vocab == [bytes([i]) for i in range(256)]
    assert w[b"a"] == w[ord("a")] > float("-inf")  # a byte value names its one-byte token
    assert b"ab" in byte_lm._cache and byte_lm._cache[b"ab"].row is not None
    np.testing.assert_array_equal((await byte_lm.logw_next([b"a", b"b"])).weights, w.weights)


async def test_cache_is_bounded(model):
    lm = ByteLLM(model, WIDE, cache_size=3)
    await lm.prefix(list(b"abcdef"))
    assert len(lm._cache) == 3
    assert await lm.prefix(list(b"abcdef")) == pytest.approx(
        await ByteLLM(model, WIDE).prefix(list(b"abcdef")), abs=1e-9
    )
    lm.cleanup()


async def test_spawn_keeps_prompt(byte_lm):
    byte_lm.set_prompt("x = ")
    copy = byte_lm.spawn()
    assert copy.prompt_bytes == b"x = " and copy.beam_params is byte_lm.beam_params
    assert await copy.prefix(list(b"1")) == pytest.approx(
        await byte_lm.prefix(list(b"1")), abs=1e-9
    )
    copy.cleanup()


def test_next_byte_row_drops_end_of_token():
    ps = np.log(np.r_[np.full(256, 0.5 / 256), 0.25, 0.25])
    row = next_byte_row(ps)
    assert row.shape == (257,)
    np.testing.assert_allclose(np.exp(row).sum(), 1.0)
    np.testing.assert_allclose(np.exp(row[-1]), 0.25 / 0.75)


async def test_bad_inputs(model, byte_lm):
    with pytest.raises(TypeError, match="byte value"):
        await byte_lm.prefix([300])
    with pytest.raises(TypeError, match="byte value"):
        context_bytes(["a"])
    with pytest.raises(TypeError, match="AsyncLM"):
        ByteLLM("gpt2", WIDE)
    with pytest.raises(TypeError, match="BeamParams"):
        ByteLLM(model, {"K": 5})
    with pytest.raises(ValueError, match="cache_size"):
        ByteLLM(model, WIDE, cache_size=0)
    with pytest.raises(TypeError, match="prompt"):
        byte_lm.set_prompt(3)


def test_from_name():
    lm = ByteLLM.from_name(MODEL, BeamParams(K=4), backend="hf")
    assert lm.beam_params.eos_byte_strings == {
        bytes(lm.llm.byte_vocab[lm.llm.tokenizer.eos_token_id])
    }
    with pytest.raises(ValueError, match="unknown backend"):
        ByteLLM.from_name(MODEL, BeamParams(K=4), backend="tpu")


async def test_one_byte_strings_work_as_in_genlm_control_0_4(model):
    async with ByteLLM(model, WIDE) as lm:
        ints = await lm.prefix(list(b" the"))
        assert await lm.prefix([b" ", b"t", b"h", b"e"]) == ints
        row = await lm.logw_next(list(b" th"))
        assert row[b"e"] == row[ord("e")] > float("-inf")
    assert lm._root is None  # leaving the block cleaned up
