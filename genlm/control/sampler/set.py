"""Set samplers: walk a trie of the LM's tokens with an item-level (byte) potential.

Target: `t(x) = w(x) · Φ(x)`, where `w = iter_potential.logw_next(ctx)` over tokens and
`Φ(x) = exp(item.prefix(β(ctx) + β(x)) - item.prefix(β(ctx)))`, with `β` the bytes of
the tokens, i.e. `t = iter_potential * item_potential.coerce(iter_potential, b"".join)`.
Over EOS, `t(EOS) = w(EOS) · exp(item.logw_next(β(ctx))[EOS])`.

A set sampler returns a random set `S` of tokens with weights `ŵ` such that
`E[Σ_{x∈S} ŵ(x) f(x)] = Σ_x t(x) f(x)`. The trie walk starts at the root and moves to a
child byte `b` with probability ∝ `M(child) · φ(b)`, where `M` is the `w`-mass of the
tokens under the child and `φ` the item potential's next-byte weight; every token `x`
ending at a visited node enters `S` with `ŵ(x) = w(x) Φ(x) / Q(x)`, `Q(x)` being the
probability that the walk visits its node. `SetTokenSampler` then draws one token of
`S` ∝ `ŵ` and returns `log Σ_S ŵ` as its weight.

Item rows are memoized by node within one call. A stateful item potential (see
`Potential.state_of`) is read once at the context, and its state is carried from each
visited node to the child by one `advance`, so a node costs the same at any context
length; its states and rows are kept per context (LRU) for later calls at the same
context. Any other item potential is asked `logw_next(β(ctx) + path(node))`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from genlm.control._args import is_int, positive_int, reject_bool
from genlm.control._cleanup import Cleaned, cleaned
from genlm.control._lru import LRU
from genlm.control._trie import SymbolTrie
from genlm.control.draw import current_rng, draw_from
from genlm.control.potential.base import Potential
from genlm.control.potential.coerce import CarriedNodes, stateful_potential
from genlm.control.sampler.budget import budget_of
from genlm.control.sampler.token import TokenSampler, _check_potential
from genlm.control.weights import NEG_INF, LazyWeights, fold_nan
from genlm.control.window import gather_or_cancel


class SetSample:
    """A properly weighted set: `tokens[i]` with log weight `logws[i]`, and the log
    probability `logp` of the random choices that produced it.

    It also unpacks as 0.4.1's result, `weights, logp = await s.sample_set(ctx)`:
    `weights` is the set as `LazyWeights` over the target's vocabulary (EOS last;
    `-inf` off the set; a token listed twice has its weights summed).
    """

    __slots__ = ("tokens", "logws", "logp", "_target")

    def __init__(self, tokens: list, logws: list, logp: float, target: Potential | None = None):
        self.tokens, self.logws, self.logp, self._target = tokens, logws, logp, target

    def row(self, target: Potential | None = None) -> np.ndarray:
        """The set's log weights over `target`'s vocabulary (the sampler's by default)."""
        target = self._target if target is None else target
        if target is None:
            raise ValueError("this SetSample was made without a target: pass one")
        row = target.alloc_logws()
        lookup = target.lookup
        for token, logw in zip(self.tokens, self.logws):
            i = lookup.get(token)
            if i is not None and logw > NEG_INF:
                row[i] = np.logaddexp(row[i], logw)
        return row

    @property
    def weights(self) -> LazyWeights:
        """The set as `LazyWeights` over the target's vocabulary (0.4.1's first element)."""
        return self._target.make_lazy_weights(self.row())

    def __iter__(self):
        return iter((self.weights, self.logp))

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i):
        return (self.weights, self.logp)[i]

    def __repr__(self) -> str:
        return f"SetSample(tokens={self.tokens!r}, logws={self.logws!r}, logp={self.logp!r})"


class SetTokenTypeError(TypeError, ValueError):
    """A set sampler's potentials of the wrong token types: a `TypeError` (ours) and a
    `ValueError` (what 0.4.1 raised)."""


