"""Lark grammars read into rules and byte automata, and converted to byte-level CFGs.

Each Lark terminal is compiled by `regex.compile` (full UTF-8, ASCII classes; a plain
string is a chain of its bytes) into a byte DFA and then into right-linear rules,
so a terminal matches exactly the strings of its regex. Terminals named in
`%ignore` may occur any number of times before every other terminal and at the end
of the input. Lexing is scannerless: any split of the input into terminals that the
rules allow is accepted (like Lark's Earley parser with `lexer="dynamic_complete"`),
without priorities or longest-match, except where that parser itself takes an
ignored terminal as a regex match: an ignored terminal that ends in an unbounded
repeat of a character set (`/#[^\n]*/`, `WS`) runs to the end of its repeat, as
Lark's scanner has it (`ignore_stop_bytes`).

Cost is bounded: all terminals share one DFA state budget (`max_states`), and the
byte-level grammar may have at most `MAX_RULES` rules, both checked before the CFG
is built. `%import` reads only Lark's bundled grammars (`%import common.WORD`) and,
when the grammar came from a file, grammars relative to that file's folder
(`base_dir`); nothing else is opened.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, NamedTuple

import lark
import numpy as np
from lark.load_grammar import GrammarBuilder, _get_mangle, stdlib_loader

from genlm.control.constraints.regex.compile import (
    MAX_STATES,
    ByteDFA,
    compile_regex,
    literal_dfa,
)
from genlm.control.constraints.regex.syntax import parse_regex

if TYPE_CHECKING:  # genlm.grammar is imported on use: it takes seconds, and reading
    from genlm.grammar import CFG  # a grammar (`read_lark`) does not need it

# Terminals are one-byte `bytes`, never ints: Earley renumbers nonterminals to ints.
BYTE_SYMBOLS = [bytes([b]) for b in range(256)]
MAX_RULES = 200_000  # byte-level rules (grammar rules plus one per terminal arc)


class LarkGrammar(NamedTuple):
    """A Lark grammar after Lark's own compilation, with its terminals as byte DFAs.

    Attributes:
        rules: `(head, body)` pairs; body symbols are rule or terminal names.
        terminals: name → byte DFA of the terminal's language.
        patterns: name → the terminal's Python regex (`Pattern.to_regexp()`).
        ignores: the `%ignore`d terminal names.
    """

    rules: list
    terminals: dict
    patterns: dict
    ignores: tuple


class _Builder(GrammarBuilder):
    """Lark's grammar builder with `%import` kept to Lark's bundled grammars and to
    files under `base_dir`."""

    def __init__(self, base_dir: str | None):
        super().__init__()
        self.base_dir = base_dir

    def do_import(self, dotted_path, base_path, aliases, base_mangle=None) -> None:
        name = ".".join(dotted_path)
        path = os.path.join(*dotted_path) + ".lark"
        if base_path is None or isinstance(base_path, tuple):  # bundled with Lark
            try:
                where, text = stdlib_loader(base_path, path)
            except OSError:
                raise ValueError(
                    f"%import {name}: no such grammar among Lark's bundled grammars "
                    "(common, lark, python, unicode); a relative import is written %import .name"
                ) from None
        else:
            if self.base_dir is None:
                raise ValueError(
                    f"%import .{name}: a relative import needs the grammar's folder; a grammar "
                    "given as a string has none (pass base_dir=, or read the grammar from a file)"
                )
            where = os.path.join(base_path, path)
            try:
                with open(where, encoding="utf-8") as f:
                    text = f.read()
            except OSError as e:
                raise ValueError(f"%import .{name}: cannot read {where}: {e.strerror}") from None
        sub = _Builder(self.base_dir)
        sub.load_grammar(text, where, _get_mangle("__".join(dotted_path), aliases, base_mangle))
        sub._remove_unused(map(_get_mangle("__".join(dotted_path), aliases, base_mangle), aliases))
        for symbol in sub._definitions:
            if symbol in self._definitions:
                raise ValueError(f"%import {name}: symbol {symbol} is already defined")
        self._definitions.update(sub._definitions)


def _lark_compile(text: str, base_dir: str | None):
    if not isinstance(text, str):
        raise TypeError(f"a Lark grammar must be a str, got {type(text).__name__}")
    if base_dir is not None and not isinstance(base_dir, (str, os.PathLike)):
        raise TypeError(f"base_dir must be a folder path, got {type(base_dir).__name__}")
    base = None if base_dir is None else os.path.abspath(os.fspath(base_dir))
    builder = _Builder(base)
    try:
        builder.load_grammar(text, os.path.join(base, "<grammar>") if base else "<grammar>")
        names = {str(name) for name in builder._definitions}
        if "start" not in names:
            raise ValueError("invalid Lark grammar: it must define a `start` rule")
        return builder.build().compile(["start"], set())
    except lark.exceptions.LarkError as e:
        raise ValueError(f"invalid Lark grammar: {e}") from None
    except KeyError as e:
        raise ValueError(f"invalid Lark grammar: undefined symbol {e}") from None
    except RecursionError:
        raise ValueError("invalid Lark grammar: nested too deeply") from None


def read_lark(text: str, base_dir: str | None = None, max_states: int = MAX_STATES) -> LarkGrammar:
    """The rules and terminal automata of the Lark grammar `text`.

    Raises:
        TypeError: `text` is not a str.
        ValueError: a grammar Lark rejects, no `start` rule, a bad `%import`, a
            terminal the regex compiler rejects (named), terminals over the shared
            state budget, more than `MAX_RULES` byte-level rules, or an empty language.
    """
    terminals, rules, ignores = _lark_compile(text, base_dir)
    pairs = [(r.origin.name, tuple(y.name for y in r.expansion)) for r in rules]
    dfas, patterns, budget, size = {}, {}, max_states, len(pairs)
    for t in terminals:
        pattern = t.pattern
        patterns[t.name] = pattern.to_regexp()
        try:
            if isinstance(pattern, lark.lexer.PatternStr) and not pattern.flags:
                dfa = literal_dfa(pattern.value.encode("utf-8"))
            else:
                dfa = compile_regex(patterns[t.name], max(budget, 1))
        except ValueError as e:
            raise ValueError(f"invalid Lark grammar: terminal {t.name}: {e}") from None
        budget -= dfa.n_states
        size += int((dfa.delta >= 0).sum()) + int(dfa.final.sum()) + 1
        if budget < 0 or size > MAX_RULES:
            raise ValueError(
                f"Lark grammar too large: its terminals need more than {max_states} automaton "
                f"states or {MAX_RULES} byte-level rules in all (at terminal {t.name})"
            )
        dfas[t.name] = dfa
    grammar = LarkGrammar(pairs, dfas, patterns, tuple(ignores))
    if "start" not in productive(grammar):
        raise ValueError("invalid Lark grammar: its language is empty (`start` derives no string)")
    return grammar


def productive(grammar: LarkGrammar) -> set:
    """The symbols that derive at least one string (least fixpoint over the rules)."""
    done = set(grammar.terminals)
    changed = True
    while changed:
        changed = False
        for head, body in grammar.rules:
            if head not in done and all(y in done for y in body):
                done.add(head)
                changed = True
    return done


def lark_to_cfg(text: str | LarkGrammar, semiring: Any = None, base_dir: str | None = None) -> CFG:
    """A byte-level CFG (terminals are one-byte `bytes`) for the Lark grammar `text`.

    Rule weights are uniform per head (`1/k` over a head's `k` rules) and each
    terminal's automaton state splits its weight evenly over its choices (outgoing
    bytes plus stopping), as in `WFSA.from_regex`.

    Raises:
        ValueError: see `read_lark`.
    """
    from genlm.grammar import CFG, Float

    semiring = Float if semiring is None else semiring
    g = text if isinstance(text, LarkGrammar) else read_lark(text, base_dir)
    one = semiring.one
    heads: dict[str, int] = {}
    for h, _ in g.rules:
        heads[h] = heads.get(h, 0) + 1
    w = _weight(semiring)
    cfg = CFG(R=semiring, S="$S", V=set())
    for h, body in g.rules:
        cfg.add(w(heads[h]), h, *body)
    if not g.ignores:
        cfg.add(one, "$S", "start")
        for name, dfa in g.terminals.items():
            _add_terminal(cfg, name, dfa, w)
        return cfg
    # An ignore block is "$I:k": its last token forbids the bytes stops[k] next
    # (k = 0: nothing forbidden, which the empty block is too).
    stop = {name: ignore_stop_bytes(g.patterns[name]) for name in g.ignores}
    stops = [frozenset()] + sorted({s for s in stop.values() if s}, key=sorted)
    block = [f"$I:{k}" for k in range(len(stops))]

    def after(name: str, k: int) -> str:
        """`name`'s terminal restricted to a first byte outside stops[k]."""
        return f"$T:{name}" if k == 0 else f"$T:{name}!{k}"

    per_block = w(len(g.ignores) + 1)
    cfg.add(per_block, block[0])
    for name in g.ignores:
        to = block[stops.index(stop[name])]
        for k, b in enumerate(block):
            cfg.add(per_block, to, b, after(name, k))
    for b in block:
        cfg.add(one, "$S", "start", b)
    for name, dfa in g.terminals.items():
        if name in g.ignores:  # as a rule's own terminal, if a rule names it
            cfg.add(one, name, f"$T:{name}")
        else:
            for k, b in enumerate(block):
                cfg.add(one, name, b, after(name, k))
        _add_terminal(cfg, f"$T:{name}", dfa, w)
        for k in range(1, len(stops)):
            _add_terminal(cfg, f"$T:{name}", dfa, w, first=(after(name, k), stops[k]))
    return cfg


