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

from collections import OrderedDict
from typing import Any, Sequence

import numpy as np

from genlm.control.potential.coerce import Coerced
from genlm.control.weights import NEG_INF, LazyWeights

_FEW = 8  # up to this many tokens (and no cached row), `allowed_next` walks their bytes


def _log(x):
    with np.errstate(divide="ignore"):
        return np.log(x)


class CoercedDFA(Coerced):
    """`Coerced` for a deterministic `WFSA`/`BoolFSA` (same values, per-state token tables).

    Args:
        as for `Coerced`, plus `table_cache_size`: the most per-state rows kept.
    """

    def __init__(self, *args, table_cache_size: int = 1024, **kwargs):
        super().__init__(*args, **kwargs)
        trie = self.trie
        self._symbols = np.array([-1] + [int(s) for s in trie.symbol[1:]], dtype=np.int64)
        self._table_cache_size = table_cache_size
        self._tables: OrderedDict[int, np.ndarray] = OrderedDict()

    def _state(self, context) -> int | None:
        fwd = self.potential.forward(self._map(context))
        if fwd is None:
            return None
        return int(np.argmax(fwd.alpha))

    def _walk(self, q: int) -> np.ndarray:
        """The row over `vocab_eos` for automaton state `q` (see module docstring)."""
        a = self.potential.automaton
        trie = self.trie
        state = np.full(trie.n_nodes, -1, dtype=np.int64)
        logw = np.zeros(trie.n_nodes)
        state[0] = q
        for level in trie.levels:
            par = state[trie.parent[level]]
            ok = par >= 0
            sym = self._symbols[level]
            nxt = np.where(ok, a.delta[np.where(ok, par, 0), sym], -1)
            state[level] = nxt
            logw[level] = logw[trie.parent[level]] + np.where(
                ok, a.log_arc[np.where(ok, par, 0), sym], NEG_INF
            )
        end = state[self._leaf]
        live = end >= 0
        row = np.full(len(self.vocab_eos), NEG_INF)
        log_beta = _log(a.beta)
        if a.boolean:
            row[:-1][live] = 0.0
            row[-1] = 0.0 if a.stop[q] > 0 else NEG_INF
        else:
            row[:-1][live] = logw[self._leaf][live] + log_beta[end[live]] - log_beta[q]
            row[-1] = _log(a.stop[q]) - log_beta[q]
        return row

    def _row(self, q: int) -> np.ndarray:
        row = self._tables.get(q)
        if row is None:
            row = self._walk(q)
            self._tables[q] = row
            if len(self._tables) > self._table_cache_size:
                self._tables.popitem(last=False)
        else:
            self._tables.move_to_end(q)
        return row

    async def logw_next(self, context) -> LazyWeights:
        """The state's row: `logw_next(ctx)[x] = prefix(ctx·x) − prefix(ctx)`."""
        return self.make_lazy_weights(self._row_of(context).copy())

    def _row_of(self, context) -> np.ndarray:
        q = self._state(context)
        if q is None or not self.potential.automaton.beta[q] > 0:
            raise ValueError(f"context {list(context)!r} has weight zero under {self!r}")
        return self._row(q)

    async def allowed_next(self, context: Sequence[Any], indices: Sequence[int]) -> np.ndarray:
        """Which of the tokens at `indices` of `vocab_eos` may follow `context`:
        `prefix(context + [x]) > -inf` for a token `x`, `complete(context) > -inf` for
        EOS; all False when `context` itself has weight zero."""
        rows = np.asarray(indices, dtype=np.intp)
        q = self._state(context)
        a = self.potential.automaton
        if q is None or not a.beta[q] > 0:
            return np.zeros(len(rows), dtype=bool)
        row = self._tables.get(q)
        if row is None and len(rows) > _FEW:
            row = self._row(q)
        if row is not None:
            return row[rows] > NEG_INF
        eos = len(self.vocab)
        return np.array([a.stop[q] > 0 if i == eos else self._reaches(q, int(i)) for i in rows], dtype=bool)

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

    async def batch_logw_next(self, contexts) -> list[LazyWeights]:
        if not contexts:
            return []
        block = np.stack([self._row_of(c) for c in contexts])
        return self.rows_to_weights(block)

    def spawn(self) -> "CoercedDFA":
        c = object.__new__(type(self))
        c.__dict__.update(self.__dict__)
        c.potential = self.potential.spawn()
        c._tables = OrderedDict()
        return c

    def __repr__(self) -> str:
        return f"CoercedDFA({self.potential!r}, |V|={len(self.tables.vocab)})"


__all__ = ["CoercedDFA"]
