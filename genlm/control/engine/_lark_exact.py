"""When the compiled engine's language equals `BoolCFG.from_lark`'s, and the grammar
the engine then gets.

`BoolCFG.from_lark` is scannerless: a text is in the language iff *some* split of it
into terminals is derived by the rules. The engine lexes: from where a lexeme
starts, it reads bytes while some terminal the parser allows there can still
continue (maximal munch) and cuts the lexeme where none can; a lexeme matching
several terminals is passed on as all of them. The two agree whenever the lexer
never has a choice to make, which this module checks, soundly and conservatively:

**Rule.** For every terminal `A`, every context `S` in which `A` may start (the
terminals that may start at the beginning, `FIRST(start)`, or at a point of a rule
right after a terminal: `FIRST` of the rest of the rule, plus `FOLLOW` of its head
when the rest may be empty), and every string `w ∈ L(A)`: no byte `c` that may start
a terminal following `A` (`FIRST` bytes of `FOLLOW(A)`) continues `w` into a prefix
of a string of any terminal of `S`. No terminal matches the empty string.

Under the rule, for any split `t₁ … t_n` the parser accepts, the lexer reading `t₁`
cannot stop early (every prefix of `t₁` continues in `t₁`'s terminal) nor run past it
(the next byte starts `t₂`, a terminal that follows), so it cuts exactly at every
split point; conversely every lexing is a split. Hence the languages are equal,
and so are their prefix sets, i.e. every token mask. The check runs the product of
the terminal automata of each context (the lexer's own automaton) with a state
budget; a grammar over the budget is not proven, so it keeps the Earley path.

The engine grammar is printed from Lark's compiled rules (not the user's text):
terminals as `_guided_regex` rewrites of their Python regexes (so `\\d`, `.`,
classes and flags mean what they mean to `BoolCFG.from_lark`), and `%ignore` as
an explicit optional terminal `(i₁|i₂|…)+` before every terminal and at the end,
which is exactly the Earley path's reading of `%ignore`.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

from genlm.control.constraints.cfg import (
    LarkGrammar,
    ignore_blocks_are_plain,
    ignore_stop_bytes,
)
from genlm.control.constraints.regex.compile import compile_regex
from genlm.control.engine._guided_regex import engine_regex
from genlm.control.engine._lark_lower import (
    MAX_LOWERED_STATES,
    ByteClass,
    Lowering,
    byte_class,
    class_regex,
    factor,
    lowerable,
)

CHECK_BUDGET = 50_000  # product-automaton states explored before giving up (not proven)
MAX_ROUNDS = 24  # checks, each after lowering the terminals of one clash
IGNORE = "IGN"


class EngineLark(NamedTuple):
    """The engine's grammar text (None: none could be written) and, when the
    languages are not proven equal, why (None: exact)."""

    text: str | None
    inexact: str | None


def engine_lark(g: LarkGrammar, budget: int = CHECK_BUDGET) -> EngineLark:
    """The engine grammar for `g` and whether its language is provably `g`'s."""
    names = {t: f"T{i}" for i, t in enumerate(g.terminals)}
    used = {y for _, body in g.rules for y in body}
    if set(g.ignores) & used:
        return EngineLark(None, "a terminal is both %ignored and used in a rule")
    terms = {names[t]: engine_regex(g.patterns[t]) for t in g.terminals if t not in g.ignores}
    base = {names[t]: g.terminals[t] for t in g.terminals if t not in g.ignores}
    if g.ignores:
        union = "|".join(f"(?:{g.patterns[t]})" for t in g.ignores)
        terms[IGNORE] = engine_regex(f"(?:{union})+")
        try:
            base[IGNORE] = compile_regex(f"(?:{union})+")
        except ValueError as e:
            return EngineLark(None, f"the %ignore terminals: {e}")
    missing = [n for n, text in terms.items() if text is None]
    if missing:
        return EngineLark(None, f"terminal {missing[0]} has no exact engine regex")
    rules = _rules(g, names)
    dfas = {y: base[_engine_name(y)] for _, body in rules for y in body if _is_terminal(y)}
    # An %ignore that runs to the end of its repeat (see `ignore_stop_bytes`) is the
    # engine's maximal munch only while it stays one lexeme: lowered to one-byte rules
    # it could end anywhere, a larger language than ours.
    greedy = any(ignore_stop_bytes(g.patterns[t]) for t in g.ignores)
    if greedy and not ignore_blocks_are_plain(g):
        return EngineLark(None, "a run of %ignore terminals is not one engine lexeme: one may begin "
                          "with a byte that another's repeat forbids after it")
    rules, reason = _lower_until_exact(rules, dfas, terms, budget, greedy)
    if reason is not None:  # the user's terminal names
        back = {n: repr(t) for t, n in names.items()} | {IGNORE: "%ignore"}
        reason = re.sub(
            r"terminal ([A-Z]+[0-9]*)\b",
            lambda m: "terminal " + back.get(m.group(1), "(a lowered byte)"),
            reason,
        )
    return EngineLark(_text(rules, terms), reason)