def ignore_stop_bytes(pattern: str) -> frozenset:
    """The bytes that may not follow an occurrence of the `%ignore`d terminal `pattern`.

    Lark's Earley scanner takes an ignored terminal at position `i` as `re.match(
    pattern, text, i)`, not as any of its strings. For a pattern of single-character
    sets ending in an unbounded repeat of a set `C` (`/[ \\t]+/`, `/#[^\\n]*/`,
    `common.WS`) that match is the longest one, so an occurrence is followed by the
    end of the text or by a character outside `C`: the bytes returned are the first
    bytes of `C`'s characters. Other patterns (literals, whose match is the literal,
    and any other shape) forbid nothing; an occurrence of those may end wherever one
    of its strings does.
    """
    try:
        tree = parse_regex(pattern)
    except ValueError:
        return frozenset()
    items = tree[1] if tree[0] == "cat" else [tree]
    last = items[-1] if items else None
    if not (last and last[0] == "rep" and last[2] is None and last[3][0] == "set"):
        return frozenset()
    if any(x[0] != "set" for x in items[:-1]):
        return frozenset()
    return _lead_bytes(last[3][1])


def ignore_blocks_are_plain(g: LarkGrammar) -> bool:
    """Whether a run of ignored terminals read as `ignore_stop_bytes` has it is any
    string of `(i₁|…|i_k)+`, the engine's reading of a run: true when no ignored
    terminal may start with a byte that another one's repeat forbids after it, and
    each one that may follow itself absorbs its own repeats (`N N` is a string of
    `N`, as for `/[ ]+/` or `/#[^\\n]*/`)."""
    for n in g.ignores:
        banned = ignore_stop_bytes(g.patterns[n])
        if not banned:
            continue
        for m in g.ignores:
            firsts = set(np.flatnonzero(g.terminals[m].delta[0] >= 0).tolist())
            if firsts & banned and (m != n or not _absorbs_itself(g.patterns[n])):
                return False
    return True


