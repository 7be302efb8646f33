"""genlm-control 0.4.1's forms of the LM potentials (`PromptedLLM`, `Ensemble`,
`CanonicalTokenization`, `ByteLLM`) work beside ours: each test pins one cause that
0.4.1's own test suite found (see docs/compat-041.md), through the public API only."""

import math
import os
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from genlm.backend.tokenization import Token  # noqa: E402

from genlm.control import EOS, CanonicalTokenization, Ensemble, Potential, PromptedLLM  # noqa: E402
from genlm.control.testing import check_potential  # noqa: E402

# A model of four tokens: "a" twice (ids 0 and 2, the same bytes), "b", and "<e>" (EOS).
DECODE = [Token(0, b"a"), Token(1, b"b"), Token(2, b"a"), Token(3, b"<e>")]
PROBS = np.array([0.4, 0.3, 0.2, 0.1])


class FakeTokenizer:
    eos_token_id = 3
    bos_token_id = None

    def encode(self, text, **kwargs):
        """One id per letter; spaces are dropped (the fake has no space token)."""
        return [{"a": 0, "b": 1}[ch] for ch in text if ch != " "]


class FakeLM:
    """A duck-typed backend (0.4.1 accepted any object with these): the next-token
    distribution is `PROBS` after every prefix."""

    def __init__(self):
        self.byte_vocab = DECODE
        self.tokenizer = FakeTokenizer()

    async def batch_next_token_logprobs(self, token_ids_list, **kwargs):
        return torch.log(torch.tensor(PROBS, dtype=torch.float64)).repeat(len(token_ids_list), 1)

    async def next_token_logprobs(self, token_ids, **kwargs):
        return (await self.batch_next_token_logprobs([token_ids]))[0]


@pytest.fixture
def llm():
    return PromptedLLM(FakeLM())


# PromptedLLM: a duck-typed backend ------------------------------------------------


async def test_a_duck_typed_backend_gives_exact_weights(llm):
    row = (await llm.logw_next([])).weights
    # Vocabulary: ids 0, 1, 2 (EOS id 3 is EOS).
    np.testing.assert_allclose(np.exp(row), [0.4, 0.3, 0.2, 0.1], rtol=1e-12)
    assert await llm.complete([DECODE[1], DECODE[2]]) == pytest.approx(math.log(0.3 * 0.2 * 0.1))
    await check_potential(llm, [[], [DECODE[0]], [DECODE[2], DECODE[1]]])


def test_an_object_without_a_backends_attributes_is_a_type_error():
    with pytest.raises(TypeError, match="AsyncLM"):
        PromptedLLM(object())


# PromptedLLM: EOS ------------------------------------------------------------------


def test_eos_byte_strings_is_read_only_plain_bytes(llm):
    assert llm.eos_byte_strings == [b"<e>"]
    with pytest.raises(ValueError, match="Cannot reset eos_byte_strings after initialization"):
        llm.eos_byte_strings = [b"b"]
    new = llm.spawn_new_eos(eos_byte_strings=[DECODE[1]])
    assert new.eos_byte_strings == [b"b"] and type(new.eos_byte_strings[0]) is bytes
    assert new.token_maps.eos_idxs == [1] and new.token_maps.eos_idxs == (1,)
    assert llm.token_maps.eos_idxs == [3]


def test_plain_bytes_eos_names_every_token_with_them(llm):
    new = llm.spawn(eos_byte_strings=[b"a"])
    assert new.token_maps.eos_idxs == [0, 2]
    assert [t.token_id for t in new.vocab] == [1, 3]


def test_duplicate_and_absent_eos_are_value_errors(llm):
    with pytest.raises(ValueError, match="Duplicate eos byte strings"):
        llm.spawn_new_eos([b"b", b"b"])
    with pytest.raises(ValueError, match="Duplicate eos byte strings"):
        llm.spawn_new_eos([DECODE[0], b"a"])  # b"a" names id 0 again
    # Two tokens with the same bytes are two tokens: naming each once is no duplicate.
    assert llm.spawn_new_eos([DECODE[0], DECODE[2]]).token_maps.eos_idxs == [0, 2]
    with pytest.raises(ValueError, match="EOS token not in language model vocabulary"):
        llm.spawn_new_eos([b"zz"])


def test_token_maps_and_eos_byte_strings_together_are_refused(llm):
    with pytest.raises(ValueError, match="eos_byte_strings must not be provided when token_maps"):
        PromptedLLM(llm.model, eos_byte_strings=[b"b"], token_maps=llm.token_maps)


