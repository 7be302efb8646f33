"""`ThinkPotential` on a think-tag tokenizer built from the embedded model's: the target
of `lm * think` equals its definition (thinking free, the answer scored by the base),
an optional thinking budget, and the answer posterior with the thinking marginalized."""

import math

import numpy as np
import pytest
from genlm.grammar import CFG, Float
from toys.reasoning import SupportLM, reasoning_tokenizer

from genlm.control import EOS, WCFG, ThinkPotential, direct_token_sampler
from genlm.control.potential.base import Potential
from genlm.control.potential.coerce import Coerced
from genlm.control.reasoning import ThinkTags, answer_posterior
from genlm.control.smc.sequences import Sequences
from genlm.control.testing import check_potential, enumerate_target, sampler_target

NEG_INF = float("-inf")


@pytest.fixture(scope="module")
def tok():
    return reasoning_tokenizer(eos="<|endoftext|>")


@pytest.fixture(scope="module")
def wcfg():
    return WCFG(CFG.from_string("0.6: S -> a S\n0.4: S -> b\n", Float))


def make(tok, wcfg, **kw):
    base = Coerced(wcfg, ThinkTags(tok).potential_vocab, f=b"".join, prune=False)
    return ThinkPotential(base, tok, **kw)


def tokens(think, text):
    decode = think.format.token_maps.decode
    return [decode[i] for i in think.format.tokenizer.encode(text, add_special_tokens=False)]


class Budget(Potential):
    """At most `n` thinking tokens (0 / -inf)."""

    def __init__(self, vocab, n):
        super().__init__(vocab)
        self.n = n

    async def prefix(self, context):
        return 0.0 if len(context) <= self.n else NEG_INF

    async def complete(self, context):
        return await self.prefix(context)


async def test_weights_and_format(tok, wcfg):
    think = make(tok, wcfg)
    t = lambda s: tokens(think, s)  # noqa: E731
    assert await think.prefix(t("<think>anything at all")) == 0.0
    assert await think.complete(t("<think>anything")) == NEG_INF  # no answer yet
    assert await think.prefix(t("<think>x</think>aa")) == pytest.approx(
        await wcfg.prefix(list(b"aa"))
    )
    assert await think.complete(t("<think>x</think>ab")) == pytest.approx(
        await wcfg.complete(list(b"ab"))
    )
    assert await think.complete(t("ab")) == pytest.approx(
        await wcfg.complete(list(b"ab"))
    )  # no thinking
    for bad in ("<think>a<think>", "</think>b", "<think>a</think>b</think>", "a<think>"):
        assert await think.prefix(t(bad)) == NEG_INF
    await check_potential(
        think, [t(""), t("<think>"), t("<think>xy"), t("<think>x</think>"), t("<think>x</think>a")]
    )


async def test_starts_thinking_and_single_token_tags(tok, wcfg):
    think = make(tok, wcfg, starts_thinking=True)
    t = lambda s: tokens(think, s)  # noqa: E731
    assert await think.prefix(t("free text")) == 0.0
    assert await think.complete(t("x</think>b")) == pytest.approx(math.log(0.4))
    assert await think.prefix(t("<think>")) == NEG_INF
    with pytest.raises(ValueError, match="one token"):
        ThinkPotential(think.base_potential, tok, think_open="<reason>")


@pytest.mark.parametrize("budget", [None, 2])
async def test_exact_target_equals_the_definition(tok, wcfg, budget):
    probe = make(tok, wcfg)
    support = [tokens(probe, p)[0] for p in ("<think>", "</think>", "x", "a", "b")]
    lm = SupportLM(probe.vocab, support, seed=5)
    thinking = None if budget is None else Budget(probe.vocab, budget)
    think = make(tok, wcfg, thinking_potential=thinking)
    max_tokens = 7
    exact = await enumerate_target(lm, max_tokens, condition=think)

    want = {}
    for n in range(max_tokens):
        for x in map(
            tuple, np.array(np.meshgrid(*[range(len(support))] * n)).reshape(n, -1).T if n else [()]
        ):
            seq = tuple(support[i] for i in x)
            text = b"".join(seq)
            if text.startswith(b"<think>"):
                rest = text[len(b"<think>") :]
                if rest.count(b"</think>") != 1 or b"<think>" in rest:
                    continue
                thought, answer = rest.split(b"</think>")
                if budget is not None and len(thought) > budget:
                    continue
            elif b"think>" in text:
                continue
            else:
                answer = text
            if b"x" in answer:
                continue
            w = await lm.complete(list(seq)) + await wcfg.complete(list(answer))
            if w > NEG_INF:
                want[seq] = w
    assert set(exact.sequences) == set(want)
    for x, w in want.items():
        assert exact.sequences[x] == pytest.approx(w)
    # One particle's expected weight, every random path of the sampler enumerated: Z.
    got = await sampler_target(direct_token_sampler(lm * think), max_tokens)
    assert got.log_z == pytest.approx(exact.log_z)
    for text, p in exact.posterior.items():
        assert got.posterior[text] == pytest.approx(p)


async def test_answer_posterior_marginalizes_the_thinking(tok, wcfg):
    think = make(tok, wcfg)
    t = lambda s: tokens(think, s)  # noqa: E731
    contexts = [
        t("<think>x</think>ab") + [EOS],
        t("<think>xx</think>ab") + [EOS],
        t("<think></think>b") + [EOS],
        t("<think>x</think>a"),  # unfinished: no answer
        t("b") + [EOS],
    ]
    weights = np.log([0.2, 0.3, 0.1, 0.3, 0.1])
    post = answer_posterior(Sequences(contexts, weights), think)
    assert post == pytest.approx({"ab": 0.5 / 0.7, "b": 0.2 / 0.7})
    assert list(post) == ["ab", "b"]
    by_fn = answer_posterior(Sequences(contexts, weights), lambda ctx: "same")
    assert by_fn == {"same": 1.0}


async def test_cleanup_reaches_a_streaming_scorer(tok):
    from genlm.control.potential.streaming import KEEP_ALIVE_SET, AsyncStreamingPotential

    class Short(AsyncStreamingPotential):
        async def calculate_score_from_stream(self, stream):
            n = 0
            while True:
                try:
                    n += sum(len(t) for t in await stream.more())  # bytes
                except StopAsyncIteration:
                    return 0.0 if n <= 3 else NEG_INF

    before = len(KEEP_ALIVE_SET)
    think = ThinkPotential(Short(ThinkTags(tok).potential_vocab), tok)
    t = lambda s: tokens(think, s)  # noqa: E731
    assert await think.prefix(t("<think>x</think>ab")) == 0.0
    assert await think.complete(t("<think>x</think>abcdefgh")) == NEG_INF
    assert len(KEEP_ALIVE_SET) > before
    await think.cleanup()
    assert len(KEEP_ALIVE_SET) == before