class SetSampler(ABC):
    """Base class of samplers of properly weighted token sets for `target`."""

    target: Potential

    @abstractmethod
    async def sample_set(self, context: list, draw: Any = None) -> SetSample:
        """A random set `S` with `E[Σ_{x∈S} exp(ŵ(x)) f(x)] = Σ_x t(x) f(x)`."""

    async def logw_eos(self, context: list) -> float:
        logws = await self.target.logw_next(context)
        return logws[self.target.eos]

    def cleanup(self) -> Cleaned:
        """Release resources held by the set sampler (none by default); awaitable too."""
        return cleaned()


class _Walk:
    """One sample call's view of the context: LM weights and memoized item rows
    (shared with earlier calls at the same context for a stateful item potential)."""

    def __init__(self, sampler: "TrieSetSampler", context: list, lm: LazyWeights):
        self.sampler = sampler
        self.w = fold_nan(lm.host())
        self.items = list(b"".join(context))
        self.carried = None if sampler.carrier is None else sampler.carried_nodes(self.items)
        self.rows: dict[int, LazyWeights] = {} if self.carried is None else self.carried.rows

    async def fetch(self, nodes: list[int]) -> None:
        if self.carried is not None:
            for n in nodes:
                self.carried.row(n)
            return
        need = [n for n in dict.fromkeys(nodes) if n not in self.rows]
        if not need:
            return
        trie, item = self.sampler.trie, self.sampler.item_potential
        got = await item.batch_logw_next([self.items + trie.path(n) for n in need])
        self.rows.update(zip(need, got))


