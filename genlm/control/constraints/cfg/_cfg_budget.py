"""Fewest bytes from an Earley chart to a complete document, and the token bound of
a coerced grammar built on it (`fast_paths.TokensToFinish`).

The parser runs the prefix grammar of `S · EOS`, so a document is complete once the
grammar's EOS terminal is read. Per grammar symbol `X`:

    m(X) = fewest bytes of a string X derives          (EOS reads 0 bytes)
    e(X) = fewest bytes of a string X derives that holds EOS (inf: none)

and the same for every rule remainder `Ys` the parser interns. In column `j` of a
chart, `C(j, X)` is the fewest bytes after an `X` started at `j` completes, up to
EOS: over the items `(I, Y, [X | Ys])` waiting for `X` in column `j`,

    C(j, X) = min(e(Ys), m(Ys) + C(I, Y)),   C(0, S) = inf (nothing follows the root)

(items predicted in column `j` itself make this a shortest path within the column).
After the last column `k`, the fewest bytes to a complete document is the minimum of
`min(e(Ys), m(Ys) + C(I, X))` over its items `(I, X, Ys)`. A prefix nonterminal may
derive a cut-off string, which only lowers `m`: the count never exceeds the truth,
so a token bound made from it prunes only tokens that cannot finish: any completion
after a token `y` reads at least `L(ctx·y)` bytes, at most `longest` bytes a token.
Only the bytes of the grammar's terminals ever occur in a document, so a token with
any other byte is in no completion: `longest` is that of the tokens made of
terminal bytes only (`terminal_bytes`), on a GPT-2-like vocabulary a word's length
for a grammar without free text rather than a table border's.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence

import numpy as np
from genlm.grammar.cfglm import EOS as GRAMMAR_EOS

from genlm.control._state_cache import RowCache
from genlm.control.horizon import tokens_left
from genlm.control.potential.coerce import Coerced

INF = float("inf")


def _sum_lengths(body: Sequence[Any], m: dict, e: dict) -> tuple[float, float]:
    """`(m(body), e(body))` from the symbols' values."""
    total = sum(m[y] for y in body)
    with_eos = min((total - m[y] + e[y] for y in body), default=INF)
    return float(total), float(with_eos)


def symbol_lengths(cfg: Any) -> tuple[dict, dict]:
    """`(m, e)` per symbol of `cfg` (terminals: one byte; the EOS terminal: 0 bytes
    and holds EOS), by relaxing every rule until nothing changes."""
    m = {v: (0.0 if v == GRAMMAR_EOS else 1.0) for v in cfg.V}
    e = {v: (0.0 if v == GRAMMAR_EOS else INF) for v in cfg.V}
    for x in cfg.N:
        m.setdefault(x, INF)
        e.setdefault(x, INF)
    changed = True
    while changed:
        changed = False
        for r in cfg:
            mb, eb = _sum_lengths(r.body, m, e)
            if mb < m[r.head]:
                m[r.head], changed = mb, True
            if eb < e[r.head]:
                e[r.head], changed = eb, True
    return m, e


def terminal_bytes(cfg: Any) -> frozenset | None:
    """The bytes the grammar's terminals read (None: a terminal that is not one byte,
    so every byte counts)."""
    out = set()
    for v in cfg.V:
        if v == GRAMMAR_EOS:
            continue
        if isinstance(v, (bytes, bytearray)) and len(v) == 1:
            out.add(v[0])
        elif isinstance(v, int) and 0 <= v < 256:
            out.add(v)
        else:
            return None
    return frozenset(out)


def byte_classes(cfg: Any) -> dict[int, int] | None:
    """Per terminal byte, the least byte interchangeable with it (None: a terminal
    that is not one byte).

    A place is where a byte is read: a rule's head, the rest of its body and its
    weight, either for the byte itself in the body, or, for a nonterminal `P` whose
    only rule is `P → byte`, for `P` in the body (a grammar from Lark reads each byte
    through such a `P`). Bytes `a` and `b` are interchangeable when they have the
    same places. Then changing one occurrence of `a` in a string to `b` maps its
    derivations one to one onto those of the new string (the occurrence is read at
    one place, which reads `b` as well), so both strings have the same prefixes,
    completions and fewest bytes to a complete document.
    """
    rules: dict = {}
    for r in cfg:
        rules.setdefault(r.head, []).append(r)

    def one_byte(y: Any) -> bool:
        return isinstance(y, (bytes, bytearray)) and len(y) == 1

    reads = {}  # P -> its byte, for P whose only rule is `P → byte`
    for head, rs in rules.items():
        if len(rs) == 1 and len(rs[0].body) == 1 and one_byte(rs[0].body[0]):
            reads[head] = (rs[0].body[0][0], str(rs[0].w))
    places: dict[int, set] = {}
    for r in cfg:
        if r.head in reads:
            continue
        for i, y in enumerate(r.body):
            if y == GRAMMAR_EOS:
                continue
            rest = (r.head, r.body[:i] + (None,) + r.body[i + 1 :], str(r.w))
            if y in reads:
                byte, w = reads[y]
                places.setdefault(byte, set()).add(("via", w) + rest)
            elif one_byte(y):
                places.setdefault(y[0], set()).add(("at",) + rest)
            elif y not in cfg.N:
                return None
    least: dict = {}
    return {b: least.setdefault(frozenset(places[b]), b) for b in sorted(places)}


