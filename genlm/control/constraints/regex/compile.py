"""Regular expressions compiled to byte-level deterministic automata, in bounded time.

The pattern is read by `syntax` into character sets, concatenations,
alternations and repeats (Python's own parser; semantics of
`re.fullmatch(pattern, text, flags=re.ASCII)`: `\\d \\w \\s` are ASCII, `.` is any
character but LF). Each character set becomes a few byte-range paths over its UTF-8
encodings (suffixes shared), so a Thompson NFA over bytes is linear in the pattern's
expanded size, and the subset construction over byte classes gives the DFA.

Cost is bounded before and during construction by one budget, `max_states`
(default `MAX_STATES`): the expanded size (character positions after unrolling
counted repeats) is checked on the parse tree before anything is allocated, the NFA
may hold at most `NFA_FACTOR * max_states` states, and the subset construction
stops with a `ValueError` as soon as the DFA would exceed `max_states` states.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from genlm.control.constraints.regex.syntax import expanded_size, parse_regex, short_pattern

MAX_STATES = 1 << 15  # default budget: DFA states and expanded character positions
NFA_FACTOR = 16  # NFA states allowed per unit of budget (a set is a few byte states)
_BREAKS = (0x7F, 0x7FF, 0xFFFF)  # the last code point of each UTF-8 length


def utf8_length(lead: int) -> int:
    """The length of the UTF-8 encoding that starts with byte `lead`."""
    if lead < 0x80:
        return 1
    if lead < 0xE0:
        return 2
    if lead < 0xF0:
        return 3
    return 4


_LEADS = list(range(0x00, 0x80)) + list(range(0xC2, 0xF5))
_SECOND = {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F), 0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}


def utf8_next_bytes(prefix: bytes) -> range:
    """Bytes that extend `prefix` (a proper prefix of some UTF-8 encoding)."""
    if not prefix:
        return _LEADS  # type: ignore[return-value]
    if len(prefix) == 1:
        lo, hi = _SECOND.get(prefix[0], (0x80, 0xBF))
        return range(lo, hi + 1)
    return range(0x80, 0xC0)


def utf8_sequences(ranges) -> list[tuple]:
    """The UTF-8 encodings of the scalar values in `ranges`, as byte-range sequences:
    a string of bytes encodes a value in `ranges` iff it matches one sequence
    `((lo₁, hi₁), ..., (lo_k, hi_k))` byte by byte. Surrogates are left out."""
    todo, out = [], []
    for a, b in ranges:
        for lo, hi in ((a, min(b, 0xD7FF)), (max(a, 0xE000), b)):
            for edge in _BREAKS:  # split where the encoded length changes
                if lo <= edge < hi:
                    todo.append((lo, edge))
                    lo = edge + 1
            if lo <= hi:
                todo.append((lo, hi))
    while todo:
        a, b = todo.pop()
        n = len(chr(a).encode("utf-8"))
        for i in range(1, n):  # split until every trailing byte spans its full range
            m = (1 << (6 * i)) - 1
            if a & ~m != b & ~m:
                if a & m:
                    todo += [(a, a | m), ((a | m) + 1, b)]
                    break
                if b & m != m:
                    todo += [(a, (b & ~m) - 1), (b & ~m, b)]
                    break
        else:
            ea, eb = chr(a).encode("utf-8"), chr(b).encode("utf-8")
            out.append(tuple(zip(ea, eb)))
    return out


class _NFA:
    """A Thompson NFA over bytes: `eps[s]` ε-targets, `arcs[s]` `(lo, hi, t)` byte ranges."""

    def __init__(self, pattern: str, limit: int):
        self.pattern, self.limit = pattern, limit
        self.eps: list[list[int]] = []
        self.arcs: list[list[tuple]] = []
        self._seqs: dict = {}

    def new(self) -> int:
        if len(self.eps) >= self.limit:
            raise ValueError(
                f"regex {short_pattern(self.pattern)} needs more than {self.limit} automaton states "
                "to build (raise max_states= to allow it)"
            )
        self.eps.append([])
        self.arcs.append([])
        return len(self.eps) - 1

    def build(self, node: Any, start: int) -> int:
        """Add `node` reading from `start`; returns the state where it ends. Only fresh
        states get back edges, so `start` may already have other arcs."""
        kind = node[0]
        if kind == "set":
            return self._set(node[1], start)
        if kind == "cat":
            for sub in node[1]:
                start = self.build(sub, start)
            return start
        if kind == "alt":
            end = self.new()
            for sub in node[1]:
                self.eps[self.build(sub, start)].append(end)
            return end
        _, lo, hi, sub = node
        for _ in range(lo):
            start = self.build(sub, start)
        if hi is None:
            loop = self.new()
            self.eps[start].append(loop)
            self.eps[self.build(sub, loop)].append(loop)
            return loop
        end = self.new()
        for _ in range(hi - lo):
            self.eps[start].append(end)
            start = self.build(sub, start)
        self.eps[start].append(end)
        return end

    def _set(self, ranges: tuple, start: int) -> int:
        seqs = self._seqs.get(ranges)
        if seqs is None:
            seqs = self._seqs[ranges] = utf8_sequences(ranges)
        end = self.new()
        suffix: dict = {(): end}  # a byte-range suffix -> the state that reads it into `end`
        for seq in seqs:
            for i in range(len(seq) - 1, 0, -1):
                rest = seq[i:]
                if rest not in suffix:
                    q = self.new()
                    self.arcs[q].append((*rest[0], suffix[rest[1:]]))
                    suffix[rest] = q
            self.arcs[start].append((*seq[0], suffix[seq[1:]]))
        return end


@dataclass(frozen=True, eq=False)
class ByteDFA:
    """A trimmed deterministic automaton over bytes with initial state 0.

    Attributes:
        delta: `(n, 256)` int32, `delta[q, b]` the state after byte `b` (-1: none).
        final: `(n,)` bools.
    Every state can reach a final state.
    """

    delta: np.ndarray
    final: np.ndarray

    @property
    def n_states(self) -> int:
        return len(self.final)


def _byte_classes(nfa: _NFA) -> tuple[np.ndarray, list]:
    """`class_of[b]` for the coarsest partition of bytes that no arc range splits, and
    per NFA state, `{class: [targets]}`."""
    cuts = np.zeros(257, dtype=bool)
    for arcs in nfa.arcs:
        for lo, hi, _ in arcs:
            cuts[lo] = cuts[hi + 1] = True
    class_of = np.cumsum(cuts[:256]) - 1
    class_of -= class_of.min()
    cls = class_of.tolist()
    table = []
    for arcs in nfa.arcs:
        row: dict = {}
        for lo, hi, t in arcs:
            for c in range(cls[lo], cls[hi] + 1):
                if c in row:
                    row[c].append(t)
                else:
                    row[c] = [t]
        table.append(row)
    return class_of, table


def _closure(nfa: _NFA, seeds, accept: int) -> frozenset:
    """The ε-closure of `seeds`, kept to the states that matter: those with byte arcs,
    and `accept`."""
    seen, stack = set(seeds), list(seeds)
    while stack:
        for t in nfa.eps[stack.pop()]:
            if t not in seen:
                seen.add(t)
                stack.append(t)
    return frozenset(s for s in seen if nfa.arcs[s] or s == accept)


def _subsets(nfa: _NFA, accept: int, max_states: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Subset construction: `(delta over byte classes, final, class_of)`, untrimmed."""
    class_of, table = _byte_classes(nfa)
    n_classes = int(class_of.max()) + 1
    first = _closure(nfa, [0], accept)
    index, order, rows = {first: 0}, [first], []
    target: dict = {}  # NFA target (an int, or a frozenset of several) -> DFA state
    for states in order:  # `order` grows while it is read
        if len(states) == 1:
            (only,) = states
            acc = table[only]
        else:
            acc = {}
            for s in states:
                for c, ts in table[s].items():
                    acc.setdefault(c, []).extend(ts)
        row = [-1] * n_classes
        for c, ts in acc.items():
            key = ts[0] if len(ts) == 1 else frozenset(ts)
            j = target.get(key)
            if j is None:
                nxt = _closure(nfa, ts, accept)
                j = index.get(nxt)
                if j is None:
                    if len(order) >= max_states:
                        raise ValueError(
                            f"regex {short_pattern(nfa.pattern)} needs more than {max_states} DFA "
                            "states (state budget max_states; raise it to allow this pattern)"
                        )
                    j = index[nxt] = len(order)
                    order.append(nxt)
                target[key] = j
            row[c] = j
        rows.append(row)
    final = np.array([accept in s for s in order], dtype=bool)
    return np.array(rows, dtype=np.int32).reshape(len(order), n_classes), final, class_of


