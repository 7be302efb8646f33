"""Regular expressions compiled to byte-level deterministic automata.

A pattern is parsed by Python's own regex parser (for validation and to reject
constructs that no finite automaton expresses), compiled to a character-level
DFA by `interegular`, and expanded to a byte-level DFA over the UTF-8 encoding of
every Unicode scalar value. Characters named in the pattern get their own arcs;
every other character ("anything else", e.g. under `.` or `[^a]`) is covered by
shared continuation states, so the expansion stays small.

Semantics are those of `regex.fullmatch(pattern, text, flags=regex.ASCII)`:
`\\d`, `\\w`, `\\s` and `\\b`-free classes are ASCII, `.` is any character but `\\n`.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import interegular
from interegular.fsm import anything_else

# `re._parser` is the stable home of sre_parse since Python 3.11.
try:  # pragma: no cover - import location depends on the Python version
    from re import _constants as sre_constants
    from re import _parser as sre_parse
except ImportError:  # pragma: no cover
    import sre_constants
    import sre_parse

_REJECTED_OPS = {
    sre_constants.ASSERT: "lookahead/lookbehind assertions",
    sre_constants.ASSERT_NOT: "negative lookahead/lookbehind assertions",
    sre_constants.GROUPREF: "group references",
    sre_constants.GROUPREF_EXISTS: "conditional group references",
    sre_constants.AT: "anchors (^, $, \\A, \\Z, \\b, \\B)",
}


def _scan(parsed: Any, pattern: str) -> None:
    for op, av in parsed:
        if op in _REJECTED_OPS:
            raise ValueError(
                f"regex {pattern!r} uses {_REJECTED_OPS[op]}, which a finite automaton "
                "over the whole string does not express"
            )
        for sub in av if isinstance(av, (list, tuple)) else ():
            if isinstance(sub, sre_parse.SubPattern):
                _scan(sub, pattern)
            elif isinstance(sub, (list, tuple)):
                for x in sub:
                    if isinstance(x, sre_parse.SubPattern):
                        _scan(x, pattern)


def char_dfa(pattern: str):
    """The `interegular` DFA of `pattern`.

    Raises:
        ValueError: naming the pattern and the problem, for invalid syntax or an
            unsupported construct.
    """
    if not isinstance(pattern, str):
        raise TypeError(f"a regex pattern must be a str, got {type(pattern).__name__}")
    try:
        parsed = sre_parse.parse(pattern, re.ASCII)
    except re.error as e:
        raise ValueError(f"invalid regex {pattern!r}: {e}") from None
    _scan(parsed, pattern)
    try:
        fsm = interegular.parse_pattern(pattern).to_fsm()
    except Exception as e:  # interegular raises its own exception types
        raise ValueError(f"unsupported regex {pattern!r}: {type(e).__name__} {e}") from None
    for c in fsm.alphabet:
        if c is not anything_else and len(c) != 1:
            raise ValueError(f"regex {pattern!r} has a multi-character arc {c!r}")
    return fsm


def _utf8_len(lead: int) -> int:
    if lead < 0x80:
        return 1
    if lead < 0xE0:
        return 2
    if lead < 0xF0:
        return 3
    return 4


_LEADS = list(range(0x00, 0x80)) + list(range(0xC2, 0xF5))
_SECOND = {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F), 0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}


def _next_bytes(prefix: bytes) -> range:
    """Bytes that extend `prefix` (a proper prefix of some UTF-8 encoding)."""
    if not prefix:
        return _LEADS  # type: ignore[return-value]
    if len(prefix) == 1:
        lo, hi = _SECOND.get(prefix[0], (0x80, 0xBF))
        return range(lo, hi + 1)
    return range(0x80, 0xC0)


class _Builder:
    """Byte-level arcs of the expanded DFA; states are hashable keys."""

    def __init__(self):
        self.arcs: dict[Any, dict[int, Any]] = {}

    def arc(self, src, byte: int, dst) -> None:
        self.arcs.setdefault(src, {})[byte] = dst
        self.arcs.setdefault(dst, {})

    def generic(self, target, prefix: bytes):
        """State after `prefix` (incomplete) where every completion goes to `target`."""
        rest = _utf8_len(prefix[0]) - len(prefix)
        key = ("g", target, prefix[0]) if len(prefix) == 1 else ("c", target, rest)
        if key in self.arcs:
            return key
        self.arcs[key] = {}
        for b in _next_bytes(prefix):
            self.arc(key, b, target if rest == 1 else self.generic(target, prefix + bytes([b])))
        return key

    def expand(self, node, prefix: bytes, explicit: dict[bytes, Any], default) -> bool:
        """Arcs from `node` (after `prefix`) for the characters in `explicit`
        (encoding → target, None for a dead character) and, for every other
        character, `default` (None: no arc). Returns whether `node` has any arc."""
        out = self.arcs.setdefault(node, {})
        for b in _next_bytes(prefix):
            here = prefix + bytes([b])
            done = _utf8_len(here[0]) == len(here)
            under = {k: v for k, v in explicit.items() if k[len(prefix)] == b}
            if done:
                target = under[here] if here in under else default
                if target is not None:
                    self.arc(node, b, target)
            elif under:
                child = ("x", node, b)
                if self.expand(child, here, under, default):
                    out[b] = child
                else:
                    del self.arcs[child]
            elif default is not None:
                self.arc(node, b, self.generic(default, here))
        return bool(out)


def byte_dfa(pattern: str) -> tuple[Any, set, dict[Any, dict[int, Any]]]:
    """The byte-level DFA of `pattern`: `(initial, finals, arcs)`, trimmed to live states.

    `arcs[state][byte] = next_state`; every state in `arcs` can reach a final state.
    """
    fsm = char_dfa(pattern)
    live = {s for s in fsm.states if fsm.islive(s)}
    if fsm.initial not in live:
        raise ValueError(f"regex {pattern!r} matches no string")
    other_key = fsm.alphabet[anything_else]
    chars = [c for c in fsm.alphabet if c is not anything_else]
    builder = _Builder()
    for s in live:
        row = fsm.map.get(s, {})
        explicit = {}
        for c in chars:
            t = row.get(fsm.alphabet[c])
            explicit[c.encode("utf-8")] = ("q", t) if t in live else None
        t = row.get(other_key)
        builder.expand(("q", s), b"", explicit, ("q", t) if t in live else None)
    finals = {("q", s) for s in fsm.finals if s in live}
    return ("q", fsm.initial), finals, builder.arcs


def regex_wfsa(pattern: str, semiring: Any, weight: Callable[[int], Any]):
    """A genlm-grammar WFSA over byte values for `pattern`.

    Each state splits `weight(k)` evenly over its `k` choices (outgoing bytes plus
    stopping, when final): with `weight = 1/k` the automaton is a distribution over
    strings that picks the next byte uniformly among those that keep a match possible.
    """
    from genlm.grammar import WFSA as GrammarWFSA

    initial, finals, arcs = byte_dfa(pattern)
    ids: dict[Any, int] = {}
    for s in [initial, *arcs]:
        ids.setdefault(s, len(ids))
    m = GrammarWFSA(semiring)
    m.add_I(ids[initial], semiring.one)
    for s, out in arcs.items():
        w = weight(len(out) + (s in finals))
        if s in finals:
            m.add_F(ids[s], w)
        for b, t in out.items():
            m.add_arc(ids[s], b, ids[t], w)
    return m


__all__ = ["byte_dfa", "char_dfa", "regex_wfsa"]
