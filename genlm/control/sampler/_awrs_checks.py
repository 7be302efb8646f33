"""What AWRS has learnt of its condition after one context, so that nothing is asked twice.

A condition is a function of the context, so an answer found by one search serves
every later search after the same context: the other particles of a step that share
it, the next draws from it. `Known` holds the answers after one context; the sampler
keeps them per context in a bounded LRU, and `Checks` answers a set of tokens from
them, asking the condition only about the rest.

A coercion through a homomorphic map declares its token trie
(`fast_paths.TokenTrie`): `prefix(ctx + [x]) = inner.prefix(image(ctx) + path(x))`,
and a node whose prefix is -inf has only such nodes below it. So an answer is kept
per trie node: a token is rejected without a call when a node on its path is known
dead, accepted when its own node is known live (an accepted token makes every node
on its path live). A rejected token makes the nodes above it, up to its deepest
ancestor known live, doubted. A token drawn later whose path leaves the live nodes
through a doubted node (one byte below the known-live frontier) has that node asked
about first: when it is dead, the token and every other token below it are settled
by that one call (after a context where the condition allows only a few first
bytes, a few calls settle most of the vocabulary); when it is live, the frontier
moves one byte down and the token's own node is asked about next. Compared with
asking about the frontier node at every reject, this costs the same calls where a
second token below the node is drawn, and one call less where none is.

Concurrent searches after one context (the particles of a step) share the calls in
flight too: a token or node that another search is asking about is awaited, not asked
again (`Known.settle`).

Only the condition's own answers are kept and used, so a search draws the same
tokens, takes the same decisions and returns the same weights as one that checks
every drawn token; what changes is how many calls it makes.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Hashable, Iterable

import numpy as np

from genlm.control._lru import LRU
from genlm.control.sampler._awrs_exact import boolean_value
from genlm.control.window import gather_or_cancel

KEPT_CONTEXTS = 256  # contexts whose answers a sampler keeps


class Known:
    """The condition's answers known after one context.

    Attributes:
        tokens: support position (EOS's included) -> allowed, for conditions
            checked token by token.
        live, dead: trie nodes known live / dead, for conditions with a token trie.
        doubted: trie nodes, not known live, above a node known dead.
        eos: whether EOS is allowed there (None: not asked yet).
        asking: the keys (support positions, trie nodes, `"eos"`) a call is asking
            about now, each with the future of its answer.
    """

    __slots__ = ("tokens", "live", "dead", "doubted", "eos", "asking")

    def __init__(self):
        self.tokens: dict[int, bool] = {}
        self.live: set[int] = set()
        self.dead: set[int] = set()
        self.doubted: set[int] = set()
        self.eos: bool | None = None
        self.asking: dict[Hashable, asyncio.Future] = {}

    async def settle(
        self,
        keys: Iterable[Hashable],
        ask: Callable[[list], Awaitable[list[bool]]],
        record: Callable[[list, list[bool]], None],
    ) -> tuple[dict, int]:
        """The answers for distinct `keys`, none known yet: `ask` is called about those
        no other call is asking about (and `record` keeps its answers before anyone
        else can look), the others' answers are awaited. Returns the answers by key
        and the keys this call asked about. A call that was cancelled or failed
        leaves its keys to be asked again by those waiting on them."""
        out: dict = {}
        calls = 0
        keys = list(keys)
        while keys:
            asking = self.asking
            mine = [k for k in keys if k not in asking]
            theirs: dict[int, tuple[asyncio.Future, list]] = {}
            for k in keys:
                if k in asking:
                    theirs.setdefault(id(asking[k]), (asking[k], []))[1].append(k)
            if mine:
                future = asyncio.get_running_loop().create_future()  # one call's answers by key
                asking.update(dict.fromkeys(mine, future))
                try:
                    values = list(await ask(mine))
                    record(mine, values)
                    future.set_result(dict(zip(mine, values)))
                finally:
                    for k in mine:
                        del asking[k]
                    if not future.done():
                        future.cancel()  # failed: the waiters ask again
                out.update(future.result())
                calls += len(mine)
            keys = []
            for future, waiting in theirs.values():
                try:
                    got = await asyncio.shield(future)
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if not future.cancelled() or (task is not None and task.cancelling()):
                        raise
                    keys += waiting  # its asker stopped: ask again
                    continue
                out.update((k, got[k]) for k in waiting)
        return out, calls


class TrieIndex:
    """A token trie as the plain lists a check walks (built once per sampler)."""

    def __init__(self, token_trie: Any, inner: Any):
        self.trie = token_trie.trie
        self.image = token_trie.image
        self.inner = inner  # the inner potential, autobatched when the sampler is
        self.leaf: list[int] = np.asarray(token_trie.leaf).tolist()
        self.parent: list[int] = self.trie.parent.tolist()

    def settled(self, known: Known, node: int) -> bool | None:
        """A node's answer when known from itself or a dead ancestor, else None."""
        if node in known.live:
            return True
        parent, dead = self.parent, known.dead
        while node > 0:
            if node in dead:
                return False
            node = parent[node]
        return None

    def mark_live(self, known: Known, node: int) -> None:
        """`node` and every node above it are live."""
        parent, live = self.parent, known.live
        while node > 0 and node not in live:
            live.add(node)
            node = parent[node]

    def frontier(self, known: Known, node: int) -> int:
        """The node on `node`'s path just below its deepest ancestor known live (the
        root counts as live); `node` itself when its parent is live."""
        parent, live = self.parent, known.live
        below, up = node, parent[node]
        while up > 0 and up not in live:
            below, up = up, parent[up]
        return below

    def mark_dead(self, known: Known, node: int) -> None:
        """`node` is dead; the nodes above it not known live become doubted."""
        known.dead.add(node)
        parent, live, doubted = self.parent, known.live, known.doubted
        node = parent[node]
        while node > 0 and node not in live and node not in doubted:
            doubted.add(node)
            node = parent[node]


class Checks:
    """The condition's answers for tokens after one context, from what is known and
    from calls for the rest (see the module docstring)."""

    def __init__(self, condition: Any, allowed_next: Any, index: TrieIndex | None, context: list, known: Known):
        self.condition, self.allowed_next, self.index = condition, allowed_next, index
        self.context, self.known = context, known
        self.eos = len(condition.vocab)

    def known_of(self, positions: np.ndarray) -> np.ndarray:
        """Per position, 1 (allowed) or 0 (rejected) where known without a call, else -1."""
        known, eos, index = self.known, self.eos, self.index
        out = np.full(len(positions), -1, dtype=np.int8)
        for j, p in enumerate(positions.tolist()):
            if index is not None and self.allowed_next is None:
                got = known.eos if p == eos else index.settled(known, index.leaf[p])
            else:
                got = known.tokens.get(p)
            if got is not None:
                out[j] = got
        return out

    async def answer(self, positions: np.ndarray) -> tuple[np.ndarray, int]:
        """Whether each of the condition's `vocab_eos[positions]` may follow the
        context, and the number of condition calls made."""
        positions = np.asarray(positions, dtype=np.int64)
        if self.index is not None and self.allowed_next is None:
            return await self._by_trie(positions)
        known = self.known.tokens
        unknown = sorted({int(p) for p in positions.tolist() if int(p) not in known})
        calls = 0
        if unknown:
            _, calls = await self.known.settle(unknown, self._ask_tokens, lambda ks, vs: known.update(zip(ks, vs)))
        return np.fromiter((known[int(p)] for p in positions.tolist()), dtype=bool, count=len(positions)), calls

    async def _ask_tokens(self, positions: list[int]) -> list[bool]:
        """The condition's answers for distinct tokens: one `allowed_next` call, else
        `prefix` (`batch_prefix` for several) and `complete` for EOS."""
        if self.allowed_next is not None:
            return np.asarray(await self.allowed_next(self.context, positions), dtype=bool).tolist()
        condition, context, eos = self.condition, self.context, self.eos
        tokens = condition.vocab_eos
        ext = [context + [tokens[p]] for p in positions if p != eos]
        if len(positions) == 1 and ext:
            values = [await condition.prefix(ext[0])]
            done = None
        else:
            values, done = await gather_or_cancel(
                condition.batch_prefix(ext) if ext else _nothing(),
                condition.complete(context) if eos in positions else _nothing(),
            )
            values = [] if values is None else list(values)
        it = iter(values)
        return [boolean_value(condition, done if p == eos else next(it)) for p in positions]

    async def _by_trie(self, positions: np.ndarray) -> tuple[np.ndarray, int]:
        """`answer` through the token trie: at most two calls per token, the doubted
        node on its path first (see the module docstring)."""
        index, known, eos = self.index, self.known, self.eos
        out = np.zeros(len(positions), dtype=bool)
        at_eos = positions == eos
        leaves = [(j, index.leaf[p]) for j, p in enumerate(positions.tolist()) if p != eos]
        ask_eos = bool(at_eos.any()) and known.eos is None
        calls = 0
        for last in (False, True):
            open_: dict[Hashable, list[tuple[int, int]]] = {"eos": []} if ask_eos and not last else {}
            for j, node in leaves:
                got = index.settled(known, node)
                if got is not None:
                    out[j] = got
                    continue
                top = index.frontier(known, node)
                ask = top if not last and top != node and top in known.doubted else node
                open_.setdefault(ask, []).append((j, node))
            if not open_:
                break
            calls += (await self._settle(list(open_)))[1]
            leaves = [pair for pairs in open_.values() for pair in pairs]
        for j, node in leaves:  # a leaf asked about is settled
            out[j] = index.settled(known, node)
        out[at_eos] = bool(known.eos)
        return out, calls

    async def _settle(self, keys: list) -> tuple[list[bool], int]:
        """`Known.settle` of trie nodes and `"eos"`: their answers and the calls made."""
        answers, calls = await self.known.settle(keys, self._ask_keys, self._record)
        return [answers[k] for k in keys], calls

    async def _ask_keys(self, keys: list) -> list[bool]:
        """The condition's answers for trie nodes and `"eos"`, in one pass."""
        nodes = [k for k in keys if k != "eos"]
        values, done = await gather_or_cancel(
            self._ask_nodes(nodes) if nodes else _nothing(),
            self.condition.complete(self.context) if "eos" in keys else _nothing(),
        )
        it = iter(values or [])
        return [boolean_value(self.condition, done) if k == "eos" else next(it) for k in keys]

    def _record(self, keys: list, values: list[bool]) -> None:
        """Keep the answers for trie nodes and `"eos"`."""
        index, known = self.index, self.known
        for key, value in zip(keys, values):
            if key == "eos":
                known.eos = value
            elif value:
                index.mark_live(known, key)
            else:
                index.mark_dead(known, key)

    async def _ask_nodes(self, nodes: list[int]) -> list[bool]:
        """The inner potential's answers at trie nodes below the context's image."""
        index = self.index
        base = list(index.image(self.context))
        path = index.trie.path
        values = await index.inner.batch_prefix([base + list(path(n)) for n in nodes])
        return [boolean_value(self.condition, v) for v in values]


class CheckMemo:
    """A sampler's `Known` answers per context (an LRU of `KEPT_CONTEXTS` entries),
    keyed by the context's image under the token trie when the condition has one (so
    contexts spelling the same bytes share them), else by the context itself."""

    def __init__(self, allowed_next: Any, index: TrieIndex | None):
        self.allowed_next, self.index = allowed_next, index
        self.kept: LRU[Hashable, Known] = LRU(KEPT_CONTEXTS)

    def at(self, condition: Any, context: list) -> Checks:
        """The checks of `condition` after `context`, with what is known there."""
        key: Any = tuple(self.index.image(context)) if self.index is not None else tuple(context)
        try:
            known = self.kept.get_or_make(key, lambda _: Known())
        except TypeError:  # unhashable tokens: nothing kept beyond this call
            known = Known()
        return Checks(condition, self.allowed_next, self.index, context, known)


async def _nothing() -> None:
    return None


__all__ = ["CheckMemo", "Checks", "Known", "TrieIndex"]