def _within(data: Any, alphabet: frozenset | None) -> bool:
    return alphabet is None or all(b in alphabet for b in bytes(data))


class ChartDistance:
    """`fewest(chart)`: the fewest bytes from an Earley chart of `model` to a complete
    document (inf: none). Per-column tables are kept for the last `size` columns
    (each keyed by the column object, which the table holds)."""

    def __init__(self, model: Any, size: int = 8192):
        self.model = model
        m, e = symbol_lengths(model.cfg)
        codes = model.intern_Ys
        self.rest_m = np.full(len(codes), INF)
        self.rest_e = np.full(len(codes), INF)
        for ys, code in codes.items():
            self.rest_m[code], self.rest_e[code] = _sum_lengths(ys, m, e)
        self.start = model.cfg.S
        self.size = size
        self._tables: OrderedDict[int, tuple[Any, dict]] = OrderedDict()

    def _finish(self, chart: Sequence[Any], item: tuple, own: dict) -> float:
        """Fewest bytes to EOS from an item `(I, X, Ys)` (`Ys` still to read) in the last
        column of `chart`, `own` the C of that column (earlier columns' tables are already kept)."""
        i, x, ys = item
        if i == len(chart) - 1:
            after = own.get(x, INF)
        else:
            hit = self._cached(chart[i])
            after = (hit if hit is not None else self.table(chart[: i + 1], i)).get(x, INF)
        return min(self.rest_e[ys], self.rest_m[ys] + after)

    def _cached(self, col: Any) -> dict | None:
        hit = self._tables.get(id(col))
        if hit is None or hit[0] is not col:
            return None
        self._tables.move_to_end(id(col))
        return hit[1]

    def table(self, chart: Sequence[Any], j: int) -> dict:
        """`C(j, ·)` over the nonterminals column `j` of `chart` waits for; the
        missing columns before it first, oldest first."""
        first = j + 1
        while first > 0 and self._cached(chart[first - 1]) is None:
            first -= 1
        for i in range(first, j + 1):
            self._tables[id(chart[i])] = (chart[i], self._column(chart[: i + 1]))
        out = self._tables[id(chart[j])][1]
        while len(self._tables) > max(self.size, j + 1):
            self._tables.popitem(last=False)
        return out

    def _column(self, cut: Sequence[Any]) -> dict:
        own: dict = {}
        rest = self.model.rest_Ys
        items = [(x, it) for x, its in cut[-1].waiting_for.items() for it in its]
        changed = True
        while changed:  # items predicted in this column read `own` itself
            changed = False
            for x, (i, y, ys) in items:  # the item's remainder after `x`
                cost = self._finish(cut, (i, y, rest[ys]), own)
                if cost < own.get(x, INF):
                    own[x], changed = cost, True
        return own

    def fewest(self, chart: Sequence[Any]) -> float:
        k = len(chart) - 1
        own = self.table(chart, k)
        items = [it for its in chart[k].waiting_for.values() for it in its]
        return min((self._finish(chart, it, own) for it in items), default=INF)


