"""Terminals lowered to one-byte rules, so that the engine's lexer has no choice to make.

A terminal `X` whose byte automaton has states `q` and arcs `q --B--> r` (grouped by
target, `B` a set of bytes) is replaced in every rule body by the nonterminal of
its start state, with the right-linear rules

    x_q: C_B x_r      for every arc group of q (C_B alone when r is final without arcs)
    x_q: ""           when q is final

where `C_B` is a terminal matching exactly one byte of `B`. The lowered grammar
derives the same byte strings from every symbol (a string of `X` is exactly a path
of its automaton), so the scannerless language is unchanged, and a one-byte terminal
can never be continued: the lexing rule of `_lark_exact` then holds for it by
construction. Lowering is applied only to the terminals the rule finds in a clash,
repeatedly, so the terminals that lex safely stay whole (lexemes are cheaper for the
engine than bytes).

Only terminals over ASCII bytes are lowered: the engine's regexes are over
characters, and a byte of a multi-byte UTF-8 sequence is not a character.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from genlm.control.engine._guided_regex import emit

MAX_LOWERED_STATES = 2_000  # automaton states lowered in all, beyond which the grammar is not proven


class ByteClass(NamedTuple):
    """A terminal matching one byte of a set: the automaton `0 --B--> 1`, 1 final."""

    delta: np.ndarray
    final: np.ndarray

    @property
    def n_states(self) -> int:
        return 2


def byte_class(members: frozenset) -> ByteClass:
    delta = np.full((2, 256), -1, dtype=np.int64)
    delta[0, sorted(members)] = 1
    return ByteClass(delta, np.array([False, True]))


def class_regex(members: frozenset) -> str:
    """The engine regex of one byte of `members` (all ASCII)."""
    ranges: list = []
    for b in sorted(members):
        if ranges and ranges[-1][1] == b - 1:
            ranges[-1] = (ranges[-1][0], b)
        else:
            ranges.append((b, b))
    return emit(("set", ranges))


def lowerable(dfa) -> bool:
    """Whether the automaton reads ASCII bytes only (see the module docstring)."""
    return not bool((np.asarray(dfa.delta)[:, 0x80:] >= 0).any())


class Lowering:
    """The byte-class terminals made so far, shared by every lowered terminal."""

    def __init__(self):
        self.classes: dict[frozenset, str] = {}
        self.states = 0

    def terminal(self, members: frozenset) -> str:
        name = self.classes.get(members)
        if name is None:
            name = self.classes[members] = f"C{len(self.classes)}"
        return name

    def lower(self, name: str, dfa) -> tuple[str, list]:
        """The nonterminal standing for terminal `name` and its rules."""
        self.states += dfa.n_states
        delta, final = np.asarray(dfa.delta), np.asarray(dfa.final)
        head = f"l{name.lower()}_"
        leaf = {q for q in range(dfa.n_states) if final[q] and not (delta[q] >= 0).any()}
        rules: list = []
        for q in range(dfa.n_states):
            if q in leaf and q != 0:
                continue
            if final[q]:
                rules.append((f"{head}{q}", ()))
            targets: dict[int, set] = {}
            for b in np.flatnonzero(delta[q] >= 0).tolist():
                targets.setdefault(int(delta[q, b]), set()).add(b)
            for r, members in sorted(targets.items()):
                c = self.terminal(frozenset(members))
                rules.append((f"{head}{q}", (c,) if r in leaf else (c, f"{head}{r}")))
        return f"{head}0", rules


__all__ = ["MAX_LOWERED_STATES", "Lowering", "byte_class", "class_regex", "lowerable"]


def factor(rules: list) -> list:
    """The same grammar with each nonterminal's alternatives written as their minimal
    automaton over symbols: Lark expands `a? b? c?` into all 2³ sequences, which the
    engine would carry as that many Earley items; the automaton has a state per
    distinct rest (`x: a x₁ | x₁`, `x₁: b x₂ | x₂`, ...). Every nonterminal derives
    the same strings as before. A head whose alternatives share no first or rest is
    kept as is."""
    alts: dict[str, list] = {}
    for h, body in rules:
        alts.setdefault(h, []).append(tuple(body))
    out: list = []
    taken = set(alts)
    for h, bodies in alts.items():
        out += _factored(h, frozenset(bodies), taken) if len(bodies) > 2 else [(h, b) for b in bodies]
    return out


def _factored(head: str, bodies: frozenset, taken: set) -> list:
    """`head`'s rules as the minimal automaton of its alternatives; the names of the
    states it adds are new (kept in `taken`)."""
    names: dict[frozenset, str] = {bodies: head}
    out: list = []
    todo = [bodies]
    while todo:
        rest = todo.pop()
        name = names[rest]
        if () in rest:
            out.append((name, ()))
        by_first: dict[str, set] = {}
        for body in rest:
            if body:
                by_first.setdefault(body[0], set()).add(body[1:])
        for y, tails in sorted(by_first.items()):
            tails = frozenset(tails)
            if tails == frozenset({()}):
                out.append((name, (y,)))
                continue
            if len(tails) == 1:
                out.append((name, (y, *next(iter(tails)))))
                continue
            if tails not in names:
                k = len(names)
                while f"{head}_f{k}" in taken:
                    k += 1
                names[tails] = f"{head}_f{k}"
                taken.add(names[tails])
                todo.append(tails)
            out.append((name, (y, names[tails])))
    return out
