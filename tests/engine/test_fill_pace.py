"""The engine's masks filled one matcher after another or on its thread pool
(`FillPace` picks the faster): the same bits either way, and the choice follows the
measured cost."""

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytest.importorskip("llguidance")

from genlm.control.engine._guided_engine import FillPace, fill_masks  # noqa: E402
from genlm.control.engine.guided import GuidedConstraint  # noqa: E402


def forced(pool: bool) -> FillPace:
    """A pace whose next choice is `pool` (not an exploring batch)."""
    pace = FillPace(cores=2)
    pace.cost = [1.0, 0.0] if pool else [0.0, 1.0]
    pace.batches = 1
    return pace


async def test_masks_filled_one_by_one_equal_the_pools(llm, pieces):
    c = llm.constrain(regex="[a-c]+(x|yz)?[0-9]{0,3}")
    guided = c if isinstance(c, GuidedConstraint) else c.guided
    p = pieces
    contexts = [[], [p[b"a"]], [p[b"a"], p[b"x"]], [p[b"b"], p[b"y"]], [p[b"c"], p[b"1"], p[b"2"]], [p[b"a"], p[b"b"]]]
    matchers = guided._live(contexts)
    alone, pooled = forced(False), forced(True)
    a = fill_masks(guided.engine, matchers, alone)
    b = fill_masks(guided.engine, matchers, pooled)
    assert alone.cost[0] is not None and alone.cost[1] == 1.0  # filled one by one
    assert pooled.cost[1] != 0.0 and pooled.cost[0] == 1.0  # filled on the pool
    assert np.array_equal(a, b)
    # the masks are those of distinct states, each with the bits of the tokens its row allows
    assert len({m.tobytes() for m in a}) >= 4
    rows = guided.rows(contexts)
    ids = guided.engine.vocab_ids
    for k in range(len(contexts)):
        bits = (a[k].view(np.uint32)[ids // 32] >> (ids % 32).astype(np.uint32)) & 1
        assert np.array_equal(bits.astype(bool), rows[k, :-1] == 0)


def test_the_pace_takes_the_cheaper_way_and_keeps_measuring_the_other():
    pace = FillPace(cores=2)
    assert pace.pool() is False  # nothing measured yet: one by one
    pace.record(False, 1e-3, 10)
    assert pace.pool() is True  # then the pool once, to measure it
    pace.record(True, 3e-3, 10)
    choices = [pace.pool() for _ in range(2 * FillPace.EXPLORE)]
    assert choices.count(True) == 2  # one by one, but the pool every EXPLORE-th batch
    for _ in range(40):  # the pool becomes cheaper: the averages follow
        pace.record(True, 1e-4, 10)
    assert pace.cost[1] < pace.cost[0]
    choices = [pace.pool() for _ in range(2 * FillPace.EXPLORE)]
    assert choices.count(False) == 2


def test_the_average_moves_by_the_rate_and_one_core_never_pools():
    pace = FillPace(cores=2)
    pace.record(False, 2e-3, 2)
    assert pace.cost[0] == pytest.approx(1e-3)
    pace.record(False, 4e-3, 2)
    assert pace.cost[0] == pytest.approx(1e-3 + FillPace.RATE * 1e-3)
    single = FillPace(cores=1)
    single.cost = [1.0, 0.0]
    assert not any(single.pool() for _ in range(3 * FillPace.EXPLORE))
