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

from genlm.control._lru import LRU
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
        self._refine_walks = 0

    def _state(self, context) -> frozenset | None:
        """The recognizer state after `context`; None when the context has weight zero.
        Kept per context image (`_state_by_image`): the schema's own lookup would
        read and hash every byte of the document."""
        return self._state_by_image(context)

    def _whole_state(self, image: bytes) -> frozenset | None:
        return self.potential.state(list(image))

    def _step_bytes(self, state: frozenset, data: bytes) -> frozenset | None:
        """Through the schema's transition memo (reset when full, as the schema's own
        lookup resets it: its states are values, not ids, so kept ones stay valid)."""
        t = self.potential.transitions
        if t.full():
            t.reset()
        for byte in data:
            state = t.next_state(state, byte)
            if state is None:
                break
        return state

    #: Context images whose state is kept (a step reads its parents', the contexts of
    #: the step before).
    images_kept = 4096

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

    def _successors(self, state: frozenset) -> tuple[list, np.ndarray, np.ndarray]:
        """`(states, index, bounds)`: the distinct states the tokens lead to from
        `state`, per token the index of its state among them (-1: the token is
        dead), and each state's `_bound`. One trie walk per state, kept like the
        rows."""
        t = self.potential.transitions
        ids = np.full(self.trie.n_nodes, DEAD, dtype=np.int64)
        ids[0] = t.sid(state)
        self.trie.walk(
            ids, lambda par, parents, nodes: t.next_ids(par, self._symbols[nodes]), _live
        )
        leaf = ids[self._leaf]
        live = leaf >= 0
        found, inverse = np.unique(leaf[live], return_inverse=True)
        index = np.full(len(leaf), -1, dtype=np.int32)
        index[live] = inverse
        states = [t.states[i] for i in found.tolist()]
        return states, index, np.array([self._bound(s) for s in states], dtype=np.float64)

    def _entries(self, state: frozenset, context) -> tuple[np.ndarray, np.ndarray]:
        """`(bounds, index)` as `_successors` gives them, where a successor whose
        bound is within one token of the tokens left is raised to one more than its
        own successors' least bound (0 where it accepts): the bound is not
        consistent from token to token, and a state it lets in with a bound equal
        to the tokens left may have no successor that keeps within them. At most
        `budget_refine_walks` states not yet walked are walked per call; the rest
        keep their bound."""
        return self._raised(state, tokens_left(context))[:2]

    def _raised(self, state: frozenset, r: int | None) -> tuple[np.ndarray, np.ndarray, float]:
        """`(bounds, index, top)` of `_entries` for `r` tokens left, `top` the largest
        bound (`-inf` where no token is live). Kept per `(state, r)` when every tight
        successor was walked (the entries are then a function of the two alone); the
        per-token index is not kept here but read from the walk's cache, so the memo
        holds one number per successor state, never a row over the vocabulary."""
        memo = self.__dict__.get("_raised_memo")
        if memo is None:
            memo = self._raised_memo = LRU(self._rows.size)
        cache = self._successor_cache()
        hit = memo.get((state, r))
        if hit is not None:  # (the index, a row over the vocabulary, is the walk's own)
            return hit[0], cache.get(state)[1], hit[1]
        states, index, bounds = cache.get(state)
        out, complete = bounds, True
        tight = np.flatnonzero((bounds >= r - 1) & (bounds <= r)).tolist() if r is not None else []
        t = self.potential.transitions
        for i in tight:
            s = states[i]
            if t.accepts(s):
                continue
            if cache.peek(s) is None:
                if self._refine_walks >= self.budget_refine_walks:
                    complete = False
                    continue
                self._refine_walks += 1
            after = cache.get(s)[2]
            if out is bounds:
                out = bounds.copy()
            out[i] = max(out[i], 1.0 + float(after.min()) if len(after) else float(r) + 1.0)
        top = float(out.max()) if len(out) else NEG_INF
        if complete:
            memo.put((state, r), (out, top))
        return out, index, top

    #: Per batch of contexts, the most successor states walked to raise bounds that
    #: are within one token of the tokens left (`_entries`).
    budget_refine_walks = 64

    def _bound(self, state: frozenset) -> float:
        """A lower bound on the tokens from `state` to a complete document: the larger
        of `⌈fewest_bytes / weight⌉` and the fewest tokens that hold its bytes in
        order (`_json_budget.OrderedCover`). Kept per state."""
        from genlm.control.constraints.json_schema._json_budget import OrderedCover

        kept = self.__dict__.get("_bounds")
        if kept is None:
            self._cover = OrderedCover([bytes(self._map([x])) for x in self.vocab])
            kept = self._bounds = RowCache(self._make_bound, 1 << 16)
        return kept.get(state)

    def _make_bound(self, state: frozenset) -> float:
        _, weight = self._budget_parts()
        return max(float(np.ceil(self._fewest_bytes(state) / weight)), self._cover.fewest_tokens(state))

    def _fewest_bytes(self, state: frozenset) -> float:
        """`_json_budget.fewest_bytes` of `state`, kept per state."""
        from genlm.control.constraints.json_schema._json_budget import fewest_bytes

        kept = self.__dict__.get("_fewest")
        if kept is None:
            kept = self._fewest = RowCache(fewest_bytes, 1 << 16)
        return kept.get(state)

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
        """`_bound(ctx·y)` per next token `y` (`_entries`); inf for a dead context.

        The walk is taken only where the budget may bind: within
        `budget_walk_within` tokens of the horizon, or where `_bound(ctx)` comes
        within that many tokens of the tokens left. Elsewhere every token gets
        `⌈max(0, L(ctx) − w(y)) / weight⌉`, `L` the fewest bytes to a complete
        document and `weight` the most counted bytes in one token (`_budget_parts`):
        below `⌈L(ctx·y) / weight⌉` (`y` holds at most `w(y)` of the counted
        bytes), so below `_bound(ctx·y)` and the tokens left: it prunes nothing
        there."""
        weights, weight = self._budget_parts()
        out = np.full((len(contexts), len(self.vocab_eos)), INF)
        self._refine_walks = 0
        for k, context in enumerate(contexts):
            state = self._state(context)
            if state is None:
                continue
            out[k, -1] = 0.0 if self._ends(state, context) else INF  # EOS as `complete` says
            far, fewest = self._far(state, context)
            if far:
                out[k, :-1] = np.ceil(np.maximum(fewest - weights, 0.0) / weight)
            else:
                bounds, index = self._entries(state, context)
                out[k, :-1] = np.append(bounds, INF)[index]
        return out

    @property
    def batch_most_tokens_to_finish(self):  # type: ignore[override]
        return self._most_tokens_to_finish

    async def _most_tokens_to_finish(self, contexts) -> np.ndarray:
        """Each context's largest finite entry of its `_tokens_to_finish` row (`-inf`
        where none; `fast_paths.MostTokensToFinish`), by the same branches without
        making the row: far from the horizon `⌈max(0, L(ctx) − min w) / weight⌉`,
        near it the largest of its successor states' bounds (`_entries`); the EOS
        entry is read only where no token's entry is finite."""
        weights, weight = self._budget_parts()
        least = float(weights.min()) if len(weights) else INF
        out = np.full(len(contexts), NEG_INF)
        self._refine_walks = 0
        for k, context in enumerate(contexts):
            state = self._state(context)
            if state is None:
                continue
            far, fewest = self._far(state, context)
            if far:
                top = float(np.ceil(max(fewest - least, 0.0) / weight)) if len(weights) else NEG_INF
            else:
                top = self._raised(state, tokens_left(context))[2]
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
        within = self.budget_walk_within
        r = tokens_left(context)
        fewest = self._fewest_bytes(state)
        return (r is not None and r > within and self._bound(state) <= r - within), fewest

    def _successor_cache(self) -> RowCache:
        cache = self.__dict__.get("_successor_rows")
        if cache is None:
            cache = self._successor_rows = RowCache(self._successors, self._rows.size)
        return cache


__all__ = ["CoercedJson", "Transitions"]