def _is_terminal(y: str) -> bool:
    return y[0].isupper()


def _engine_name(y: str) -> str:
    """The engine's terminal for an occurrence `T<i>_<k>` (`T<i>`), `IGN_*` (`IGN`) or a
    byte class `C<k>` (itself)."""
    return IGNORE if y.startswith(IGNORE) else y.split("_")[0]


def _lower_until_exact(
    rules: list, dfas: dict, terms: dict, budget: int, keep_ignore: bool = False
) -> tuple[list, str | None]:
    """Check the lexing rule; while it fails on terminals that can be lowered (see
    `_lark_lower`), lower them and check again. Returns the engine's rules (with
    `dfas` and `terms` updated to its terminals) and why the lexing may still
    differ (None: it cannot)."""
    lowering = Lowering()
    for _ in range(MAX_ROUNDS):
        reason, complete, continuing = _lexing_differs(rules, dfas, budget)
        if reason is None:
            return rules, None
        culprits = {t for t in continuing if not isinstance(dfas[t], ByteClass)}
        if not culprits:  # only one-byte terminals continue: lower the one that completes
            culprits = {t for t in complete if not isinstance(dfas[t], ByteClass)}
        if not culprits:
            return rules, reason
        kept = [t for t in sorted(culprits) if keep_ignore and _engine_name(t) == IGNORE]
        if kept:
            return rules, f"{reason}; an %ignore that runs to the end of its repeat is not lowered"
        stuck = [t for t in sorted(culprits) if not _can_lower(t, dfas, lowering)]
        if stuck:
            why = "reads non-ASCII bytes" if not lowerable(dfas[stuck[0]]) else "is over the lowering budget"
            return rules, f"{reason}; terminal {_engine_name(stuck[0])} {why}, so it is not lowered"
        for t in sorted(culprits):
            head, lowered = lowering.lower(t, dfas.pop(t))
            rules = [(h, tuple(head if y == t else y for y in body)) for h, body in rules]
            rules += lowered
        for members, c in lowering.classes.items():
            if c not in dfas:
                dfas[c], terms[c] = byte_class(members), class_regex(members)
        still = {_engine_name(y) for y in dfas}
        for name in [n for n in terms if n not in still]:
            del terms[name]
    return rules, f"the lexing check still fails after lowering terminals {MAX_ROUNDS} times"


def _can_lower(t: str, dfas: dict, lowering: Lowering) -> bool:
    dfa = dfas[t]
    return lowerable(dfa) and lowering.states + dfa.n_states <= MAX_LOWERED_STATES


def _rules(g: LarkGrammar, names: dict) -> list[tuple[str, tuple]]:
    """The grammar the engine gets, as `(head, body)`: rules `r<i>`, and each
    occurrence of a terminal `T<i>` in a rule as its own terminal `T<i>_<k>`; with
    `%ignore`, each occurrence is read through `wt<i>_<k>: T<i>_<k> | IGN_T<i>_<k>
    T<i>_<k>`, and `start` may end with `IGN_END`. The occurrences of `T<i>` are one
    terminal to the engine (as are the `IGN_*`, `IGN`); they are told apart here so
    that FOLLOW keeps what each occurrence precedes."""
    lark_rules = factor(g.rules)
    rule_names = {h: f"r{i}" for i, h in enumerate(dict.fromkeys(h for h, _ in lark_rules))}
    out = [("start", (rule_names["start"],))]
    if g.ignores:
        out.append(("start", (rule_names["start"], f"{IGNORE}_END")))
    wrappers: list = []

    def sym(y: str) -> str:
        if y in rule_names:
            return rule_names[y]
        n = f"{names[y]}_{len(wrappers)}"
        wrappers.append(n)
        if not g.ignores:
            return n
        out.extend([(f"w{n.lower()}", (n,)), (f"w{n.lower()}", (f"{IGNORE}_{n}", n))])
        return f"w{n.lower()}"

    out += [(rule_names[h], tuple(sym(y) for y in body)) for h, body in lark_rules]
    return out


def _text(rules: list, terms: dict) -> str:
    heads: dict[str, list] = {}
    for h, body in rules:
        heads.setdefault(h, []).append(
            " ".join(_engine_name(y) if _is_terminal(y) else y for y in body)
        )
    lines = []
    for h, alts in heads.items():
        nonempty = list(dict.fromkeys(a for a in alts if a))
        empty = len(nonempty) < len(alts)
        lines.append(
            f"{h}: " + " | ".join(nonempty) + (" |" if empty and nonempty else '""' * empty)
        )
    lines += [f"{name}: /{regex}/" for name, regex in terms.items()]
    return "\n".join(lines) + "\n"


def _starts(rest: tuple, head: str, first: dict, follow: dict, nullable: set) -> set:
    """The terminals that may start where `rest` (the end of a rule for `head`) begins."""
    out: set = set()
    for y in rest:
        out |= first[y]
        if y not in nullable:
            return out
    return out | {u for u in follow[head] if u is not None}