def _absorbs_itself(pattern: str) -> bool:
    tree = parse_regex(pattern)
    items = tree[1] if tree[0] == "cat" else [tree]
    repeat = items[-1][3][1]
    return all(all(any(a <= x and y <= b for a, b in repeat) for x, y in it[1]) for it in items[:-1])


# UTF-8 lead bytes and the code points they start; 0xED's block holds the surrogates,
# which have no encoding.
_LEADS = (
    [(b, b, b) for b in range(0x80)]
    + [(b, max((b & 0x1F) << 6, 0x80), ((b & 0x1F) << 6) + 0x3F) for b in range(0xC2, 0xE0)]
    + [(b, max((b & 0x0F) << 12, 0x800), ((b & 0x0F) << 12) + 0xFFF) for b in range(0xE0, 0xF0)]
    + [(b, max((b & 0x07) << 18, 0x10000), min(((b & 0x07) << 18) + 0x3FFFF, 0x10FFFF)) for b in range(0xF0, 0xF5)]
)


def _count(ranges, lo: int, hi: int) -> int:
    return sum(max(0, min(hi, y) - max(lo, x) + 1) for x, y in ranges)


def _lead_bytes(ranges) -> frozenset:
    """The lead bytes all of whose characters are in `ranges`; empty (forbid
    nothing) when some lead byte starts characters both in and out of `ranges`,
    since one byte of look-ahead could not tell them apart."""
    out = set()
    for b, lo, hi in _LEADS:
        inside, size = _count(ranges, lo, hi), hi - lo + 1
        if b == 0xED:
            inside, size = inside - _count(ranges, 0xD800, 0xDFFF), size - 0x800
        if inside == size:
            out.add(b)
        elif inside:
            return frozenset()
    return frozenset(out)