def _trim(delta: np.ndarray, final: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """`(delta, final)` restricted to the states that reach a final state (None: state
    0 does not). `delta` may be over byte classes."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order

    n = len(final)
    src, byte = np.nonzero(delta >= 0)
    dst = delta[src, byte]
    # Reverse edges, plus a virtual node n with an edge to every final state.
    rs = np.concatenate([dst, np.full(int(final.sum()), n)])
    rd = np.concatenate([src, np.flatnonzero(final)])
    graph = csr_matrix((np.ones(len(rs), dtype=np.int8), (rs, rd)), shape=(n + 1, n + 1))
    live = np.zeros(n + 1, dtype=bool)
    live[breadth_first_order(graph, n, directed=True, return_predecessors=False)] = True
    live = live[:n]
    if not live[0]:
        return None
    remap = np.full(n + 1, -1, dtype=np.int32)
    remap[np.flatnonzero(live)] = np.arange(int(live.sum()), dtype=np.int32)
    return remap[delta[live]], final[live]  # -1 maps to remap[-1] = -1


_META = frozenset(".^$*+?{}[]\\|()#")


def compile_regex(pattern: str, max_states: int = MAX_STATES) -> ByteDFA:
    """The trimmed byte DFA of `re.fullmatch(pattern, text, flags=re.ASCII)` over the
    UTF-8 bytes of `text`.

    Raises:
        TypeError: `pattern` is not a str.
        ValueError: invalid or refused syntax (see `regex.syntax`), an empty
            language, or a pattern whose expanded size, NFA or DFA exceeds the
            budget `max_states` (checked before allocating).
    """
    if not isinstance(max_states, int) or isinstance(max_states, bool) or max_states < 1:
        raise ValueError(f"max_states must be a positive integer, got {max_states!r}")
    if isinstance(pattern, str) and not _META.intersection(pattern) and len(pattern) < max_states:
        try:
            return literal_dfa(pattern.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate: no byte string; the parser says so
            pass
    tree = parse_regex(pattern)
    size = expanded_size(tree, max_states)
    if size > max_states:
        raise ValueError(
            f"regex {short_pattern(pattern)} expands to more than {max_states} character positions "
            "after unrolling its counted repeats (state budget max_states; raise it to "
            "allow this pattern)"
        )
    nfa = _NFA(pattern, NFA_FACTOR * max_states)
    nfa.new()
    accept = nfa.build(tree, 0)
    by_class, final, class_of = _subsets(nfa, accept, max_states)
    trimmed = _trim(by_class, final)
    if trimmed is None:
        raise ValueError(f"regex {short_pattern(pattern)} matches no string")
    return ByteDFA(np.ascontiguousarray(trimmed[0][:, class_of]), trimmed[1])


def literal_dfa(data: bytes) -> ByteDFA:
    """The DFA accepting exactly the byte string `data` (a chain of `len(data) + 1` states)."""
    n = len(data) + 1
    delta = np.full((n, 256), -1, dtype=np.int32)
    delta[np.arange(n - 1), np.frombuffer(data, dtype=np.uint8)] = np.arange(1, n, dtype=np.int32)
    final = np.zeros(n, dtype=bool)
    final[-1] = True
    return ByteDFA(delta, final)


def byte_dfa(
    pattern: str, max_states: int = MAX_STATES
) -> tuple[int, set, dict[int, dict[int, int]]]:
    """`compile_regex(pattern)` as `(initial, finals, arcs)` with `arcs[q][b] = q'`."""
    dfa = compile_regex(pattern, max_states)
    arcs: dict[int, dict[int, int]] = {q: {} for q in range(dfa.n_states)}
    src, byte = np.nonzero(dfa.delta >= 0)
    for q, b, t in zip(src.tolist(), byte.tolist(), dfa.delta[src, byte].tolist()):
        arcs[q][b] = t
    return 0, set(np.flatnonzero(dfa.final).tolist()), arcs


def dfa_wfsa(dfa: ByteDFA, semiring: Any, weight: Callable[[int], Any]):
    """A genlm-grammar WFSA over byte values with `dfa`'s arcs; each state splits
    `weight(k)` evenly over its `k` choices (outgoing bytes plus stopping, when final)."""
    from genlm.grammar import WFSA as GrammarWFSA

    m = GrammarWFSA(semiring)
    m.add_I(0, semiring.one)
    out = (dfa.delta >= 0).sum(axis=1) + dfa.final
    src, byte = np.nonzero(dfa.delta >= 0)
    for q in np.flatnonzero(dfa.final).tolist():
        m.add_F(q, weight(int(out[q])))
    for q, b, t in zip(src.tolist(), byte.tolist(), dfa.delta[src, byte].tolist()):
        m.add_arc(q, b, t, weight(int(out[q])))
    return m


def regex_wfsa(
    pattern: str, semiring: Any, weight: Callable[[int], Any], max_states: int = MAX_STATES
):
    """`dfa_wfsa(compile_regex(pattern, max_states), semiring, weight)`: with
    `weight = 1/k` a distribution over the matching strings that picks the next byte
    uniformly among those that keep a match possible."""
    return dfa_wfsa(compile_regex(pattern, max_states), semiring, weight)


_utf8_len, _next_bytes = utf8_length, utf8_next_bytes  # the names before the move

__all__ = [
    "ByteDFA",
    "MAX_STATES",
    "byte_dfa",
    "compile_regex",
    "dfa_wfsa",
    "literal_dfa",
    "regex_wfsa",
    "utf8_length",
    "utf8_next_bytes",
    "utf8_sequences",
]
