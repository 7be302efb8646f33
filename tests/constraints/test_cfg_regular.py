"""A Lark grammar without recursion (but Lark's repeats) as one regex
(`constraints/cfg/_cfg_regular.py`, `BoolCFG.regular_form`): the automaton of the
regex has exactly the grammar's language, prefixes included, on every byte string
up to a length; recursive grammars and `%ignore` get none."""

import asyncio

import pytest

from genlm.control import BoolCFG
from genlm.control.constraints.cfg import read_lark
from genlm.control.constraints.cfg._cfg_regular import regular_pattern

GRAMMARS = [
    (
        'start: "S " cols " F " N w? ";"\ncols: N (", " N)*\nw: " W " N OP V\n'
        'OP: "=" | "<"\nN: /[ab]+/\nV: /[0-9]/',
        b"S F;ab,<0 W",
        9,
    ),
    ('start: "a"+ "b"? ("c" | "d")~1..2', b"abcd", 5),
    ('start: x* "." \nx: "ab" | "b"', b"ab.", 5),
    ('start: "x"i "y"? -> one', b"xXyY", 3),
    ('start: A+ B\nA: "a"\nB: /b{1,2}/', b"ab", 5),
]


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("text, alphabet, n", GRAMMARS)
def test_the_regex_has_the_grammars_language_on_every_short_string(text, alphabet, n):
    """Depth first over the strings both call live (a string one calls dead and the
    other live fails at once), up to `n` bytes."""
    cfg = BoolCFG.from_lark(text)
    fsa = cfg.regular_form()
    assert fsa is not None and fsa.pattern == regular_pattern(read_lark(text))
    stack, seen = [[]], 0
    while stack:
        ctx = stack.pop()
        live = run(fsa.prefix(ctx))
        assert live == run(cfg.prefix(ctx)), bytes(ctx)
        if live == float("-inf"):
            continue
        seen += 1
        assert run(fsa.complete(ctx)) == run(cfg.complete(ctx)), bytes(ctx)
        if len(ctx) < n:
            stack.extend(ctx + [b] for b in alphabet)
    assert seen > n  # the walk went past the empty string


@pytest.mark.parametrize(
    "text",
    [
        'start: "(" start ")" | "x"',  # recursion in the middle
        'start: a\na: "x" b | "y"\nb: "z" a',  # mutual recursion
        'start: x+\nx: "a"\n%ignore " "',  # ignored whitespace
    ],
)
def test_no_regex_where_the_grammar_is_not_plainly_regular(text):
    assert regular_pattern(read_lark(text)) is None
    assert BoolCFG.from_lark(text).regular_form() is None


def test_grammars_not_read_from_lark_have_no_regular_form():
    assert BoolCFG.from_string("1: S -> a\n").regular_form() is None