class CoercedCFG(Coerced):
    """`Coerced` for a (Boolean or weighted) grammar, with a token bound when `f`
    joins bytes (`fast_paths.TokensToFinish`): per next token `y`,
    `⌈L(ctx·y) / longest⌉`, `L` the chart's fewest bytes to a complete document
    (`ChartDistance`) after `y`'s bytes, read off one walk of the token trie per
    context (the live nodes only, one Earley column each), kept per context.

    The walk costs a few `logw_next`s, so it is taken only where the budget may bind
    (`_cheap_row`); elsewhere every token gets `⌈max(0, L(ctx) − |y|) / longest⌉`,
    which is below `⌈L(ctx·y) / longest⌉` and prunes nothing there."""

    budget_cache_size = 256  # contexts whose per-token counts are kept
    budget_walk_within = 4  # tokens from the horizon where the trie is walked

    @property
    def batch_tokens_to_finish(self) -> Any:  # type: ignore[override]
        return self._tokens_to_finish if self.homomorphic and self.trie is not None else None

    def _budget_parts(self) -> tuple[ChartDistance, RowCache, float]:
        parts = self.__dict__.get("_budget")
        if parts is None:
            alphabet = terminal_bytes(self.potential.model.cfg)
            longest = max(
                max(
                    (
                        len(b)
                        for b in map(self._map, ([t] for t in self.vocab))
                        if _within(b, alphabet)
                    ),
                    default=1,
                ),
                1,
            )
            rows = RowCache(self._bytes_after, self.budget_cache_size)
            parts = self._budget = (ChartDistance(self.potential.model), rows, float(longest))
        return parts

    def _class_trie(self) -> tuple[list, np.ndarray]:
        """The tokens' bytes with each byte replaced by its class's least byte
        (`byte_classes`), as a trie: children per node, and each token's node
        (-1: a byte no terminal reads, or no classes: the token trie itself)."""
        hit = self.__dict__.get("_classes")
        if hit is not None:
            return hit
        classes = byte_classes(self.potential.model.cfg)
        if classes is None:
            trie = self.trie
            hit = (trie.children, np.asarray(self._leaf, dtype=np.int64))
        else:
            children: list[dict] = [{}]
            leaf = np.full(len(self.vocab), -1, dtype=np.int64)
            for k, t in enumerate(self.vocab):
                data = bytes(self._map([t]))
                if any(b not in classes for b in data):
                    continue
                node = 0
                for b in data:
                    kid = children[node].get(classes[b])
                    if kid is None:
                        kid = children[node][classes[b]] = len(children)
                        children.append({})
                    node = kid
                leaf[k] = node
            hit = (children, leaf)
        self._classes = hit
        return hit

    def _bytes_after(self, text: bytes) -> np.ndarray:
        """Per token, `L(text·y)` (inf: dead); then EOS, 0 where `text` is complete.
        One Earley column per live node of the class trie (`_class_trie`): tokens
        whose bytes are interchangeable place by place share their count."""
        grammar = self.potential
        distance = self._budget_parts()[0]
        children, leaf = self._class_trie()
        out = np.full(len(self.vocab_eos), INF)
        start = grammar.chart(list(text))
        if start is None:
            return out
        charts, stack = {0: start}, [0]
        while stack:  # depth first over the live nodes
            node = stack.pop()
            for symbol, kid in children[node].items():
                chart = grammar._extend(charts[node], symbol)
                if chart is not None:
                    charts[kid] = chart
                    stack.append(kid)
        fewest: dict[int, float] = {}
        for k, node in enumerate(leaf.tolist()):
            if node in charts:
                if node not in fewest:
                    fewest[node] = distance.fewest(charts[node])
                out[k] = fewest[node]
        done = grammar._prefix_of_chart(grammar._extend(start, GRAMMAR_EOS)) > -INF
        out[-1] = 0.0 if done else INF
        return out

    def _cheap_row(self, context: Sequence[Any], text: bytes) -> np.ndarray | None:
        """`⌈max(0, L(text) − |y|) / longest⌉` per token `y` (EOS last), or None where
        the budget may bind: within `budget_walk_within` tokens of the horizon, or
        where `L(text)` comes within that many longest tokens of the tokens left."""
        grammar = self.potential
        distance, _, longest = self._budget_parts()
        chart = grammar.chart(list(text))
        if chart is None:
            return np.full(len(self.vocab_eos), INF)
        r = tokens_left(context)
        fewest = distance.fewest(chart)
        within = self.budget_walk_within
        if r is None or r <= within or fewest > (r - within) * longest:
            return None
        lengths = self.__dict__.get("_token_bytes")
        if lengths is None:
            lengths = self._token_bytes = np.array([len(self._map([t])) for t in self.vocab], float)
        out = np.empty(len(self.vocab_eos))
        out[:-1] = np.ceil(np.maximum(fewest - lengths, 0.0) / longest)
        out[-1] = 0.0 if fewest == 0 and self._complete_chart(chart) else INF
        return out

    def _complete_chart(self, chart: Any) -> bool:
        grammar = self.potential
        return grammar._prefix_of_chart(grammar._extend(chart, GRAMMAR_EOS)) > -INF

    async def _tokens_to_finish(self, contexts: Sequence[Sequence[Any]]) -> np.ndarray:
        _, rows, longest = self._budget_parts()
        out = np.empty((len(contexts), len(self.vocab_eos)))
        for k, context in enumerate(contexts):
            text = bytes(self._map(list(context)))
            cheap = self._cheap_row(context, text)
            if cheap is not None:
                out[k] = cheap
                continue
            after = rows.get(text)
            out[k, :-1] = np.ceil(after[:-1] / longest)
            out[k, -1] = after[-1]
        return out


__all__ = ["ChartDistance", "CoercedCFG", "symbol_lengths"]
