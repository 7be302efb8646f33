"""A deterministic byte automaton coerced onto a token vocabulary through `b"".join`.

For a deterministic automaton the context after any prefix is a single state `q`
(with scale), and for a token `x` with bytes `x₁…x_k`:

    logw_next(ctx)[x] = Σ_i log T[q_{i-1}, x_i] + log β[q_k] − log β[q]

depends on `q` only. The row for a state is computed once, by one vectorised walk
of the token trie (one array gather per trie level), and kept in a bounded LRU
keyed by state; after that a `logw_next` is a state lookup and a row copy.

`allowed_next(ctx, indices)` answers which of a set of tokens may follow (AWRS
checks its draws with it): from the state's row when it is cached or the set is
large, else by walking each token's bytes through the automaton.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Sequence

import numpy as np

from genlm.control._state_cache import RowCache
from genlm.control._trie import SymbolTrie
from genlm.control.constraints._state_rows import StateRowCoerced
from genlm.control.constraints.fsa._fsa_budget import TokenDistances, byte_distances
from genlm.control.horizon import tokens_left
from genlm.control.weights import NEG_INF

_FEW = 8  # up to this many tokens (and no cached row), `allowed_next` walks their bytes


_NODE = np.dtype([("q", np.int64), ("logw", np.float64)])  # per trie node: state, path log weight


def _live(par: np.ndarray) -> np.ndarray:
    return par["q"] >= 0


def _live_state(q: np.ndarray) -> np.ndarray:
    return q >= 0


def _log(x):
    with np.errstate(divide="ignore"):
        return np.log(x)


class CoercedDFA(StateRowCoerced):
    """`Coerced` for a deterministic `WFSA`/`BoolFSA` (same values, per-state token tables).

    Args:
        as for `Coerced`, plus `table_cache_size`: the most per-state rows kept.
    """

    cheap_logw_next = True  # a cached row per automaton state

    def __init__(self, *args, table_cache_size: int = 1024, **kwargs):
        super().__init__(*args, row_cache_size=table_cache_size, **kwargs)
        trie = self.trie
        self._symbols = np.array([-1] + [int(s) for s in trie.symbol[1:]], dtype=np.int64)

    @property
    def boolean_rows(self) -> bool:  # type: ignore[override]
        """A Boolean automaton's rows hold only 0 and -inf (a weighted one's do not)."""
        return bool(self.potential.automaton.boolean)

    def _state(self, context) -> int | None:
        """The automaton state after `context`; None when the context has weight zero.

        For a Boolean automaton, kept per context image (`_state_by_image`), its
        prefix and complete read from the same state."""
        image = self.f(list(context))
        if not isinstance(image, bytes) or not self.boolean_rows:
            # a weighted automaton's prefix and complete read the forward vectors
            # (with their scales), which this walk keeps cached for them
            return self._forward_state(image)
        return self._state_by_image(context)

    async def prefix(self, context):
        if not self.boolean_rows:
            return await super().prefix(context)
        return 0.0 if self._state(context) is not None else NEG_INF

    async def complete(self, context):
        if not self.boolean_rows:
            return await super().complete(context)
        q = self._state(context)
        return 0.0 if q is not None and self.potential.automaton.stop[q] > 0 else NEG_INF

    async def batch_prefix(self, contexts):
        if not self.boolean_rows:
            return await super().batch_prefix(contexts)
        return np.array([await self.prefix(c) for c in contexts])

    async def batch_complete(self, contexts):
        if not self.boolean_rows:
            return await super().batch_complete(contexts)
        return np.array([await self.complete(c) for c in contexts])

    def _whole_state(self, image: bytes) -> int | None:
        return self._forward_state(image)

    def _forward_state(self, image) -> int | None:
        fwd = self.potential.forward(list(image))
        if fwd is None:
            return None
        q = int(np.argmax(fwd.alpha))
        return q if self.potential.automaton.beta[q] > 0 else None

    def _step_bytes(self, q: int, data: bytes) -> int | None:
        """The state after `data` from the live state `q` (None once no path reads it,
        or where acceptance is out of reach)."""
        a = self.potential.automaton
        delta = a.delta
        for b in data:
            q = int(delta[q, b])
            if q < 0:
                return None
        return q if a.beta[q] > 0 else None

    def _trie_states(self, q: int) -> np.ndarray:
        """Per trie node, the automaton state and path log weight from state `q`
        (state -1 below a missing arc), one vectorised walk."""
        a = self.potential.automaton
        symbols = self._symbols

        def step(par, parents, nodes):
            """Advance each live parent's state by the node's byte, adding the arc's log weight."""
            sym = symbols[nodes]
            out = np.empty(len(nodes), dtype=_NODE)
            out["q"] = a.delta[par["q"], sym]
            out["logw"] = par["logw"] + a.log_arc[par["q"], sym]
            return out

        nodes = np.zeros(self.trie.n_nodes, dtype=_NODE)
        nodes["q"] = -1
        nodes[0] = (q, 0.0)
        return self.trie.walk(nodes, step, _live)

    def _walk(self, q: int) -> np.ndarray:
        """The row over `vocab_eos` for automaton state `q` (see module docstring). A
        Boolean automaton's row is 0 exactly where a token's end state is live, so it
        comes from the byte-class walk of `_ends`; a weighted one walks the token trie
        for the path weights."""
        if self.boolean_rows:
            return self._row_from_ends(q, self._ends(q))
        return self._row_from_nodes(q, self._trie_states(q))

    def _row_from_nodes(self, q: int, nodes: np.ndarray) -> np.ndarray:
        """`_walk(q)` from the trie's states after `q` (`_trie_states(q)`)."""
        return self._row_from_ends(q, nodes["q"][self._leaf], nodes["logw"][self._leaf])

    def _row_from_ends(self, q: int, end: np.ndarray, logw: np.ndarray | None = None) -> np.ndarray:
        """`_walk(q)` from each token's end state after `q` (-1: none) and, for a
        weighted automaton, its path log weight."""
        a = self.potential.automaton
        live = end >= 0
        row = np.full(len(self.vocab_eos), NEG_INF)
        if a.boolean:
            row[:-1][live] = 0.0
            row[-1] = 0.0 if a.stop[q] > 0 else NEG_INF
        else:
            log_beta = _log(a.beta)
            row[:-1][live] = logw[live] + log_beta[end[live]] - log_beta[q]
            row[-1] = _log(a.stop[q]) - log_beta[q]
        return row

    # Tokens left to acceptance (`fast_paths.TokensToFinish`, exact; see _fsa_budget) --

    max_budget_states = 256  # reachable states searched for the exact distances

    def _ends(self, q: int) -> np.ndarray:
        """Per token, the state after its bytes from `q` (-1 where its row is -inf).

        For a Boolean automaton, one walk of the class trie (`_byte_class_trie`): a token's
        row entry is 0 exactly where its end state is live. For a weighted one, one
        walk of the token trie gives both the ends and, where it is not kept yet, the
        row (which is then kept as `_rows.get(q)` would keep it)."""
        if self.boolean_rows:
            trie, symbols, leaf = self._byte_class_trie
            delta = self.potential.automaton.delta
            states = np.full(trie.n_nodes, -1, dtype=np.int64)
            states[0] = q
            trie.walk(states, lambda par, parents, nodes: delta[par, symbols[nodes]], _live_state)
            return states[leaf]
        nodes = self._trie_states(q)
        row = self._rows.peek(q)
        if row is None:
            row = self._row_from_nodes(q, nodes)
            self._rows.put(q, row)
        else:
            self._rows.get(q)  # marked as used, as reading it through `get` did
        return np.where(row[:-1] > NEG_INF, nodes["q"][self._leaf], -1)

    @cached_property
    def _byte_class_trie(self) -> tuple[SymbolTrie, np.ndarray, np.ndarray]:
        """`(trie, symbols, leaf)`: the trie of the tokens' byte paths with every byte
        replaced by the least byte whose column of `delta` is the same (two such bytes
        lead every state to the same state, so a path's end state is the same after
        the replacement), each distinct path once; its nodes' symbols; each token's
        node. A walk from a state then costs the distinct class paths (for a regex
        over a few byte classes, a small fraction of a 131k vocabulary's trie), not
        the tokens. An automaton without one column per byte keeps the token trie."""
        delta = np.asarray(self.potential.automaton.delta)
        images = [self.f([x]) for x in self.vocab]
        if delta.ndim != 2 or delta.shape[1] != 256 or not all(isinstance(i, bytes) for i in images):
            return self.trie, self._symbols, np.asarray(self._leaf, dtype=np.int64)
        _, first, inverse = np.unique(delta.T, axis=0, return_index=True, return_inverse=True)
        table = bytes(first[inverse.ravel()].tolist())
        distinct: dict[bytes, int] = {}
        path_of = np.fromiter(
            (distinct.setdefault(i.translate(table), len(distinct)) for i in images), dtype=np.int64, count=len(images)
        )
        classes = SymbolTrie.build(list(distinct), b"".join)
        symbols = np.array([-1] + [int(s) for s in classes.symbol[1:]], dtype=np.int64)
        return classes, symbols, classes.leaf[path_of]

    def _byte_bound(self) -> np.ndarray:
        """Per state, ⌈fewest bytes to acceptance / longest token⌉ (a lower bound on `d`)."""
        a = self.potential.automaton
        longest = max((len(p) for p in self.trie.paths), default=1) or 1
        return np.ceil(byte_distances(np.asarray(a.delta), np.asarray(a.stop) > 0) / longest)

    @cached_property
    def _distances(self) -> TokenDistances:
        accepting = np.asarray(self.potential.automaton.stop) > 0
        start = self._state([])
        if start is None:  # an empty language: no context ends
            return TokenDistances(self._ends, 0, np.zeros_like(accepting), self._byte_bound, 0)
        return TokenDistances(self._ends, start, accepting, self._byte_bound, self.max_budget_states)

    async def batch_tokens_to_finish(self, contexts: Sequence[Sequence[Any]]) -> np.ndarray:
        """Per next token, the fewest tokens after it to an accepted string (`inf`: none;
        EOS: 0 where the context is accepted). Exact while at most
        `max_budget_states` automaton states are reachable, else the byte bound."""
        out = np.empty((len(contexts), len(self.vocab_eos)))
        for i, context in enumerate(contexts):
            q = self._state(context)
            out[i] = np.inf if q is None else self._budget_rows.get(q)
        return out

    @cached_property
    def _budget_rows(self) -> RowCache:
        return RowCache(self._distances.row, self._rows.size)

    async def batch_most_tokens_to_finish(self, contexts: Sequence[Sequence[Any]]) -> np.ndarray:
        """Per context, an upper bound on the finite entries of its
        `batch_tokens_to_finish` row (`-inf` where it has none;
        `fast_paths.MostTokensToFinish`): the row is `inf` exactly where this
        potential's row is `-inf` (a token whose end state can still accept has a
        finite distance).

        Inside a run whose tokens left after the context (`horizon.tokens_left`) are at
        least `_distance_ceiling()`, the largest finite distance of any state, that
        ceiling is the bound: every finite entry of the row is the distance of some
        state, so none exceeds it, and the budget then prunes nothing without a walk
        of the trie for the state. Elsewhere (near the horizon, or outside a run) it
        is exactly the row's largest finite entry, one number kept per state."""
        out = np.full(len(contexts), NEG_INF)
        for i, context in enumerate(contexts):
            q = self._state(context)
            if q is None:
                continue
            left = tokens_left(context)
            if left is not None and self._distance_ceiling() <= left:
                out[i] = self._distance_ceiling()
            else:
                out[i] = self._most_rows.get(q)
        return out

    def _distance_ceiling(self) -> float:
        """The largest finite `d` of `TokenDistances` over the automaton's states (0
        where none is finite): no entry of a `batch_tokens_to_finish` row but `inf`
        exceeds it (its EOS entry is 0 or `inf`)."""
        ceiling = self.__dict__.get("_ceiling")
        if ceiling is None:
            dist = self._distances.of_states()
            finite = dist[dist < np.inf]
            ceiling = self._ceiling = float(finite.max()) if finite.size else 0.0
        return ceiling

    @cached_property
    def _most_rows(self) -> RowCache:
        def most(q: int) -> float:
            row = self._budget_rows.get(q)
            finite = row[row < np.inf]
            return float(finite.max()) if finite.size else NEG_INF

        return RowCache(most, self._rows.size)

    async def allowed_next(self, context: Sequence[Any], indices: Sequence[int]) -> np.ndarray:
        """Which of the tokens at `indices` of `vocab_eos` may follow `context`:
        `prefix(context + [x]) > -inf` for a token `x`, `complete(context) > -inf` for
        EOS; all False when `context` itself has weight zero."""
        rows = np.asarray(indices, dtype=np.intp)
        q = self._state(context)
        if q is None:
            return np.zeros(len(rows), dtype=bool)
        row = self._rows.peek(q)
        if row is None and len(rows) > _FEW:
            row = self._rows.get(q)
        if row is not None:
            return row[rows] > NEG_INF
        eos, stop = len(self.vocab), self.potential.automaton.stop
        return np.array([stop[q] > 0 if i == eos else self._reaches(q, int(i)) for i in rows], dtype=bool)

    def _reaches(self, q: int, i: int) -> bool:
        """Whether token `i`'s bytes lead from state `q` to a state with weight."""
        a = self.potential.automaton
        for b in self._map([self.vocab[i]]):
            if not a.boolean and not a.log_arc[q, b] > NEG_INF:
                return False
            q = int(a.delta[q, b])
            if q < 0:
                return False
        return bool(a.beta[q] > 0)


__all__ = ["CoercedDFA"]
