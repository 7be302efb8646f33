"""Lark grammars converted to byte-level genlm-grammar CFGs.

Each Lark terminal's regex is compiled by `_fsa_regex` (full UTF-8, ASCII classes)
into an automaton and then into right-linear rules, so a terminal matches exactly
the strings of its regex. Terminals named in `%ignore` may occur any number of
times before every other terminal and at the end of the input. Lexing is
scannerless: any split of the input into terminals that the rules allow is
accepted (like Lark's Earley parser with `lexer="dynamic_complete"`), without
priorities or longest-match.
"""

from __future__ import annotations

from typing import Any

import lark
from genlm.grammar import CFG, Float

from genlm.control.potential.built_in._fsa_regex import regex_wfsa

# Terminals are one-byte `bytes`, never ints: Earley renumbers nonterminals to ints.
BYTE_SYMBOLS = [bytes([b]) for b in range(256)]


def _compile_lark(text: str):
    if not isinstance(text, str):
        raise TypeError(f"a Lark grammar must be a str, got {type(text).__name__}")
    try:
        builder = lark.load_grammar.GrammarBuilder()
        builder.load_grammar(text)
        grammar = builder.build()
        terminals, rules, ignores = grammar.compile(["start"], set())
    except lark.exceptions.LarkError as e:
        raise ValueError(f"invalid Lark grammar: {e}") from None
    except KeyError as e:
        raise ValueError(f"invalid Lark grammar: undefined symbol {e}") from None
    return terminals, rules, ignores


def lark_to_cfg(text: str, semiring: Any = Float) -> CFG:
    """A byte-level CFG (terminals are one-byte `bytes`) for the Lark grammar `text`.

    Rule weights are uniform per head (`1/k` over a head's `k` rules) and each
    terminal's automaton weights are those of `regex_wfsa`.

    Raises:
        ValueError: for a grammar Lark rejects, one without a `start` rule, or a
            terminal whose regex the automaton compiler rejects (naming it).
    """
    if "start" not in _rule_names(text):
        raise ValueError("invalid Lark grammar: it must define a `start` rule")
    terminals, rules, ignores = _compile_lark(text)
    one = semiring.one
    pairs = [(r.origin.name, tuple(y.name for y in r.expansion)) for r in rules]
    heads: dict[str, int] = {}
    for h, _ in pairs:
        heads[h] = heads.get(h, 0) + 1
    w = _weight(semiring)
    cfg = CFG(R=semiring, S="$S", V=set())
    ignore = "$IGNORE" if ignores else None
    cfg.add(one, "$S", "start", *([ignore] if ignore else []))
    for h, body in pairs:
        cfg.add(w(heads[h]), h, *body)
    if ignore:
        cfg.add(w(len(ignores) + 1), ignore)
        for name in ignores:
            cfg.add(w(len(ignores) + 1), ignore, ignore, name)
    for t in terminals:
        head = t.name if not ignore or t.name in ignores else f"$T:{t.name}"
        if ignore and t.name not in ignores:
            cfg.add(one, t.name, ignore, head)
        _add_terminal(cfg, head, t, semiring)
    return cfg


def _rule_names(text: str) -> set:
    try:
        builder = lark.load_grammar.GrammarBuilder()
        builder.load_grammar(text)
        grammar = builder.build()
    except lark.exceptions.LarkError as e:
        raise ValueError(f"invalid Lark grammar: {e}") from None
    return {r[0].value if hasattr(r[0], "value") else str(r[0]) for r in grammar.rule_defs}


def _weight(semiring):
    if semiring is Float:
        return lambda k: 1.0 / k
    return lambda k: semiring.one


def _add_terminal(cfg: CFG, head: str, terminal, semiring) -> None:
    pattern = terminal.pattern.to_regexp()
    try:
        fsa = regex_wfsa(pattern, semiring, _weight(semiring))
    except ValueError as e:
        raise ValueError(f"invalid Lark grammar: terminal {terminal.name}: {e}") from None
    prefix = f"$Q:{head}:"
    for q, w in fsa.I:
        cfg.add(w, head, prefix + str(q))
    for i, a, j, w in fsa.arcs():
        cfg.V.add(BYTE_SYMBOLS[a])
        cfg.add(w, prefix + str(i), BYTE_SYMBOLS[a], prefix + str(j))
    for q, w in fsa.F:
        cfg.add(w, prefix + str(q))


__all__ = ["lark_to_cfg", "BYTE_SYMBOLS"]