class TrieSetSampler(SetSampler):
    """A set sampler over `iter_potential`'s byte tokens and an item potential over bytes.

    When the item potential is `stateful`, its rows are read off carried states
    (`state_of`, `advance`, `logw_next_of`) with the same values as `logw_next`.

    Args:
        iter_potential: a potential over byte-string tokens (e.g. `PromptedLLM`).
        item_potential: a potential over single bytes (ints 0..255).
        memo_size: the most contexts whose carried states and rows are kept.
        autobatch: whether `iter_potential` is wrapped in its autobatched view, so the
            particles' concurrent calls share one batch (as in 0.4.1, the item potential
            is called in batches already and stays as given). 0.4.1's positional form
            `TrieSetSampler(iter, item, False)` is read as `autobatch=False`.

    `TrieSetSampler` itself draws no sets (as in 0.4.1, its `sample_set` raises
    `NotImplementedError`): `EagerSetSampler` and `TopKSetSampler` do.

    Raises:
        TypeError: if either is not a `Potential`.
        SetTokenTypeError (a TypeError and, as in 0.4.1, a ValueError): if
            `iter_potential`'s tokens are not byte strings or `item_potential`'s are not bytes.
        ValueError: if `memo_size < 1`.
    """

    def __init__(
        self,
        iter_potential: Potential,
        item_potential: Potential,
        memo_size: int = 256,
        *,
        autobatch: bool = True,
    ):
        if isinstance(memo_size, bool):  # 0.4.1's third argument was `autobatch`
            memo_size, autobatch = 256, memo_size
        _check_potential("iter_potential", iter_potential)
        _check_potential("item_potential", item_potential)
        if not all(isinstance(x, bytes) for x in iter_potential.vocab):
            raise SetTokenTypeError(
                "Token type of `iter_potential` must be an iterable of token type of "
                "`item_potential`: TrieSetSampler needs an iter_potential whose tokens are byte strings"
            )
        if not all(isinstance(x, int) for x in item_potential.vocab):
            raise SetTokenTypeError(
                "Token type of `iter_potential` must be an iterable of token type of `item_potential`: "
                f"TrieSetSampler needs an item_potential over bytes (ints 0..255), got {item_potential!r}"
            )
        positive_int("memo_size", memo_size)
        self.iter_potential = iter_potential.to_autobatched() if autobatch else iter_potential
        self.item_potential = item_potential
        self.carrier = stateful_potential(item_potential)
        self.memo_size = int(memo_size)
        self._carried: LRU[tuple, CarriedNodes] = LRU(self.memo_size)
        self.trie = SymbolTrie.build(iter_potential.vocab, b"".join)
        lookup = item_potential.lookup
        self._byte_index = np.array([lookup.get(b, -1) for b in range(256)], dtype=np.int64)
        coerced = item_potential.coerce(iter_potential, f=b"".join, trie=self.trie)
        self.target = iter_potential * coerced

    async def sample_set(self, context: list, draw: Any = None) -> SetSample:
        raise NotImplementedError(
            "TrieSetSampler draws no sets itself: use EagerSetSampler or TopKSetSampler"
        )

    async def logw_eos(self, context: list) -> float:
        """`t(EOS) = w(EOS) + item.logw_next(β(ctx))[EOS]` (log)."""
        lm = await self.iter_potential.logw_next(context)
        items = list(b"".join(context))
        if self.carrier is not None:
            row = self.carried_nodes(items).row(0)
        else:
            row = await self.item_potential.logw_next(items)
        return lm[lm.decode[-1]] + row[self.item_potential.eos]

    async def walk(self, view: _Walk, masses: np.ndarray, skip: set, draw: Any) -> SetSample:
        """Walk from the root; add each non-skipped token ending at a visited node, and
        EOS, with weight `w Φ / Q`."""
        trie, eos = self.trie, self.item_potential.eos
        rng = current_rng() if draw is None else None
        await view.fetch([0])
        tokens, logws = [self.iter_potential.eos], [float(view.w[-1] + view.rows[0][eos])]
        node, log_phi, log_q = 0, 0.0, 0.0
        vocab = self.iter_potential.vocab
        with np.errstate(divide="ignore"):
            log_mass = np.log(masses)
        while True:
            for i in trie.ends[node]:
                if i not in skip and view.w[i] > NEG_INF:
                    tokens.append(vocab[i])
                    logws.append(float(view.w[i]) + log_phi - log_q)
            kid_bytes, kid_nodes = trie.kid_symbols[node], trie.kid_nodes[node]
            row = view.rows[node]
            scores = log_mass[kid_nodes] + self.byte_logws(row.host(), kid_bytes)
            live = np.flatnonzero(scores > NEG_INF)
            if live.size == 0:
                break
            probs = np.exp(scores[live] - np.max(scores[live]))
            probs /= probs.sum()
            k = _choose(probs, kid_bytes[live].tolist(), draw, rng)
            b, node = int(kid_bytes[live[k]]), int(kid_nodes[live[k]])
            log_q += math.log(probs[k])
            log_phi += row[b]
            await view.fetch([node])
        return SetSample(tokens, logws, log_q, self.target)

    def byte_logws(self, item_row: np.ndarray, byte_values: np.ndarray) -> np.ndarray:
        """`item_row[b]` for each byte (`-inf` for a byte outside the item vocabulary)."""
        idx = self._byte_index[byte_values]
        out = np.full(len(idx), NEG_INF)
        ok = idx >= 0
        out[ok] = item_row[idx[ok]]
        return out

    def carried_nodes(self, items: list) -> CarriedNodes:
        """The carried states and rows below the item context `items` (LRU-memoized)."""
        return self._carried.get_or_make(tuple(items), self._carry)

    def _carry(self, key: tuple) -> CarriedNodes:
        return CarriedNodes(self.carrier, self.trie, list(key))

    def token_masses(self, w: np.ndarray, skip: set) -> np.ndarray:
        """Trie node masses of `exp(w)` over the tokens (not EOS), without `skip`."""
        finite = w[:-1][np.isfinite(w[:-1])]
        top = float(finite.max()) if finite.size else 0.0
        weights = np.exp(w[:-1] - top)
        if skip:
            weights[list(skip)] = 0.0
        return self.trie.masses(weights)

    def cleanup(self) -> Cleaned:
        self._carried.clear()
        return cleaned(self.iter_potential.cleanup(), self.item_potential.cleanup())


