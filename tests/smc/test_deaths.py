"""A run whose particles die says why: counts by cause on `Sequences`, in the record,
one warning when every particle died; each cause on toys and on the embedded model."""

import json
import math
import string
import warnings

import numpy as np
import pytest
from toys.tables import NextTable

from genlm.control import AWRS, EOS, BoolCFG, BoolFSA, JsonSchema, Potential, direct_token_sampler
from genlm.control.sampler.token import TokenSampler
from genlm.control.smc.deaths import Cause, DeadEnd, Deaths, ZeroWeightWarning

NEG_INF = float("-inf")
VOCAB = ["a", "b"]
N = 6


def uniform(ctx):
    return np.log(np.full(3, 1 / 3))


def allowing(rule):
    """A Boolean table: `rule(ctx)` gives the allowed (a, b, EOS) after `ctx`."""
    return NextTable(VOCAB, lambda ctx: np.where(rule(ctx), 0.0, NEG_INF))


def five_as(ctx):
    """Only `a`, and EOS after five of them."""
    return np.array([True, False, len(ctx) >= 5])


def one_a_then_nothing(ctx):
    return np.array([len(ctx) == 0, False, False])


async def run(sampler, critic=None, **kwargs):
    args = {"n_particles": N, "ess_threshold": 0.5, "max_tokens": 3, "seed": 0, **kwargs}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seqs = await sampler.smc(critic=critic, **args)
    zero = [w for w in caught if issubclass(w.category, ZeroWeightWarning)]
    return seqs, zero


def counts(seqs) -> dict:
    return seqs.deaths.as_dict()


def assert_all_died_of(seqs, zero, cause: str):
    assert counts(seqs) == {**Deaths().as_dict(), cause: N}
    assert seqs.log_ml == NEG_INF
    assert len(zero) == 1
    assert f"{N} particles ended with weight zero" in str(zero[0].message)


async def test_a_language_that_cannot_finish_in_max_tokens_dies_of_max_tokens():
    seqs, zero = await run(direct_token_sampler(NextTable(VOCAB, uniform) * allowing(five_as)))
    assert_all_died_of(seqs, zero, "max_tokens")
    assert "raise max_tokens" in str(zero[0].message)
    assert all(len(c) <= 3 and c[-1] == EOS for c in seqs.contexts)


async def test_a_condition_that_allows_no_token_dies_of_a_dead_prefix():
    lm, cond = NextTable(VOCAB, uniform), allowing(one_a_then_nothing)
    for sampler in (direct_token_sampler(lm * cond), AWRS(lm, cond)):
        seqs, zero = await run(sampler, max_tokens=5)
        assert_all_died_of(seqs, zero, "dead_prefix")
        assert "another sampler" in str(zero[0].message)


class NaNCritic(Potential):
    async def prefix(self, context):
        return math.nan

    async def complete(self, context):
        return math.nan


async def test_a_potential_giving_nan_dies_of_nan():
    lm = NextTable(VOCAB, uniform)
    seqs, zero = await run(direct_token_sampler(lm), critic=NaNCritic(VOCAB))
    assert_all_died_of(seqs, zero, "nan")
    assert "NaN" in str(zero[0].message)


class Reporting(TokenSampler):
    """Finds no unit and says why: the protocol a sampler reports a cause by."""

    async def sample(self, context, draw=None):
        return DeadEnd(Cause.MAX_TOKENS), NEG_INF, 0.0


async def test_a_sampler_reports_the_cause_with_a_dead_end():
    seqs, zero = await run(Reporting(NextTable(VOCAB, uniform)), max_tokens=8)
    assert_all_died_of(seqs, zero, "max_tokens")
    assert all(c == (EOS,) or list(c) == [EOS] for c in seqs.contexts)


async def test_counts_match_the_weights_and_a_run_with_survivors_does_not_warn():
    # two tokens, then only what starts with `a` may finish: the others die at max_tokens
    def rule(ctx):
        return np.array([len(ctx) < 2, len(ctx) < 2, ctx[:1] == ("a",)])

    lm = NextTable(VOCAB, uniform) * allowing(rule)
    for seed in range(8):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            seqs = await direct_token_sampler(lm).smc(n_particles=N, ess_threshold=0.0, max_tokens=3, seed=seed)
        dead = int(np.sum(seqs.log_weights == NEG_INF))
        assert seqs.deaths.total == dead == seqs.deaths.max_tokens
        assert (len([w for w in caught if issubclass(w.category, ZeroWeightWarning)]) == 1) == (dead == N)