def test_eos_tokens_alias_everywhere(llm):
    for make in (
        lambda: PromptedLLM(llm.model, eos_tokens=[b"b"]),
        lambda: llm.spawn(eos_tokens=[b"b"]),
        lambda: llm.spawn_new_eos(eos_tokens=[b"b"]),
    ):
        with pytest.warns(DeprecationWarning, match="eos_tokens.*deprecated"):
            assert make().eos_byte_strings == [b"b"]
    for call in (
        lambda: llm.spawn(eos_byte_strings=[b"b"], eos_tokens=[b"a"]),
        lambda: llm.spawn_new_eos([b"b"], eos_tokens=[b"a"]),
        lambda: PromptedLLM(llm.model, eos_byte_strings=[b"b"], eos_tokens=[b"a"]),
    ):
        for caught in (TypeError, ValueError):
            with pytest.raises(caught, match="Cannot specify both"):
                call()
    with pytest.raises(TypeError, match="needs eos_byte_strings"):
        llm.spawn_new_eos()


# PromptedLLM: prompts and token lookups ----------------------------------------------


def test_a_prompt_that_is_not_a_str_is_a_type_and_a_value_error(llm):
    for caught in (TypeError, ValueError):
        with pytest.raises(caught, match="prompt must be a str"):
            llm.set_prompt_from_str(42)
    with pytest.raises(ValueError, match="Prompt must a string"):  # 0.4.1's words
        llm.set_prompt_from_str(b"bytes")


def test_a_trailing_space_in_the_prompt_warns(llm):
    with pytest.warns(UserWarning, match="ends with a space"):
        llm.set_prompt_from_str("ab ")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        llm.set_prompt_from_str("a b")
    assert llm.prompt_ids == [0, 1]


def test_encode_tokens_with_bytes_warns_once_and_takes_the_first_id(llm):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert llm.encode_tokens([DECODE[2], DECODE[1]]) == [2, 1]
    with pytest.warns(DeprecationWarning, match="Passing bytes to encode_tokens is deprecated") as rec:
        assert llm.encode_tokens([b"a", b"b", DECODE[2]]) == [0, 1, 2]
    assert len([w for w in rec if w.category is DeprecationWarning]) == 1
    with pytest.raises(ValueError, match="Token .* not in vocabulary"):
        llm.encode_tokens([b"zz"])


def test_token_maps_encode_by_token_and_by_bytes(llm):
    encode = llm.token_maps.encode
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert encode[DECODE[2]] == 2 and encode[DECODE[0]] == 0
        assert b"a" in encode and DECODE[2] in encode and b"zz" not in encode
    with pytest.warns(DeprecationWarning, match="Indexing token_maps.encode by bytes is deprecated"):
        assert encode[b"a"] == 0
    with pytest.raises(KeyError):
        encode[b"zz"]
    with pytest.raises(KeyError):
        encode[Token(99, b"a")]


# Ensemble ---------------------------------------------------------------------------


class Unigram(Potential):
    """The same next-token distribution `probs` (over `vocab` + EOS) after every context."""

    def __init__(self, vocab, probs):
        super().__init__(list(vocab))
        self.probs = dict(zip([*vocab, EOS], probs))

    def _logp(self, context, finished):
        p = math.prod(self.probs[t] for t in context) * (self.probs[EOS] if finished else 1.0)
        return math.log(p) if p > 0 else -math.inf

    async def prefix(self, context):
        return self._logp(context, False)

    async def complete(self, context):
        return self._logp(context, True)

    def spawn(self):
        return Unigram(self.vocab, [self.probs[t] for t in self.vocab_eos])


P1 = {"a": 0.5, "b": 0.2, "c": 0.2, EOS: 0.1}
P2 = {"a": 0.1, "b": 0.3, "c": 0.4, EOS: 0.2}


def unigram(probs, order):
    return Unigram(order, [probs[t] for t in [*order, EOS]])


def power_mean_row(r, a):
    """The ensemble's row over ["a", "b", "c", EOS] from the definition, normalized."""
    x, y = (np.array([p[t] for t in ["a", "b", "c", EOS]]) for p in (P1, P2))
    m = (a * x**r + (1 - a) * y**r) ** (1 / r)
    return m / m.sum()


@pytest.mark.parametrize("r", [2.5, -0.5, 1, 3])
async def test_a_real_op_is_the_power_mean_exponent(r):
    ens = Ensemble(unigram(P1, "abc"), unigram(P2, "abc"), op=r, a=0.3)
    np.testing.assert_allclose(np.exp((await ens.logw_next(["b"])).weights), power_mean_row(r, 0.3), rtol=1e-12)
    named = Ensemble(unigram(P1, "abc"), unigram(P2, "abc"), "power", 0.3, exponent=float(r))
    assert await ens.prefix(["a", "c"]) == pytest.approx(await named.prefix(["a", "c"]), rel=1e-12)
    geometric = Ensemble(unigram(P1, "abc"), unigram(P2, "abc"), op=0, a=0.3)
    prod = Ensemble(unigram(P1, "abc"), unigram(P2, "abc"), "prod", 0.3)
    np.testing.assert_allclose(
        (await geometric.logw_next([])).weights, (await prod.logw_next([])).weights, rtol=1e-12
    )


