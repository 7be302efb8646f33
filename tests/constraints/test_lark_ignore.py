"""`%ignore` in `BoolCFG.from_lark` against Lark's own Earley parser (the reference,
`lexer="dynamic_complete"`): every string over a small alphabet up to a length, and
random longer ones, get the same verdict."""

from __future__ import annotations

import itertools
import random

import lark
import pytest

from genlm.control import WCFG, BoolCFG
from genlm.control.constraints.cfg import ignore_stop_bytes

GRAMMARS = {
    "line comments": (
        r"""
        start: item+
        item: WORD | NUMBER
        WORD: /[a-z]+/
        NUMBER: /[0-9]+/
        COMMENT: /#[^\n]*/
        %ignore " "
        %ignore "\n"
        %ignore COMMENT
        """,
        "a #\n1",
        4,
    ),
    "common WS": (
        r"""
        start: WORD ("," WORD)*
        %import common.WORD
        %import common.WS
        %ignore WS
        """,
        "ab ,\n",
        4,
    ),
    "shell comments and inline spaces": (
        r"""
        start: stmt+
        stmt: NAME "=" NAME ";"
        NAME: /[a-z]+/
        %import common.SH_COMMENT
        %import common.WS_INLINE
        %ignore SH_COMMENT
        %ignore WS_INLINE
        """,
        "a=;# \n",
        4,
    ),
    "non-ASCII spaces": ('start: X+\nX: "é" | "a"\n%ignore /[ \\u00a0]+/', "aé \u00a0", 4),
    "literal ignores": ('start: "a" "b"*\n%ignore " "\n%ignore "  "', "ab ", 4),
    "a terminal of spaces": ('start: "a" SP "b"\nSP: / +/\n%ignore /[ ]+/', "ab ", 4),
}


def _texts(alphabet: str, length: int, seed: int = 0) -> list[str]:
    out = {"".join(t) for n in range(length + 1) for t in itertools.product(alphabet, repeat=n)}
    rnd = random.Random(seed)
    out |= {"".join(rnd.choice(alphabet) for _ in range(rnd.randint(length + 1, 9))) for _ in range(150)}
    return sorted(out)


def _reference(parser, text: str) -> bool:
    try:
        parser.parse(text)
    except lark.exceptions.LarkError:
        return False
    return True


@pytest.mark.parametrize("name", sorted(GRAMMARS))
async def test_the_language_is_larks(name):
    grammar, alphabet, length = GRAMMARS[name]
    parser = lark.Lark(grammar, parser="earley", lexer="dynamic_complete")
    cfg = BoolCFG.from_lark(grammar)
    verdicts = []
    for text in _texts(alphabet, length):
        ours = await cfg.complete(list(text.encode())) == 0
        assert ours == _reference(parser, text), text
        verdicts.append(ours)
    assert any(verdicts) and not all(verdicts)  # the comparison has both kinds


async def test_a_comment_runs_to_the_newline():
    cfg = BoolCFG.from_lark(GRAMMARS["line comments"][0])
    for text in ["# a ", " #a", "#a", "#a b"]:  # the comment swallows every word after it
        assert await cfg.complete(list(text.encode())) == float("-inf"), text
        assert await cfg.prefix(list(text.encode())) == 0, text  # a newline may follow
    for text in ["#x\na", "a #b\n1", "a", "a # b c\n", "a #b"]:
        assert await cfg.complete(list(text.encode())) == 0, text


def test_stop_bytes_of_ignore_patterns():
    assert ignore_stop_bytes(r"#[^\n]*") == frozenset(set(range(0x80)) - {10} | set(range(0xC2, 0xF5)))
    assert ignore_stop_bytes(r"[ \t]+") == frozenset({0x20, 0x09})
    assert ignore_stop_bytes(r"//[^\n]*") == ignore_stop_bytes(r"#[^\n]*")
    assert ignore_stop_bytes(r" ") == frozenset()  # a literal: its match is itself
    assert ignore_stop_bytes(r"/\*(.|\n)*?\*/") == frozenset()  # another shape
    assert ignore_stop_bytes(r"[ ]{1,3}") == frozenset()
    # U+00A0 shares its lead byte 0xC2 with U+0080..U+00BF: one byte cannot tell them apart
    assert ignore_stop_bytes("[ \u00a0]+") == frozenset()
    assert ignore_stop_bytes("[ \u0080-\u00bf]+") == frozenset({0x20, 0xC2})


async def test_weighted_grammars_keep_the_weights_of_the_splits_they_keep():
    """`WCFG.from_lark` with an ignored comment: the text's weight is the sum over the
    splits left, and a split the comment rule removes has no weight."""
    grammar = 'start: "a" "b"\nCOMMENT: /#[a-z]*/\n%ignore COMMENT\n%ignore "\\n"'
    w = WCFG.from_lark(grammar)
    assert await w.complete(list(b"a#b")) == float("-inf")  # the comment took the "b"
    plain, split = await w.complete(list(b"ab")), await w.complete(list(b"a#\nb"))
    assert plain > split > float("-inf")


@pytest.mark.parametrize("name", sorted(GRAMMARS))
async def test_the_default_coercion_keeps_the_language(llm, pieces, name):
    """Whether or not the engine serves the grammar, the default coercion gives Lark's
    verdicts (the engine is used only where its lexing provably agrees)."""
    grammar, alphabet, _ = GRAMMARS[name]
    parser = lark.Lark(grammar, parser="earley", lexer="dynamic_complete")
    coerced = BoolCFG.from_lark(grammar).coerce(llm, f=b"".join)
    for text in _texts(alphabet, 3, seed=1)[:120]:
        tokens = [pieces[bytes([b])] for b in text.encode()]
        assert (await coerced.complete(tokens) == 0) == _reference(parser, text), text
