"""Hostile regexes and Lark grammars (docs/bad-input.md, "Regex and Lark: limits and
refused constructs"): each is a clear ValueError/TypeError, raised before anything
large is built, never a hang, RecursionError, OverflowError or MemoryError."""

import asyncio
import os

import pytest
from toys.reliability import assert_clear_error, undocumented

from genlm.control import BoolCFG, BoolFSA

KW = "start: " + " | ".join(f'"kw{i}"' for i in range(40))

# (row id, thunk, error type, message pattern); in the order of docs/bad-input.md
ROWS = [
    ("regex-nested-groups", lambda: BoolFSA.from_regex("(?:" * 2000 + "a" + ")" * 2000), ValueError, "nests groups deeper than 100 .at position 300"),
    ("regex-open-groups", lambda: BoolFSA.from_regex("(" * 5000), ValueError, "nests groups deeper than 100"),
    ("regex-repeat-overflow", lambda: BoolFSA.from_regex("a{99999999999}"), ValueError, "repeat count is too large"),
    ("regex-expanded-size", lambda: BoolFSA.from_regex("a{100000}"), ValueError, "expands to more than 32768 character positions"),
    ("regex-nested-repeats", lambda: BoolFSA.from_regex("((a{100}){100}){100}"), ValueError, "expands to more than 32768"),
    ("regex-dfa-states", lambda: BoolFSA.from_regex("(a|b)*a(a|b){12}", max_states=1000), ValueError, "needs more than 1000 DFA states"),
    ("regex-max-states", lambda: BoolFSA.from_regex("a", max_states=0), ValueError, "max_states must be a positive integer"),
    ("regex-unicode-flag", lambda: BoolFSA.from_regex(r"(?u)\w"), ValueError, r"Unicode \(\?u\).*position 0"),
    ("regex-brace-escape", lambda: BoolFSA.from_regex(r"\x{1F600}"), ValueError, r"incomplete escape \\x at position 0"),
    ("regex-possessive", lambda: BoolFSA.from_regex("ab*+"), ValueError, "possessive repeats at position 3"),
    ("regex-atomic", lambda: BoolFSA.from_regex("x(?>a)b"), ValueError, "atomic groups at position 1"),
    ("regex-lookahead", lambda: BoolFSA.from_regex("a(?=b)"), ValueError, "lookahead/lookbehind assertions at position 1"),
    ("regex-lookbehind", lambda: BoolFSA.from_regex("(?<!a)b"), ValueError, "negative lookahead/lookbehind assertions at position 0"),
    ("regex-backreference", lambda: BoolFSA.from_regex(r"(a)\1"), ValueError, r"group references \(backreferences\) at position 3"),
    ("regex-anchor", lambda: BoolFSA.from_regex(r"a\Zb"), ValueError, "anchors .* at position 1"),
    ("regex-empty-language", lambda: BoolFSA.from_regex(r"[^\x00-\U0010ffff]"), ValueError, "matches no string"),
    ("lark-import-missing", lambda: BoolCFG.from_lark("%import nosuch.WORD\nstart: WORD"), ValueError, "%import nosuch: no such grammar among Lark's bundled grammars"),
    ("lark-import-relative-string", lambda: BoolCFG.from_lark("%import .mygrammar.WORD\nstart: WORD"), ValueError, "relative import needs the grammar's folder"),
    ("lark-import-relative-missing", lambda: BoolCFG.from_lark("%import .nothere.WORD\nstart: WORD", base_dir=os.path.dirname(__file__)), ValueError, r"%import \.nothere: cannot read"),
    ("lark-base-dir-type", lambda: BoolCFG.from_lark('start: "a"', base_dir=5), TypeError, "base_dir must be a folder path"),
    ("lark-empty-language", lambda: BoolCFG.from_lark('start: a\na: a "x"'), ValueError, "language is empty"),
    ("lark-nested", lambda: BoolCFG.from_lark("start: " + "(" * 3000 + '"a"' + ")" * 3000), ValueError, "nested too deeply"),
    ("lark-terminal-refused", lambda: BoolCFG.from_lark("start: X\nX: /a(?=b)/"), ValueError, "terminal X: regex .* lookahead"),
    ("lark-terminals-too-large", lambda: BoolCFG.from_lark("start: X\nX: /.{500}/"), ValueError, "Lark grammar too large"),
    ("cfg-earley-rules", lambda: BoolCFG.from_lark(KW, max_rules=10).prefix([]), ValueError, "more than the Earley parser's limit max_rules=10"),
]  # fmt: skip


@pytest.mark.parametrize("thunk, err, match", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
async def test_bad_input_gives_a_clear_error(thunk, err, match):
    await assert_clear_error(thunk, err, match)


def test_every_row_is_documented():
    missing = undocumented(r[0] for r in ROWS)
    assert not missing, f"rows without a line in docs/bad-input.md: {missing}"


def test_inputs_that_are_supported_mean_what_re_says():
    """The escapes the issue lists are read by Python's parser, with its meaning."""
    for pattern, text in [(r"\u00e9", "é"), (r"\N{LATIN SMALL LETTER E WITH ACUTE}", "é"), (r"\0", "\0")]:
        fsa = BoolFSA.from_regex(pattern)
        assert asyncio.run(fsa.complete(list(text.encode()))) == 0.0


def test_large_linear_patterns_are_built_not_refused():
    """A long literal and bounded repeats of a small piece have linear-size DFAs."""
    assert BoolFSA.from_regex("x" * 20000).automaton.n_states == 20001
    assert BoolFSA.from_regex("a{4000}").automaton.n_states == 4001
    assert BoolFSA.from_regex("(?:ab){1000}").automaton.n_states == 2001