def _first_follow(rules: list, terminals: set) -> tuple[dict, dict, set]:
    """FIRST of every symbol, FOLLOW of every symbol (terminal sets; `None` in
    FOLLOW stands for the end of the text) and the nullable nonterminals."""
    nullable: set = set()
    first: dict = {t: {t} for t in terminals}
    follow: dict = {}
    for h, body in rules:
        first.setdefault(h, set())
        follow.setdefault(h, set())
        for y in body:
            follow.setdefault(y, set())
    follow["start"].add(None)
    changed = True
    while changed:
        changed = False
        for h, body in rules:
            if h not in nullable and all(y in nullable for y in body):
                nullable.add(h)
                changed = True
            for i, y in enumerate(body):
                if not all(z in nullable for z in body[:i]):
                    break
                if not first[y] <= first[h]:
                    first[h] |= first[y]
                    changed = True
            trail = set(follow[h])  # what follows body[i], scanning right to left
            for y in reversed(body):
                if not trail <= follow[y]:
                    follow[y] |= trail
                    changed = True
                trail = first[y] | trail if y in nullable else set(first[y])
    return first, follow, nullable


def _lexing_differs(rules: list, dfas: dict, budget: int) -> tuple[str | None, set, set]:
    """Why maximal munch may lex differently from scannerless parsing (None: it
    cannot), with the terminals involved: those that complete where the lexer
    would not stop, and those that continue there."""
    empty = {name for name, dfa in dfas.items() if dfa.final[0]}
    if empty:
        return f"terminal {_engine_name(min(empty))} matches the empty string", empty, set()
    first, follow, nullable = _first_follow(rules, set(dfas))
    start_bytes = {t: set(np.flatnonzero(d.delta[0] >= 0).tolist()) for t, d in dfas.items()}
    after = {
        t: set().union(*(start_bytes[u] for u in follow.get(t, ()) if u is not None)) for t in dfas
    }
    todo = [frozenset(first["start"])]
    contexts, spent = set(todo), 0
    found: str | None = None
    complete: set = set()
    continuing: set = set()
    while todo:  # contexts: the terminals the parser may allow where a lexeme starts
        ctx = todo.pop()
        reason, explored, ends, clash = _product(sorted(ctx), dfas, after, budget - spent)
        found = found or reason
        complete |= clash[0]
        continuing |= clash[1]
        spent += explored
        if spent >= budget:
            return found, complete, continuing
        for done in ends:  # a lexeme matching the terminals `done` ends: what may follow
            nxt = frozenset(u for t in done for u in follow.get(t, ()) if u is not None)
            if nxt and nxt not in contexts:
                contexts.add(nxt)
                todo.append(nxt)
    return found, complete, continuing


def _arc_lists(dfa) -> list:
    """Per state of `dfa`, its arcs as `[(byte, next state)]`."""
    src, byte = np.nonzero(dfa.delta >= 0)
    out: list = [[] for _ in range(dfa.n_states)]
    for q, b, t in zip(src.tolist(), byte.tolist(), dfa.delta[src, byte].tolist()):
        out[q].append((b, t))
    return out


def _product(ctx: list, dfas: dict, after: dict, budget: int) -> tuple[str | None, int, set, tuple]:
    """Explore the lexer automaton of the terminals `ctx`; a state where terminal `A`
    is complete and some byte both continues a lexeme and may start what follows `A`
    is a difference. Returns `(the first difference's reason, states explored, the
    sets of terminals that complete together, (terminals completing, terminals
    continuing) at every difference)`; the budget ends the exploration."""
    start = frozenset((t, 0) for t in ctx)
    seen, todo, ends = {start}, [start], set()
    reason: str | None = None
    complete: set = set()
    continuing: set = set()
    arcs = {t: _arc_lists(dfas[t]) for t in ctx}
    while todo:
        state = todo.pop()
        moves: dict[int, set] = {}
        for t, q in state:
            for b, r in arcs[t][q]:
                if b in moves:
                    moves[b].add((t, r))
                else:
                    moves[b] = {(t, r)}
        done = frozenset(t for t, q in state if dfas[t].final[q])
        if done:
            ends.add(done)
        for t in done:
            clash = after[t].intersection(moves)
            if clash:
                complete.add(t)
                continuing.update(u for b in clash for u, _ in moves[b])
                reason = reason or (
                    f"terminal {_engine_name(t)} may be followed by a terminal starting with byte "
                    f"{min(clash):#04x}, which also continues a lexeme (maximal munch "
                    "would not stop there)"
                )
        for nxt in map(frozenset, moves.values()):
            if nxt not in seen:
                if len(seen) >= budget:
                    reason = reason or "the lexing check ran out of its state budget"
                    return reason, len(seen), ends, (complete, continuing)
                seen.add(nxt)
                todo.append(nxt)
    return reason, len(seen), ends, (complete, continuing)


__all__ = ["CHECK_BUDGET", "EngineLark", "engine_lark"]