async def test_the_record_holds_the_counts(tmp_path):
    path = tmp_path / "run.json"
    lm = NextTable(VOCAB, uniform) * allowing(five_as)
    seqs, _ = await run(direct_token_sampler(lm), json_path=str(path))
    assert json.loads(path.read_text())["deaths"] == counts(seqs)
    assert seqs.record.deaths == counts(seqs)


def test_deaths_is_a_typed_record():
    d = Deaths.of([Cause.NAN, Cause.MAX_TOKENS, Cause.MAX_TOKENS])
    assert (d.max_tokens, d.dead_prefix, d.nan, d.critic, d.total) == (2, 0, 1, 0, 3)
    with pytest.raises(AttributeError):
        d.nan = 0  # frozen
    with pytest.raises(ValueError):
        DeadEnd("tired")


# The embedded model -------------------------------------------------------------


@pytest.fixture(scope="module")
def llm():
    from genlm.control import PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    return PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")


class NoText(Potential):
    """Allows no text: the empty prefix only, and no complete one."""

    def __init__(self):
        super().__init__(list(map(ord, string.printable)))

    async def prefix(self, context):
        return NEG_INF if context else 0.0

    async def complete(self, context):
        return NEG_INF


async def test_embedded_model_each_cause(llm):
    long = BoolFSA.from_regex(r"[a-z]{60}").coerce(llm, f=b"".join)
    seqs, zero = await run(AWRS(llm, long), max_tokens=4)
    assert_all_died_of(seqs, zero, "max_tokens")

    seqs, zero = await run(AWRS(llm, NoText().coerce(llm, f=b"".join)), max_tokens=4)
    assert_all_died_of(seqs, zero, "dead_prefix")

    seqs, zero = await run(direct_token_sampler(llm), critic=NaNCritic(llm.vocab), max_tokens=4)
    assert_all_died_of(seqs, zero, "nan")


# A particle killed before it ended is not a finished sequence (issue 34, finding 6) ---


def only_b(ctx):
    return np.log(np.array([1e-300, 1.0, 1e-300]))


class NoB(Potential):
    """A critic that gives weight zero to any context holding `b` (EOS allowed)."""

    async def prefix(self, context):
        return NEG_INF if "b" in context else 0.0

    async def complete(self, context):
        return NEG_INF if "b" in context else 0.0


class NoEnd(Potential):
    """A critic that allows every prefix and no finished sequence."""

    async def prefix(self, context):
        return 0.0

    async def complete(self, context):
        return NEG_INF


async def test_a_particle_killed_by_the_critic_keeps_its_context_without_eos():
    """0.4.1: the killed context (the unit it drew appended) without EOS; it stays in
    `posterior` and is absent from `decoded_posterior`."""
    seqs, zero = await run(direct_token_sampler(NextTable(VOCAB, only_b)), critic=NoB(VOCAB), max_tokens=4)
    assert_all_died_of(seqs, zero, "critic")
    assert [list(c) for c in seqs.contexts] == [["b"]] * N
    assert dict(seqs.decoded_posterior) == {} and seqs.finished_texts() == []
    assert all(k == ("b",) for k in seqs.posterior)


async def test_a_particle_ended_with_eos_at_weight_zero_stays_in_decoded_posterior():
    """A particle that drew EOS (or had it forced) and then got weight zero did end:
    its text stays in `decoded_posterior` at 0.0, as in 0.4.1."""
    seqs, zero = await run(direct_token_sampler(NextTable(VOCAB, uniform)), critic=NoEnd(VOCAB), max_tokens=3)
    assert all(list(c)[-1] == EOS for c in seqs.contexts)
    assert all(w == NEG_INF for w in seqs.log_weights)
    assert set(seqs.decoded_posterior) == {"".join(list(c)[:-1]) for c in seqs.contexts}
    assert all(v == 0.0 for v in seqs.decoded_posterior.values())


class NoUnit(TokenSampler):
    """Finds no unit after one `a`, and says so (`DeadEnd(DEAD_PREFIX)` as the unit)."""

    async def sample(self, context, draw=None):
        if not context:
            return "a", 0.0, 0.0
        return DeadEnd(Cause.DEAD_PREFIX), NEG_INF, 0.0


async def test_a_dead_end_draws_no_unit_and_stays_unfinished():
    """No unit to draw: the context stays as it was, without EOS (it did not end)."""
    seqs, zero = await run(NoUnit(NextTable(VOCAB, uniform)), max_tokens=5)
    assert_all_died_of(seqs, zero, "dead_prefix")
    assert all(list(c) == ["a"] for c in seqs.contexts)
    assert dict(seqs.decoded_posterior) == {}