def _choose(probs: np.ndarray, keys: list, draw: Any, rng: np.random.Generator | None) -> int:
    """Index of the option chosen with probabilities `probs` (through `draw` if given)."""
    if draw is not None:
        pick = draw({k: float(p) for k, p in zip(keys, probs)})
        return keys.index(pick)
    return int(rng.choice(len(probs), p=probs))


class EagerSetSampler(TrieSetSampler):
    """A trie walk from the root that expands every byte the item potential allows,
    weighing each move by the LM mass under the child (see the module docstring)."""

    async def sample_set(self, context, draw=None):
        lm = await self.iter_potential.logw_next(list(context))
        view = _Walk(self, list(context), lm)
        return await self.walk(view, self.token_masses(view.w, set()), set(), draw)


class TopKSetSampler(TrieSetSampler):
    """The `K` tokens of largest LM weight, each with its exact weight `t(x)`, plus a
    trie walk over the other tokens' mass. `K=None` weighs every token exactly (as in
    0.4.1; one item-potential walk over the whole trie per step).

    Raises:
        TypeError: if `K` is a bool or not an integer (nor None).
        ValueError: if `K < 1`.
    """

    def __init__(
        self,
        iter_potential: Potential,
        item_potential: Potential,
        K: int | None,
        memo_size: int = 256,
        *,
        autobatch: bool = True,
    ):
        if K is not None:
            reject_bool("K", K)
            if not is_int(K):
                raise TypeError(f"K must be an integer ≥ 1 or None, got {K!r}")
            if K < 1:
                raise ValueError(f"K must be an integer ≥ 1 or None, got {K!r}")
        super().__init__(iter_potential, item_potential, memo_size, autobatch=autobatch)
        self.K = None if K is None else int(K)

    async def sample_set(self, context, draw=None):
        lm = await self.iter_potential.logw_next(list(context))
        view = _Walk(self, list(context), lm)
        tokens_w = view.w[:-1]
        k = len(tokens_w) if self.K is None else min(self.K, len(tokens_w))
        top = np.argpartition(-tokens_w, k - 1)[:k] if k < len(tokens_w) else np.arange(k)
        top = [int(i) for i in top if tokens_w[i] > NEG_INF]
        exact_tokens = [self.iter_potential.vocab[i] for i in top]
        exact_logws = await self.exact_logws(view, top)
        skip = set(top)
        rest = await self.walk(view, self.token_masses(view.w, skip), skip, draw)
        return SetSample(exact_tokens + rest.tokens, exact_logws + rest.logws, rest.logp, self.target)

    async def exact_logws(self, view: _Walk, tokens: list[int]) -> list[float]:
        """`log w(x) + log Φ(x)` of each token, walking their byte paths level by level and
        asking the item potential only at nodes whose prefix still has weight: by the
        trie's level walk over the sub-trie of their paths, or, for at most `FEW_PATHS`
        tokens (where a level's array operations cost more than the level itself), along
        each path; both add `log Φ` in the same order, so they agree exactly."""
        if len(tokens) <= self.FEW_PATHS:
            log_phi = await self._path_log_phi(view, tokens)
        else:
            log_phi = await self._trie_log_phi(view, tokens)
        return [float(view.w[i]) + lp for i, lp in zip(tokens, log_phi)]

    FEW_PATHS = 64

    async def _trie_log_phi(self, view: _Walk, tokens: list[int]) -> list[float]:
        """`log Φ` of `tokens` by one level walk of the sub-trie of their paths."""
        trie = self.trie
        leaves = trie.leaf[np.asarray(tokens, dtype=np.int64)]

        async def step(parent_phi, parents, nodes):
            """`log Φ(n) = log Φ(p) + row(p)[byte(n)]`, asking rows at the live parents."""
            parents = parents.tolist()
            await view.fetch(parents)
            rows, symbol = view.rows, trie.symbol
            return [phi + rows[p][symbol[n]] for phi, p, n in zip(parent_phi.tolist(), parents, nodes.tolist())]

        within = trie.ancestors(leaves)
        log_phi = np.empty(trie.n_nodes)  # only the nodes `within` are read
        log_phi[within] = NEG_INF
        log_phi[0] = 0.0
        await trie.awalk(log_phi, step, _has_weight, within=within)
        return log_phi[leaves].tolist()

    async def _path_log_phi(self, view: _Walk, tokens: list[int]) -> list[float]:
        """`log Φ` of `tokens`, one depth at a time along each token's path."""
        trie = self.trie
        paths = [trie.path(int(trie.leaf[i])) for i in tokens]
        nodes = [0] * len(tokens)
        log_phi = [0.0] * len(tokens)
        for depth in range(max((len(p) for p in paths), default=0)):
            live = [k for k, p in enumerate(paths) if depth < len(p) and log_phi[k] > NEG_INF]
            await view.fetch([nodes[k] for k in live])
            for k in live:
                b = paths[k][depth]
                log_phi[k] += view.rows[nodes[k]][b]
                nodes[k] = trie.children[nodes[k]][b]
        return log_phi


