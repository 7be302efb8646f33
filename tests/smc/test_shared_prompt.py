"""A PromptedLLM shared by concurrent runs: no run ever continues another run's prompt.

The natural mistake (one model, `set_prompt_from_str` in each coroutine) is refused
with an error naming `spawn()`; the documented pattern (one spawned copy per prompt)
gives each run exactly the result it gets alone."""

import asyncio

import pytest

from genlm.control import direct_token_sampler
from genlm.control._held import held_objects
from genlm.control.sampler.sequence import Sequences

PROMPTS = ["The value of x is", "Once upon a time", "def main():", "1, 2, 3,"]
RUN = dict(n_particles=4, ess_threshold=0.5, max_tokens=6, seed=0)


def texts(seqs):
    return [repr(c) for c in seqs.contexts]


async def alone(llm, prompt):
    copy = llm.spawn()
    copy.set_prompt_from_str(prompt)
    return await direct_token_sampler(copy).smc(**RUN)


async def test_naive_shared_model_refuses_a_prompt_change_mid_run(llm):
    shared = llm.spawn()
    sampler = direct_token_sampler(shared)

    async def run(prompt):
        shared.set_prompt_from_str(prompt)
        return await sampler.smc(**RUN)

    results = await asyncio.gather(*(run(p) for p in PROMPTS), return_exceptions=True)
    # the first run holds the model before the others start; each of them is refused
    assert isinstance(results[0], Sequences)
    for err in results[1:]:
        assert isinstance(err, RuntimeError) and "spawn()" in str(err), err
    # ... and the first run kept its own prompt: it is the run made alone
    assert texts(results[0]) == texts(await alone(llm, PROMPTS[0]))
    assert shared.runs_holding == 0
    shared.set_prompt_from_str(PROMPTS[1])  # after the runs, the prompt may change again
    assert shared.prompt_ids == llm.model.tokenizer.encode(PROMPTS[1])


async def test_spawned_copies_run_concurrently_with_their_own_prompts(llm):
    solo = [await alone(llm, p) for p in PROMPTS]
    assert len({tuple(texts(s)) for s in solo}) == len(PROMPTS), "the prompts must matter"
    copies = [llm.spawn() for _ in PROMPTS]
    for copy, prompt in zip(copies, PROMPTS):
        copy.set_prompt_from_str(prompt)

    async def run(copy):
        return await direct_token_sampler(copy).smc(**RUN)

    together = await asyncio.gather(*(run(c) for c in copies))
    assert [texts(s) for s in together] == [texts(s) for s in solo]


async def test_prompt_changes_between_runs_and_by_assignment(llm):
    model = llm.spawn()
    sampler = direct_token_sampler(model)
    model.set_prompt_from_str(PROMPTS[0])
    first = await sampler.smc(**RUN)
    model.prompt_ids = llm.model.tokenizer.encode(PROMPTS[1])  # 0.4.1 harnesses assign it
    second = await sampler.smc(**RUN)
    assert texts(first) == texts(await alone(llm, PROMPTS[0]))
    assert texts(second) == texts(await alone(llm, PROMPTS[1]))


async def test_same_prompt_may_be_set_mid_run_and_a_failed_run_releases(llm):
    model = llm.spawn()
    model.set_prompt_from_str(PROMPTS[0])
    ids = list(model.prompt_ids)
    sampler = direct_token_sampler(model)

    def stop(ctx):
        model.prompt_ids = ids  # unchanged: allowed while running
        assert model.runs_holding == 1
        with pytest.raises(RuntimeError, match=r"spawn\(\)"):
            model.prompt_ids = ids[:-1]
        raise KeyError("stop")

    with pytest.raises(KeyError, match="stop"):
        await sampler.smc(**RUN, terminate_when=stop)
    assert model.runs_holding == 0
    assert held_objects(sampler) == [model]


def test_the_walk_finds_models_past_token_tables_and_skips_the_tables(llm):
    """The models behind a coerced constraint are found, and the walk does not spend
    its bound (`_MAX_OBJECTS`) on what holds no model: twelve thousand token tuples,
    ints, byte strings and arrays in containers walked before a model leave it found,
    and a token trie is not looked into."""
    import numpy as np

    from genlm.control import AWRS, BoolFSA
    from genlm.control._held import _MAX_OBJECTS, _children
    from genlm.control._trie import SymbolTrie

    model = llm.spawn()
    model.set_prompt_from_str(PROMPTS[0])
    sampler = AWRS(model, BoolFSA.from_regex(r" [0-9]+").coerce(model, f=b"".join))
    assert held_objects(sampler) == [model]

    other = llm.spawn()
    tables = [[(i, j, b"t") for j in range(200)] for i in range(60)]  # more tuples than the bound
    assert 60 * 200 > _MAX_OBJECTS
    noise = [list(range(200)) for _ in range(60)] + [[b"x" * k for k in range(200)], np.zeros(5)]
    # the stack is popped from the end: the tables and the noise are walked first
    assert held_objects([{"deep": (1, "a", [other])}, tables, noise]) == [other]
    assert held_objects([(1, other), tables]) == [other]  # a tuple that holds a model is walked

    trie = SymbolTrie.build([b"a", b"ab"], f=b"".join)
    assert list(_children(trie)) == []
