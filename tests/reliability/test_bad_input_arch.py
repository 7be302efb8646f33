"""Bad cache sizes of the constraint potentials (docs/bad-input.md, "Constraints"):
the bounded state cache names the problem before anything is cached."""

import pytest
from toys.reliability import assert_clear_error, undocumented

from genlm.control import WFSA, BoolFSA, JsonSchema

# (row id, thunk, error type, message pattern); in the order of docs/bad-input.md
ROWS = [
    ("cache-size-nan", lambda: WFSA.from_regex("a", cache_size=float("nan")), ValueError, "cache size must be at least 1, got nan"),
    ("cache-size-nan", lambda: BoolFSA.from_regex("a", cache_size=float("nan")), ValueError, "cache size must be at least 1"),
    ("cache-size-nan", lambda: JsonSchema(True, cache_size=float("nan")), ValueError, "cache size must be at least 1"),
    ("cache-size-bool", lambda: BoolFSA.from_regex("a", cache_size=True), TypeError, "cache size must be a number, got True"),
    ("cache-size-str", lambda: JsonSchema(True, cache_size="8"), TypeError, "cache size must be a number, got '8'"),
]


@pytest.mark.parametrize("thunk, err, match", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
async def test_bad_input_gives_a_clear_error(thunk, err, match):
    await assert_clear_error(thunk, err, match)


def test_every_row_is_documented():
    assert undocumented({r[0] for r in ROWS}) == []


def test_a_fractional_cache_size_still_bounds_the_cache():
    fsa = BoolFSA.from_regex("a*", cache_size=2.5)  # as before: at most 2 states kept
    fsa._cache.get([97] * 5)
    assert len(fsa._cache) == 2
