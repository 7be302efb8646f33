"""`CanonicalTokenization` against the tokenizer's own encoding.

What is guaranteed, and checked here on Hypothesis-generated texts and token sequences:
- `complete(ctx) == 0` iff `ctx` is the tokenizer's encoding of its bytes (exact);
- every prefix of a canonical encoding has `prefix == 0` (soundness of the pair test);
- `logw_next` is the `prefix`/`complete` difference (the potential contract).
`prefix` may accept a context that no extension makes canonical; that is not checked.
"""

import asyncio
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from genlm.control import CanonicalTokenization, PromptedLLM  # noqa: E402
from genlm.control.embedded import EMBEDDED_MODEL  # noqa: E402
from genlm.control.lm.canonical import byte_alphabet  # noqa: E402
from genlm.control.testing import check_potential  # noqa: E402

MODEL = os.environ.get("GENLM_TEST_MODEL", EMBEDDED_MODEL)
NEG_INF = float("-inf")
ALPHABET = list("abcdefst ,.'-019\n\t") + ["'s", "'ll", "  ", "é", "€", "ü", "的", "\u2003"]
TEXTS = st.lists(st.sampled_from(ALPHABET), max_size=14).map("".join)
HYP = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def llm():
    return PromptedLLM.from_name(MODEL, backend="hf")


@pytest.fixture(scope="module")
def canon(llm):
    return CanonicalTokenization.from_llm(llm)


def encode(llm, text):
    return llm.model.tokenizer.encode(text, add_special_tokens=False)


def run(coro):
    return asyncio.run(coro)


@HYP
@given(text=TEXTS)
def test_canonical_encodings_are_accepted(llm, canon, text):
    ctx = llm.decode_tokens(encode(llm, text))
    assert run(canon.complete(ctx)) == 0.0
    for k in range(len(ctx) + 1):
        assert run(canon.prefix(ctx[:k])) == 0.0, (text, ctx[:k])


def split_token(llm, tok):
    """Two vocabulary tokens whose bytes join to `tok`'s, or None."""
    maps = llm.token_maps.encode
    for k in range(1, len(tok)):
        left, right = bytes(tok[:k]), bytes(tok[k:])
        if left in maps and right in maps:
            return llm.decode_tokens([maps[left], maps[right]])
    return None


@HYP
@given(text=TEXTS, data=st.data())
def test_split_tokens_are_rejected_by_complete(llm, canon, text, data):
    """Splitting a token of the canonical encoding into two gives a sequence that
    `complete` rejects, as the tokenizer does; the prefix before the split stays live."""
    ctx = llm.decode_tokens(encode(llm, text))
    splittable = [i for i, t in enumerate(ctx) if split_token(llm, t) is not None]
    if not splittable:
        return
    i = data.draw(st.sampled_from(splittable))
    other = ctx[:i] + split_token(llm, ctx[i]) + ctx[i + 1 :]
    assert encode(llm, text) != [t.token_id for t in other]
    assert run(canon.complete(other)) == NEG_INF
    assert run(canon.prefix(other[:i])) == 0.0


@HYP
@given(ids=st.lists(st.integers(min_value=0), max_size=6))
def test_random_token_sequences_agree_with_the_tokenizer(llm, canon, ids):
    """On arbitrary token sequences: `complete` is the tokenizer's verdict, and a
    sequence `complete` accepts has every prefix accepted."""
    ctx = [llm.vocab[i % len(llm.vocab)] for i in ids]
    data = b"".join(ctx)
    try:
        want = encode(llm, data.decode("utf-8")) == [t.token_id for t in ctx]
    except UnicodeDecodeError:
        want = False
    assert (run(canon.complete(ctx)) == 0.0) == want
    if want:
        assert all(run(canon.prefix(ctx[:k])) == 0.0 for k in range(len(ctx) + 1))


async def test_rejects_common_non_canonical_pairs(llm, canon):
    """A space and a word split apart is rejected as a prefix already."""
    word = llm.decode_tokens(encode(llm, " the"))
    if len(word) == 1:
        split = split_token(llm, word[0])
        assert await canon.prefix(split) == NEG_INF
    ctx = llm.decode_tokens(encode(llm, "a b"))
    assert await canon.prefix(ctx) == 0.0


async def test_check_potential(llm, canon):
    ctx = llm.decode_tokens(encode(llm, "The value, it's 10 é"))
    split = split_token(llm, ctx[0]) or ctx[:1]
    await check_potential(canon, [[], ctx[:1], ctx[:3], ctx, split])


async def test_logw_next_is_the_table_row(llm, canon):
    ctx = llm.decode_tokens(encode(llm, "def f"))
    row = (await canon.logw_next(ctx)).weights
    live = np.array([await canon.prefix(ctx + [t]) for t in llm.vocab])
    np.testing.assert_array_equal(row[:-1], live)
    assert row[-1] == await canon.complete(ctx)


async def test_rows_kept_in_a_bounded_lru(llm):
    canon = CanonicalTokenization.from_llm(llm, cache_size=2)
    for text in ["a", "b", "c"]:
        await canon.logw_next(llm.decode_tokens(encode(llm, text)))
    assert len(canon._rows) == 2
    copy = canon.spawn()
    assert copy.tables is canon.tables
    assert await copy.prefix(llm.decode_tokens(encode(llm, "ab c"))) == 0.0


def test_byte_alphabet_is_the_tokenizers():
    from tokenizers import pre_tokenizers

    alphabet = byte_alphabet()
    assert len(set(alphabet)) == 256
    assert set(alphabet) == set(pre_tokenizers.ByteLevel.alphabet())


async def test_bad_inputs(llm, canon):
    with pytest.raises(ValueError, match="not in the vocabulary"):
        await canon.prefix([b"\x00not a token"])
    with pytest.raises(ValueError, match="token_ids has 2 ids"):
        CanonicalTokenization(llm.model.tokenizer, llm.tables, [1, 2])
    with pytest.raises(ValueError, match="cache_size"):
        CanonicalTokenization.from_llm(llm, cache_size=0)
    with pytest.raises(TypeError, match="token ids"):
        CanonicalTokenization.from_llm(type("LM", (), {"vocab": [b"a"], "tables": None})())
    dead = split_token(llm, llm.decode_tokens(encode(llm, " the"))[0]) or []
    if dead and await canon.prefix(dead) == NEG_INF:
        with pytest.raises(ValueError, match="weight zero"):
            await canon.logw_next(dead)
