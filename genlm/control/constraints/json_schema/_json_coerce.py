"""Interned JSON recognizer states and `JsonSchema` coerced through `b"".join`.

States are interned to ids, and their byte transitions kept in a table
`T[id, byte]` (-1: dead, -2: not computed yet) filled on demand. For a token `x`
with bytes `x₁…x_k` the coerced row after a context in state `q` is

    logw_next(ctx)[x] = 0 if T[…T[T[q, x₁], x₂]…, x_k] ≥ 0 else -inf

which depends on `q` only: one vectorised walk of the token trie (one table
gather per trie level, computing only the missing transitions) gives the row,
kept in a bounded LRU keyed by state.
"""

from __future__ import annotations

import numpy as np

from genlm.control._state_cache import RowCache
from genlm.control.constraints._state_rows import StateRowCoerced
from genlm.control.constraints.json_schema._json_machine import accepts, step
from genlm.control.horizon import tokens_left
from genlm.control.weights import NEG_INF

DEAD, UNKNOWN = -1, -2
INF = float("inf")


class Transitions:
    """A memo of the recognizer's transitions over interned states.

    Args:
        root: the initial state.
        max_states: interned states kept before `full()` says to `reset()`.
    """

    def __init__(self, root: frozenset, max_states: int):
        self.root = root
        self.max_states = max_states
        self.reset()

    def reset(self) -> None:
        self.ids: dict = {}
        self.states: list = []
        self.table = np.full((64, 256), UNKNOWN, dtype=np.int64)
        self.accepting: dict[int, bool] = {}
        self.sid(self.root)

    def full(self) -> bool:
        return len(self.states) > self.max_states

    def sid(self, state: frozenset) -> int:
        i = self.ids.get(state)
        if i is None:
            i = self.ids[state] = len(self.states)
            self.states.append(state)
            if i >= len(self.table):
                grown = np.full((2 * len(self.table), 256), UNKNOWN, dtype=np.int64)
                grown[: len(self.table)] = self.table
                self.table = grown
        return i

    def fill(self, i: int, byte: int) -> int:
        nxt = step(self.states[i], byte)
        j = DEAD if nxt is None else self.sid(nxt)
        self.table[i, byte] = j
        return j

    def next_state(self, state: frozenset, byte: int):
        i = self.sid(state)
        j = self.table[i, byte]
        if j == UNKNOWN:
            j = self.fill(i, byte)
        return None if j == DEAD else self.states[j]

    def next_ids(self, ids: np.ndarray, symbols: np.ndarray) -> np.ndarray:
        """`T[ids, symbols]`, computing the missing entries."""
        out = self.table[ids, symbols]
        missing = np.flatnonzero(out == UNKNOWN)
        if len(missing):
            for i, b in set(zip(ids[missing].tolist(), symbols[missing].tolist())):
                self.fill(i, b)
            out = self.table[ids, symbols]
        return out

    def byte_row(self, i: int) -> np.ndarray:
        """`T[i, :]` with every entry computed."""
        row = self.table[i]
        for b in np.flatnonzero(row == UNKNOWN).tolist():
            self.fill(i, b)
        return self.table[i]

    def accepts(self, state: frozenset) -> bool:
        i = self.sid(state)
        hit = self.accepting.get(i)
        if hit is None:
            hit = self.accepting[i] = accepts(state)
        return hit


def _live(ids: np.ndarray) -> np.ndarray:
    return ids >= 0


