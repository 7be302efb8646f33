"""The rows of docs/bad-input.md for declared fast paths and the coerce planner:
`engine=True` on a potential without a compiled-engine form, and a fast path that is
declared with something other than a method."""

import pytest
from toys.reliability import NoBB, ab_lm, assert_clear_error, undocumented

from genlm.control import AWRS, WFSA, BoolCFG


class _NotCallable(NoBB):
    """`NoBB` whose `allowed_next` is declared as a flag instead of a method."""

    allowed_next = True


class _BatchNotCallable(NoBB):
    batch_allowed = "yes"


ROWS = [
    ("coerce-engine-without-form", lambda: NoBB().coerce([b"a", b"b"], lambda xs: xs, engine=True), ValueError, "engine=True needs a BoolFSA.from_regex, BoolCFG.from_lark or JsonSchema constraint"),
    ("coerce-engine-weighted-regex", lambda: WFSA.from_regex("ab").coerce([b"a", b"b"], b"".join, engine=True), ValueError, "engine=True needs a BoolFSA built by from_regex"),
    ("coerce-engine-cfg-from-string", lambda: BoolCFG.from_string("1: S -> a").coerce([b"a"], b"".join, engine=True), ValueError, "engine=True needs a BoolCFG built by from_lark"),
    ("fast-path-not-callable", lambda: AWRS(ab_lm(), _NotCallable()), TypeError, r"_NotCallable\.allowed_next must be an async method or None, got bool"),
    ("fast-path-not-callable", lambda: AWRS(ab_lm(), _BatchNotCallable()), TypeError, r"_BatchNotCallable\.batch_allowed must be an async method or None, got str"),
]


@pytest.mark.parametrize("thunk, err, match", [r[1:] for r in ROWS], ids=[f"{r[0]}-{i}" for i, r in enumerate(ROWS)])
async def test_bad_protocol_input_gives_a_clear_error(thunk, err, match):
    await assert_clear_error(thunk, err, match)


def test_every_protocol_row_is_documented():
    missing = undocumented(r[0] for r in ROWS)
    assert not missing, f"rows without a line in docs/bad-input.md: {missing}"


def test_engine_none_and_false_on_a_potential_without_a_form_are_the_generic_coercion():
    from genlm.control.potential.coerce import Coerced

    for engine in (None, False):
        c = NoBB().coerce([b"b", b"a", b"c"], list, engine=engine)
        assert type(c) is Coerced and c.vocab == [b"b", b"a"]
