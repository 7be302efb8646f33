"""`StatefulPotential` / `AsyncStreamingPotential` (0.4.1's streaming potentials): the
weights equal the language the program defines, states are pooled, bounded and
cleaned up, and a failing or misbehaving program gives weight zero, never a hang."""

import asyncio
import itertools
import math

import pytest

from genlm.control.potential.stateful import ParticleState, StatefulPotential, make_immutable
from genlm.control.potential.streaming import KEEP_ALIVE_SET, AsyncStreamingPotential
from genlm.control.testing import check_potential, enumerate_target

NEG_INF = float("-inf")
OPEN, CLOSE = b"(", b")"


def balanced(ctx, complete):
    """The reference: parentheses never close below zero; complete iff they close at 0."""
    depth = 0
    for t in ctx:
        depth += 1 if t == OPEN else -1
        if depth < 0:
            return False
    return depth == 0 or not complete


class Parens(AsyncStreamingPotential):
    """Balanced parentheses, read as a stream; counts the tokens the programs read."""

    def __init__(self):
        super().__init__([OPEN, CLOSE])
        self.read = 0

    async def calculate_score_from_stream(self, stream):
        depth = 0
        while True:
            try:
                chunk = await stream.more()
            except StopAsyncIteration:
                return 0.0 if depth == 0 else NEG_INF
            self.read += len(chunk)
            for t in chunk:
                depth += 1 if t == OPEN else -1
                if depth < 0:
                    return NEG_INF


async def test_weights_equal_the_language_on_every_short_context():
    p = Parens()
    for n in range(5):
        for ctx in itertools.product([OPEN, CLOSE], repeat=n):
            ctx = list(ctx)
            assert (await p.prefix(ctx) == 0.0) == balanced(ctx, complete=False)
            assert (await p.complete(ctx) == 0.0) == balanced(ctx, complete=True)
    await p.cleanup()


async def test_logw_next_agrees_with_prefix_and_complete():
    p = Parens()
    await check_potential(p, [[], [OPEN], [OPEN, OPEN], [OPEN, CLOSE]])
    await p.cleanup()


async def test_exact_target_is_the_balanced_strings():
    p = Parens()
    exact = await enumerate_target(p, max_tokens=5)
    got = set(exact.posterior)
    want = {b"", b"()", b"(())", b"()()"}
    assert got == want
    assert exact.log_z == pytest.approx(math.log(len(want)))
    await p.cleanup()


async def test_extending_a_pooled_context_reads_only_the_new_tokens():
    p = Parens()
    ctx = []
    for _ in range(6):
        ctx.append(OPEN)
        await p.prefix(ctx)
    assert p.read == 6
    await p.cleanup()


async def test_pool_is_bounded_and_cleanup_ends_every_program():
    class Small(Parens):
        def __init__(self):
            AsyncStreamingPotential.__init__(self, [OPEN, CLOSE])
            self._cache_size = 3
            self.read = 0

    before = len(KEEP_ALIVE_SET)
    p = Small()
    for n in range(1, 8):
        await p.prefix([OPEN] * n + [CLOSE])  # not prefixes of each other's pooled keys
        await p.prefix([CLOSE, OPEN][: n % 2 + 1])
    assert p._pooled <= 3
    assert len(KEEP_ALIVE_SET) - before <= 3
    await p.cleanup()
    assert len(KEEP_ALIVE_SET) == before


async def test_a_raising_program_has_weight_zero_and_keeps_its_error():
    class Raises(AsyncStreamingPotential):
        async def calculate_score_from_stream(self, stream):
            await stream.more()
            raise KeyError("bad input")

    p = Raises([OPEN])
    state = await p.new_state()
    await state.update_context([OPEN])
    assert state.current_score == NEG_INF
    assert isinstance(state.diagnostics["error"], KeyError)
    assert await p.prefix([OPEN]) == NEG_INF
    await p.cleanup()


async def test_a_program_that_reads_past_the_end_is_rejected_not_hung():
    class Greedy(AsyncStreamingPotential):
        async def calculate_score_from_stream(self, stream):
            while True:
                try:
                    await stream.more()
                except StopAsyncIteration:
                    pass

    p = Greedy([OPEN])
    score = await asyncio.wait_for(p.complete([OPEN]), timeout=30)
    assert score == NEG_INF
    await p.cleanup()


async def test_clone_reads_the_same_context_and_runs_apart():
    p = Parens()
    state = await p.new_state()
    await state.update_context([OPEN])
    twin = await state.clone()
    await twin.update_context([CLOSE, CLOSE])
    assert twin.current_score == NEG_INF and state.current_score == 0.0
    await state.finish()
    await twin.finish()
    assert state.current_score == NEG_INF  # "(" is not complete


def test_make_immutable_keys():
    assert make_immutable([1, 2]) == b"\x01\x02"
    assert make_immutable([OPEN, 300]) == (OPEN, 300)
    assert make_immutable("ab") == "ab"


async def test_stateful_potential_with_a_synchronous_state_class():
    class Counter(ParticleState):
        @property
        def current_score(self):
            return -float(len(self.context)) if not self.finished else -10.0

        async def impl_update_context(self, incremental_context):
            pass

        async def impl_finish(self):
            pass

    p = StatefulPotential([0, 1], state_class=Counter)
    assert await p.prefix([0, 1, 1]) == -3.0
    assert await p.complete([0]) == -10.0
    row = await p.logw_next([0])
    assert list(row.weights) == [-1.0, -1.0, -9.0]
    with pytest.raises(ValueError, match="cache_size"):
        StatefulPotential([0], cache_size=-1)
