"""A constraint coerced onto the engine, whose language is the engine's, keeps the
engine's mask per state of its own coercion (a regex's byte automaton, a schema's
recognizer): the masks it serves equal the engine's own at every context, and seeded
runs do not change."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from genlm.control import AWRS, BoolCFG, BoolFSA, JsonSchema

PATTERNS = (
    r"[A-Z][a-z ,]{0,80}\.( [A-Z][a-z ,]{0,80}\.){0,5}",  # many contexts share a state
    r"(ab|a)*c[0-9]{1,3}( (ab|a)*c[0-9]{1,3})*",  # tokens crossing alternatives
)
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"enum": ["a", "bc"]}}},
    "required": ["name"],
}
CONSTRAINTS = {
    "regex": lambda: BoolFSA.from_regex(PATTERNS[0]),
    "regex with alternatives": lambda: BoolFSA.from_regex(PATTERNS[1]),
    "JSON schema": lambda: JsonSchema(SCHEMA, spelling="canonical"),
    "regular Lark grammar": lambda: BoolCFG.from_lark('start: A (" " A)*\nA: /[a-c]+/ "." /[0-9]{1,2}/'),
}


def _walks(coerced, rng, steps: int, width: int) -> list[list[list]]:
    """Batches of contexts the engine allows, one batch per step of random walks
    (branching, with repeats), read from the engine itself."""
    vocab = coerced.vocab
    batches, contexts = [], [[]]
    for _ in range(steps):
        batches.append(contexts)
        rows = asyncio.run(coerced.guided.batch_allowed(contexts))
        grown = []
        for row, ctx in zip(rows, contexts):
            allowed = np.flatnonzero(row[:-1])
            for _ in range(3 if allowed.size else 0):
                grown.append(ctx + [vocab[int(rng.choice(allowed))]])
        if not grown:
            break
        keep = rng.choice(len(grown), size=min(width, len(grown)), replace=False)
        contexts = [grown[i] for i in keep] + [grown[int(keep[0])]]  # one context twice
    return batches


@pytest.mark.parametrize("name", CONSTRAINTS)
def test_masks_kept_per_state_equal_the_engines_at_every_context(llm, name):
    coerced = CONSTRAINTS[name]().coerce(llm, f=b"".join)
    assert coerced.exact
    assert coerced._budget_twin() is not None  # the token budget builds it in a run
    rng = np.random.default_rng(0)
    seen = set()
    for contexts in _walks(coerced, rng, steps=14, width=24):
        assert coerced._twin_states(contexts) is not None
        got = asyncio.run(coerced.batch_allowed(contexts))
        want = asyncio.run(coerced.guided.batch_allowed(contexts))
        assert got.dtype == want.dtype == np.bool_
        np.testing.assert_array_equal(got, want)
        on_torch = asyncio.run(coerced.batch_allowed(contexts, torch.zeros(1)))
        assert torch.equal(on_torch, torch.as_tensor(want))
        seen.update(tuple(c) for c in contexts)
    # far fewer states than contexts: most masks were served without the engine
    assert 0 < len(coerced._state_masks) < len(seen) / 3


def test_a_context_the_constraint_refuses_fails_as_the_engines_does(llm, pieces):
    coerced = BoolFSA.from_regex(PATTERNS[1]).coerce(llm, f=b"".join)
    coerced._budget_twin()
    good, bad = [pieces[b"a"]], [pieces[b"z"]]
    assert coerced._twin_states([good, bad]) is None  # dead under the automaton: the engine answers
    with pytest.raises(ValueError, match="weight zero"):
        asyncio.run(coerced.guided.batch_allowed([good, bad]))
    with pytest.raises(ValueError, match="weight zero"):
        asyncio.run(coerced.batch_allowed([good, bad]))


def test_only_an_exact_engine_with_a_built_twin_keys_the_masks(llm, pieces):
    regex = BoolFSA.from_regex(PATTERNS[1]).coerce(llm, f=b"".join)
    assert regex._twin_states([[pieces[b"a"]]]) is None  # not built yet: never built for this
    regex._budget_twin()
    assert regex._twin_states([[pieces[b"a"]]]) is not None
    regex.state_masks_kept = 0
    assert regex._twin_states([[pieces[b"a"]]]) is None
    assert regex.spawn().exact
    number = {"type": "number", "minimum": 1.5}
    for engine in (None, True):  # the engine's grammars bound the language / differ from it
        coerced = JsonSchema(number).coerce(llm, f=b"".join, engine=engine)
        coerced._budget_twin()
        assert not coerced.exact
        assert coerced._twin_states([[pieces[b"2"]]]) is None


@pytest.mark.parametrize("name", ["regex", "JSON schema"])
def test_seeded_awrs_runs_are_the_same_with_and_without_kept_masks(llm, name):
    def run(kept: int):
        coerced = CONSTRAINTS[name]().coerce(llm, f=b"".join)
        coerced.state_masks_kept = kept
        sampler = AWRS(llm, coerced)
        llm.model.clear_cache()
        seqs = asyncio.run(sampler.smc(n_particles=8, ess_threshold=0.5, max_tokens=16, seed=3))
        return coerced, seqs

    off, plain = run(0)
    on, kept = run(1024)
    assert len(off._state_masks) == 0 and len(on._state_masks) > 0
    assert [list(c) for c in kept.contexts] == [list(c) for c in plain.contexts]
    np.testing.assert_array_equal(kept.log_weights, plain.log_weights)