async def test_the_041_particle_api_finishes_a_killed_particle_without_eos():
    from genlm.control.sampler import SequenceModel

    lm = NextTable(VOCAB, lambda ctx: np.log(np.array([0.0, 1.0, 0.0]) + 1e-300))  # always b
    p = SequenceModel(direct_token_sampler(lm), critic=NoB(VOCAB), max_tokens=5)
    await p.start()
    await p.step(np.random.default_rng(0))
    assert p.done and p.weight == NEG_INF and p.context == ["b"]


def test_killed_contexts_of_the_embedded_model_in_every_output(tmp_path):
    """The issue's run: 0.4.1 returns the killed contexts without EOS and an empty
    `decoded_posterior`; the record, `show()` and the visualizer read them."""
    import asyncio

    from genlm.control import InferenceVisualizer, PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend="mock")
    llm.set_prompt_from_str("Hello")
    critic = BoolFSA.from_regex("zzzz").coerce(llm, f=b"".join)
    path = tmp_path / "run.json"

    async def go():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ZeroWeightWarning)
            return await direct_token_sampler(llm).smc(
                n_particles=3, ess_threshold=0.5, max_tokens=5, critic=critic, json_path=str(path), seed=1)

    seqs = asyncio.run(go())
    assert all(c and c[-1] is not EOS for c in seqs.contexts), seqs.contexts
    assert len(seqs.decoded_posterior) == 0 and seqs.finished_texts() == []
    assert seqs.n_without_mass == 3
    seqs.show()
    record = json.loads(path.read_text())
    assert record
    html = InferenceVisualizer(str(path), serve=False).to_html()
    assert "<html" in html.lower()

# The warning names the option of the constraint at hand ---------------------------


@pytest.mark.parametrize("make, says", [
    (lambda: JsonSchema({"type": "string", "minLength": 5}, spelling="any"),
     "spelling='any' lets the model write whitespace"),
    (lambda: JsonSchema({"type": "string", "minLength": 5}), "spelling='any' lets the model write whitespace"),
    (lambda: JsonSchema({"type": "string", "minLength": 5}, spelling="canonical"),
     "spelling='canonical' writes no whitespace"),
    (lambda: BoolFSA.from_regex("a{5}b*"), "a tighter pattern than the regex 'a{5}b*'"),
    (lambda: BoolCFG.from_lark('start: "aaaaa" "b"*\n%ignore " "'), "%ignore's whitespace"),
])
async def test_a_max_tokens_warning_names_the_constraints_option(make, says):
    seqs, zero = await run(direct_token_sampler(make()))
    assert counts(seqs)["max_tokens"] == N and len(zero) == 1
    message = str(zero[0].message)
    assert "raise max_tokens (" in message and says in message
    assert "JSON" not in message or "JsonSchema" in message  # no JSON advice for a regex


def test_length_hints_search_only_this_librarys_objects():
    from genlm.control.smc.deaths import length_hints

    class Holder:  # not this library's: not searched
        hint = BoolFSA.from_regex("a")

    assert length_hints(Holder()) == []
    js = JsonSchema({"type": "integer"}, spelling="compact")
    assert length_hints(js) == [js.length_hint()] and "spelling='compact'" in js.length_hint()
    assert Deaths(max_tokens=2).explain(2, ["x", "x", "y"]).endswith("Next: raise max_tokens (x; y).")


def test_length_hints_do_not_walk_token_tables(monkeypatch):
    """The hint search reads this library's objects only, and never looks into a list
    or tuple longer than `_MAX_CONTAINER` (a vocabulary, its rows): on a 131k-token
    vocabulary a zero-weight warning cost 24 s when it walked the token list item by
    item. A constraint held in a short list is still found."""
    from genlm.control.smc import deaths
    from genlm.control.smc.deaths import length_hints

    js = JsonSchema({"type": "integer"}, spelling="compact")

    class Tokens(list):
        """Counts the items read out of it."""

        reads = 0

        def __iter__(self):
            for x in super().__iter__():
                Tokens.reads += 1
                yield x

    class Holder:
        __module__ = "genlm.control.fake"

        def __init__(self):
            self.vocab = Tokens([bytes([i % 256]) for i in range(100_000)])
            self.factors = [js]

    assert length_hints(Holder()) == [js.length_hint()]
    assert Tokens.reads == 0
    monkeypatch.setattr(deaths, "_MAX_CONTAINER", 10**6)  # the old walk: every token read
    assert length_hints(Holder()) == [js.length_hint()] and Tokens.reads == 100_000
