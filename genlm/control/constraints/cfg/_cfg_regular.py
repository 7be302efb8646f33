"""A Lark grammar without recursion as one regular expression of the same language.

`BoolCFG.from_lark` reads a grammar scannerless: a document is a concatenation of
terminal strings as the rules derive them (with `%ignore`d terminals between them).
Where no rule reaches itself and nothing is ignored, that language is regular, and

    regex(X) = (?:body_1|body_2|...)      over X's rules, each body the concatenation
                                          of its symbols' regexes
    regex(T) = (?:pattern of T)           for a terminal

is a regex of exactly the language of `start`. A rule that reaches itself only
directly, at the left (`X: B | X A`, what Lark writes for `A*` and `A+` repeats)
or at the right (`X: B | A X`), is the repeat `B(?:A)*` or `(?:A)*B`; any other
recursion is not regular in general, and no regex is written. The budget of a run reads the exact
fewest tokens to a complete document off its byte automaton (`BoolFSA`), where the
grammar's own bound (bytes over the longest token) is a weak lower bound.
"""

from __future__ import annotations

from typing import Any

MAX_PATTERN = 20_000  # characters of the expanded regex


def regular_pattern(grammar: Any) -> str | None:
    """The regex of the language of `grammar` (a `LarkGrammar`) from `start`, or None
    where a rule reaches itself, a terminal is ignored, or the regex would exceed
    `MAX_PATTERN` characters."""
    if grammar.ignores:
        return None
    bodies: dict[str, list] = {}
    for head, body in grammar.rules:
        bodies.setdefault(head, []).append(body)
    done: dict[str, str] = {}

    def regex(symbol: str, path: frozenset) -> str | None:
        if symbol in done:
            return done[symbol]
        if symbol in grammar.patterns:
            out = f"(?:{grammar.patterns[symbol]})"
        elif symbol in path or symbol not in bodies:
            return None
        else:
            out = _rule(symbol, bodies[symbol], lambda y: regex(y, path | {symbol}))
        if out is None or len(out) > MAX_PATTERN:
            return None
        done[symbol] = out
        return out

    return regex("start", frozenset())


def _rule(symbol: str, bodies: list, regex) -> str | None:
    """The regex of one rule from its bodies: plain alternatives, with direct left or
    right recursion as a repeat (None: recursion of another shape, or both sides)."""
    plain, left, right = [], [], []
    for body in bodies:
        if symbol not in body:
            plain.append(body)
        elif body[0] == symbol and symbol not in body[1:]:
            left.append(body[1:])
        elif body[-1] == symbol and symbol not in body[:-1]:
            right.append(body[:-1])
        else:
            return None
    if not plain or (left and right):
        return None
    parts = {}
    for name, group in (("plain", plain), ("rec", left or right)):
        alts = []
        for body in group:
            pieces = [regex(y) for y in body]
            if any(p is None for p in pieces):
                return None
            alts.append("".join(pieces))
        parts[name] = "(?:" + "|".join(alts) + ")" if alts else ""
    if left:
        return f"(?:{parts['plain']}{parts['rec']}*)"
    if right:
        return f"(?:{parts['rec']}*{parts['plain']})"
    return parts["plain"]


__all__ = ["regular_pattern"]