def _weight(semiring):
    from genlm.grammar import Float

    if semiring is Float:
        return lambda k: 1.0 / k
    return lambda k: semiring.one


def _add_terminal(cfg: CFG, head: str, dfa: ByteDFA, w, first: tuple | None = None) -> None:
    """Rules deriving exactly the terminal's strings, with no empty rule unless the
    terminal matches "": a literal is one rule `head → b₁ … b_n`; otherwise state `q`
    rewrites to `b q'` for each arc `q -b→ q'`, and to `b` alone (weight times the
    stop weight of `q'`) when `q'` is final.

    With `first = (restricted, banned)`, only the rules of the start state are
    written, for the nonterminal `restricted`, without the arcs on a `banned` byte:
    the terminal's strings that do not begin with one (the states after the first
    byte are `head`'s, written by the call without `first`)."""
    has = dfa.delta >= 0
    k = (has.sum(axis=1) + dfa.final).tolist()
    src, byte = np.nonzero(has)
    dst = dfa.delta[src, byte].tolist()
    cfg.V.update(BYTE_SYMBOLS[b] for b in set(byte.tolist()))
    chain = len(src) == dfa.n_states - 1 and (src == np.arange(len(src))).all()
    if chain and dfa.final[-1] and dfa.final.sum() == 1:
        if first is None or int(byte[0]) not in first[1]:
            at = head if first is None else first[0]
            cfg.add(cfg.R.one, at, *(BYTE_SYMBOLS[b] for b in byte.tolist()))  # a chain
        return
    name = [f"$Q:{head}:{q}" for q in range(dfa.n_states)]
    name[0] = head
    live = has.any(axis=1).tolist()
    final = dfa.final.tolist()
    if final[0]:
        cfg.add(w(k[0]), head if first is None else first[0])
    for q, b, t in zip(src.tolist(), byte.tolist(), dst):
        if first is not None and (q != 0 or b in first[1]):
            continue
        at = name[q] if first is None else first[0]
        if live[t]:
            cfg.add(w(k[q]), at, BYTE_SYMBOLS[b], name[t])
        if final[t]:
            cfg.add(w(k[q]) * w(k[t]), at, BYTE_SYMBOLS[b])


__all__ = ["BYTE_SYMBOLS", "LarkGrammar", "MAX_RULES", "lark_to_cfg", "productive", "read_lark"]