def _has_weight(logw: np.ndarray) -> np.ndarray:
    return logw > NEG_INF


class SetTokenSampler(TokenSampler):
    """Draws one token from a properly weighted set: `token ~ ŵ / Σ_S ŵ`,
    `logw = log Σ_{x∈S} ŵ(x)`.

    Args:
        set_sampler: a `SetSampler` (e.g. `EagerSetSampler`, `TopKSetSampler`).
    """

    def __init__(self, set_sampler: SetSampler):
        if not isinstance(set_sampler, SetSampler):
            raise TypeError(f"SetTokenSampler needs a SetSampler, got {type(set_sampler).__name__}")
        self.set_sampler = set_sampler
        super().__init__(set_sampler.target)

    async def sample(self, context, draw=None):
        """A set `S` with weights `ŵ`, then `token ~ ŵ / Σ_S ŵ` over its tokens in
        budget (`genlm.control.sampler.budget`; `ŵ · [in budget]` is properly weighted
        for the target with the tokens that cannot end in time removed)."""
        s, budget = await gather_or_cancel(
            self.set_sampler.sample_set(list(context), draw=draw), budget_of(self.target, [list(context)])
        )
        target = self.target
        row = s.row(target)
        if budget is not None:
            row[~budget.ok[0]] = NEG_INF
        d = await draw_from(target.make_lazy_weights(row), draw=draw)
        return d.token, (d.logw if budget is None else budget.weight(0, d.logw)), s.logp + d.logp

    async def logw_eos(self, context):
        return await self.set_sampler.logw_eos(list(context))

    def cleanup(self) -> Cleaned:
        return cleaned(self.set_sampler.cleanup())


def eager_token_sampler(iter_potential: Potential, item_potential: Potential) -> SetTokenSampler:
    """A `SetTokenSampler` over an `EagerSetSampler`."""
    return SetTokenSampler(EagerSetSampler(iter_potential, item_potential))


def topk_token_sampler(iter_potential: Potential, item_potential: Potential, K: int | None) -> SetTokenSampler:
    """A `SetTokenSampler` over a `TopKSetSampler` with `K` exact tokens (all when None)."""
    return SetTokenSampler(TopKSetSampler(iter_potential, item_potential, K))


__all__ = [
    "EagerSetSampler",
    "SetSample",
    "SetSampler",
    "SetTokenSampler",
    "SetTokenTypeError",
    "TopKSetSampler",
    "TrieSetSampler",
    "eager_token_sampler",
    "topk_token_sampler",
]