class CoercedJson(StateRowCoerced):
    """`Coerced` for `JsonSchema` through `b"".join` (same values, per-state token rows).

    Args:
        as for `Coerced`, plus `row_cache_size`: the most per-state rows kept.
    """

    def __init__(self, *args, row_cache_size: int = 1024, **kwargs):
        super().__init__(*args, row_cache_size=row_cache_size, **kwargs)
        trie = self.trie
        self._symbols = np.array([0] + [int(s) for s in trie.symbol[1:]], dtype=np.int64)

    def _state(self, context) -> frozenset | None:
        """The recognizer state after `context`; None when the context has weight zero."""
        return self.potential.state(self._map(context))

    def _row_of(self, context) -> np.ndarray:
        """The state's row, with EOS checked on the whole document where the schema
        needs it (`JsonSchema.document_check`)."""
        row = super()._row_of(context)
        if self.potential.document_check is None:
            return row
        return self.potential._checked(row, self._map(context))

    def _mask_of(self, context) -> np.ndarray:
        """The state's kept mask, or the checked row's where EOS depends on the document."""
        if self.potential.document_check is None:
            return super()._mask_of(context)
        return self._row_of(context) > NEG_INF

    def _walk(self, state: frozenset) -> np.ndarray:
        t = self.potential.transitions
        symbols = self._symbols
        ids = np.full(self.trie.n_nodes, DEAD, dtype=np.int64)
        ids[0] = t.sid(state)
        self.trie.walk(ids, lambda par, parents, nodes: t.next_ids(par, symbols[nodes]), _live)
        row = np.full(len(self.vocab_eos), NEG_INF)
        row[:-1][ids[self._leaf] >= 0] = 0.0
        row[-1] = 0.0 if t.accepts(state) else NEG_INF
        return row

    # Tokens left to a complete document (`fast_paths.TokensToFinish`, a lower bound)

    @property
    def batch_tokens_to_finish(self):  # type: ignore[override]
        return self._tokens_to_finish

    def _bytes_after(self, state: frozenset) -> np.ndarray:
        """Per token, the fewest bytes to a complete document after it from `state`
        (`_json_budget.fewest_bytes` of the state it leads to; inf: dead); then EOS,
        0 where `state` accepts. One trie walk per state, kept like the rows."""
        from genlm.control.constraints.json_schema._json_budget import fewest_bytes

        t = self.potential.transitions
        ids = np.full(self.trie.n_nodes, DEAD, dtype=np.int64)
        ids[0] = t.sid(state)
        self.trie.walk(
            ids, lambda par, parents, nodes: t.next_ids(par, self._symbols[nodes]), _live
        )
        leaf = ids[self._leaf]
        out = np.full(len(self.vocab_eos), INF)
        for i in np.unique(leaf[leaf >= 0]).tolist():
            out[:-1][leaf == i] = fewest_bytes(t.states[i])
        out[-1] = 0.0 if t.accepts(state) else INF
        return out

    budget_walk_within = 4  # tokens from the horizon where the trie is walked

    def _budget_parts(self) -> tuple[np.ndarray, float]:
        """Per token the bytes `fewest_bytes` may count that it holds, and the most
        in one token (`_json_budget.mandated_weight`; at least 1)."""
        from genlm.control.constraints.json_schema._json_budget import (
            mandated_bytes,
            mandated_weight,
        )

        parts = self.__dict__.get("_budget")
        if parts is None:
            counted = mandated_bytes(self.potential.root)
            w = np.array([mandated_weight(self._map([x]), counted) for x in self.vocab], float)
            parts = self._budget = (w, float(max(w.max(initial=0.0), 1.0)))
        return parts

    async def _tokens_to_finish(self, contexts) -> np.ndarray:
        """`⌈L(ctx·y) / weight⌉` per next token `y`, `L` the fewest bytes to a
        complete document (`_bytes_after`) and `weight` the most counted bytes in
        one token (`_budget_parts`); inf for a dead context.

        The walk is taken only where the budget may bind: within
        `budget_walk_within` tokens of the horizon, or where `L(ctx)` comes within
        that many tokens of the tokens left. Elsewhere every token gets
        `⌈max(0, L(ctx) − w(y)) / weight⌉`, below `⌈L(ctx·y) / weight⌉` (`y` holds
        at most `w(y)` of the counted bytes) and below the tokens left: it prunes
        nothing there."""
        cache = self._after_cache()
        weights, weight = self._budget_parts()
        out = np.full((len(contexts), len(self.vocab_eos)), INF)
        for k, context in enumerate(contexts):
            state = self._state(context)
            if state is None:
                continue
            out[k, -1] = 0.0 if self._ends(state, context) else INF  # EOS as `complete` says
            far, fewest = self._far(state, context)
            if far:
                out[k, :-1] = np.ceil(np.maximum(fewest - weights, 0.0) / weight)
            else:
                out[k, :-1] = np.ceil(cache.get(state)[:-1] / weight)
        return out

    @property
    def batch_most_tokens_to_finish(self):  # type: ignore[override]
        return self._most_tokens_to_finish

    async def _most_tokens_to_finish(self, contexts) -> np.ndarray:
        """Each context's largest finite entry of its `_tokens_to_finish` row (`-inf`
        where none; `fast_paths.MostTokensToFinish`), by the same branches without
        making the row: far from the horizon `⌈max(0, L(ctx) − min w) / weight⌉`,
        near it the largest finite entry of its state's kept row (one number kept
        per state); the EOS entry is read only where no token's entry is finite."""
        weights, weight = self._budget_parts()
        least = float(weights.min()) if len(weights) else INF
        out = np.full(len(contexts), NEG_INF)
        for k, context in enumerate(contexts):
            state = self._state(context)
            if state is None:
                continue
            far, fewest = self._far(state, context)
            if far:
                top = float(np.ceil(max(fewest - least, 0.0) / weight)) if len(weights) else NEG_INF
            else:
                top = self._most_after().get(state)
            if top == NEG_INF and self._ends(state, context):
                top = 0.0
            out[k] = top
        return out

    def _ends(self, state: frozenset, context) -> bool:
        """Whether `context` is a complete document (`complete` > -inf)."""
        return bool(self.potential.transitions.accepts(state)) and bool(
            self.potential.document_ok(self._map(context))
        )

    def _far(self, state: frozenset, context) -> tuple[bool, float]:
        """`(far, L(ctx))`: whether the context is far enough from the horizon that its
        row is the cheap one (see `_tokens_to_finish`)."""
        from genlm.control.constraints.json_schema._json_budget import fewest_bytes

        _, weight = self._budget_parts()
        within = self.budget_walk_within
        r = tokens_left(context)
        fewest = fewest_bytes(state)
        return (r is not None and r > within and fewest <= (r - within) * weight), fewest

    def _after_cache(self) -> RowCache:
        cache = self.__dict__.get("_after_rows")
        if cache is None:
            cache = self._after_rows = RowCache(self._bytes_after, self._rows.size)
        return cache

    def _most_after(self) -> RowCache:
        """Per state, the largest finite `⌈bytes after / weight⌉` over the tokens."""
        cache = self.__dict__.get("_most_after_rows")
        if cache is None:
            _, weight = self._budget_parts()

            def most(state: frozenset) -> float:
                row = self._after_cache().get(state)[:-1]
                finite = row[row < INF]
                return float(np.ceil(finite.max() / weight)) if finite.size else NEG_INF

            cache = self._most_after_rows = RowCache(most, self._rows.size)
        return cache


__all__ = ["CoercedJson", "Transitions"]