def test_an_op_of_the_wrong_type_is_a_type_and_a_value_error():
    p1, p2 = unigram(P1, "abc"), unigram(P2, "abc")
    for op in (None, True, [2]):
        for caught in (TypeError, ValueError):
            with pytest.raises(caught, match="op must be a string"):
                Ensemble(p1, p2, op)
    with pytest.raises(ValueError, match="NaN"):
        Ensemble(p1, p2, float("nan"))
    with pytest.raises(ValueError, match="only used with op='power'"):
        Ensemble(p1, p2, 2.0, exponent=3)


async def test_permuted_vocabularies_are_matched_by_token():
    p1, p2 = unigram(P1, "abc"), unigram(P2, "cab")
    ens = Ensemble(p1, p2, "sum", 0.4)
    same = Ensemble(p1, unigram(P2, "abc"), "sum", 0.4)
    assert ens.vocab == ["a", "b", "c"]
    assert ens.p1_vocab_idxs == [0, 1, 2, 3] and ens.p2_vocab_idxs == [1, 2, 0, 3]
    assert same.p2_vocab_idxs == [0, 1, 2, 3]
    np.testing.assert_allclose(
        np.exp((await ens.logw_next(["c"])).weights), 0.4 * np.array([0.5, 0.2, 0.2, 0.1])
        + 0.6 * np.array([0.1, 0.3, 0.4, 0.2]), rtol=1e-12
    )
    assert await ens.complete(["a", "b"]) == pytest.approx(await same.complete(["a", "b"]), rel=1e-12)
    await check_potential(ens, [[], ["a"], ["c", "b"]])
    with pytest.raises(ValueError, match="same vocabulary"):
        Ensemble(p1, unigram({"a": 0.5, "b": 0.3, "d": 0.1, EOS: 0.1}, "abd"), "sum")


async def test_component_logws_are_the_inner_scores():
    p1, p2 = unigram(P1, "abc"), unigram(P2, "abc")
    ens = Ensemble(p1, p2, "sum", 0.4)
    assert await ens.component_logws(["a", "b"]) == pytest.approx(
        (math.log(0.5 * 0.2), math.log(0.1 * 0.3)), rel=1e-12
    )
    assert await ens.component_logws(["a", "b", EOS]) == pytest.approx(
        (math.log(0.5 * 0.2 * 0.1), math.log(0.1 * 0.3 * 0.2)), rel=1e-12
    )


async def test_empty_batches_and_cache_size():
    p1, p2 = unigram(P1, "abc"), unigram(P2, "abc")
    ens = Ensemble(p1, p2, "sum", 0.5, 16)  # 0.4.1's positional cache_size
    assert ens.cache_size == 16 and ens.spawn().cache_size == 16
    for method in (ens.batch_prefix, ens.batch_complete, ens.batch_score):
        with pytest.raises(ValueError, match="non-empty"):
            await method([])
    with pytest.raises(ValueError, match="cache_size"):
        Ensemble(p1, p2, "sum", cache_size=0)
    with pytest.raises(TypeError, match="cache_size"):
        Ensemble(p1, p2, "sum", cache_size=2.5)


# CanonicalTokenization ---------------------------------------------------------------


def test_canonical_from_something_that_is_not_an_lm_is_a_type_error():
    for bad in (object(), unigram(P1, "abc")):
        with pytest.raises(TypeError, match="Expected llm to be an instance of PromptedLLM"):
            CanonicalTokenization.from_llm(bad)


# ByteLLM ----------------------------------------------------------------------------


async def test_byte_llm_prompt_bytes_is_assignable_and_an_empty_beam_is_named():
    from genlm.bytes import BeamParams

    from genlm.control import ByteLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    async with ByteLLM.from_name(EMBEDDED_MODEL, BeamParams(K=1, heal=False), backend="hf") as b:
        b.prompt_bytes = "Hi"
        assert b.prompt_bytes == b"Hi"
        other = b.spawn()
        other.set_prompt(b"Hi")
        assert await b.prefix([b" "]) == await other.prefix([b" "])
        b.prompt_bytes = b""
        # One path, no healing: some prefix of this text loses its only tokenization.
        text = ". Boulter starred in the 2011 film Mercenaries directed by Paris Leonti ."
        with pytest.raises(ValueError, match="Beam became empty"):
            for i in range(len(text)):
                await b.prefix(list(text[: i + 1].encode()))
        other.cleanup()
