"""`Coerced`: a potential seen over another vocabulary through a context map `f`."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from genlm.control._cleanup import Cleaned, cleaned
from genlm.control._trie import SymbolTrie
from genlm.control._warn import warn_user
from genlm.control.potential import fast_paths
from genlm.control.potential.base import Potential
from genlm.control.potential.tables import VocabTables
from genlm.control.weights import NEG_INF, LazyWeights, LazyWeightsBatch, host_rows
from genlm.control.window import gather_or_cancel


def is_join(f: Callable, separators: tuple = (b"", "")) -> bool:
    """Whether `f` is the `join` of one of `separators` (by default `b"".join` or
    `"".join`, which distribute over concatenation)."""
    return getattr(f, "__name__", None) == "join" and getattr(f, "__self__", None) in separators


def has_vectorised_logw_next(potential: Potential) -> bool:
    """Whether `potential` computes `logw_next` other than from one `prefix` call per
    token (the base class's definition): it overrides `logw_next`, `batch_logw_next`
    or `sparse_logw_next`, or it carries states (`fast_paths.vectorised_logw_next`)."""
    return fast_paths.vectorised_logw_next(potential)


_WARNED: set[type] = set()


def warn_unvectorised(potential: Potential, n_nodes: int) -> None:
    """Warn once per class that a coerced walk over `potential` calls `prefix` per
    (trie node, symbol)."""
    cls = potential.rows_class()
    if cls in _WARNED:
        return
    _WARNED.add(cls)
    warn_user(
        f"{cls.__name__} has no vectorised logw_next, so the coerced logw_next calls its "
        f"prefix once per symbol at each live node of a {n_nodes}-node token trie. "
        "A Boolean constraint can be an AWRS condition, which checks only the drawn "
        "tokens; any potential can be the critic instead (`smc(..., critic=...)`, one "
        "score per particle and step); or implement `batch_logw_next` or "
        "`sparse_logw_next` (see docs/potentials.md, 'Constraints without a vectorised "
        "logw_next')"
    )


def stateful_potential(potential: Potential) -> Potential | None:
    """The potential that carries states for `potential` (see `Potential.state_of`):
    itself when it declares `stateful` (the autobatched view forwards its inner
    potential's states), else None."""
    return fast_paths.carrier(potential)


class CarriedNodes:
    """A stateful potential's states and rows at the trie nodes below one context.

    `state(node)` is the state after `base + path(node)`: its parent's, advanced by
    the node's symbol (`state(0) = state_of(base)`); `row(node)` its `logw_next_of`,
    wrapped as `LazyWeights`. Both are kept once computed.
    """

    def __init__(self, carrier: Potential, trie: SymbolTrie, base: list):
        self.carrier, self.trie = carrier, trie
        self.states: dict[int, Any] = {0: carrier.state_of(base)}
        self.rows: dict[int, LazyWeights] = {}

    def state(self, node: int) -> Any:
        states = self.states
        if node not in states:
            up = []
            while node not in states:
                up.append(node)
                node = int(self.trie.parent[node])
            for n in reversed(up):
                states[n] = self.carrier.advance(states[node], self.trie.symbol[n])
                node = n
        return states[node]

    def row(self, node: int) -> LazyWeights:
        row = self.rows.get(node)
        if row is None:
            carrier = self.carrier
            row = self.rows[node] = carrier.make_lazy_weights(carrier.logw_next_of(self.state(node)))
        return row


def _target_of(target: Any, target_vocab: Any, tables: Any) -> tuple[Any, VocabTables | None]:
    """The target (a potential or a vocabulary; 0.4.1 passed it as `target_vocab=`) and
    its tables: the potential's, or `tables` given for a vocabulary.

    Raises:
        TypeError: neither or both of `target` and `target_vocab`; `tables` that are
            not `VocabTables`.
        ValueError: `tables` over another vocabulary than `target_vocab`.
    """
    if (target is None) == (target_vocab is None):
        raise TypeError("Coerced needs one target: a potential or a vocabulary (target_vocab=)")
    target = target if target is not None else target_vocab
    if isinstance(target, Potential):
        return target, target.tables
    if tables is None:
        return target, None
    if not isinstance(tables, VocabTables):
        raise TypeError(f"tables must be VocabTables (Potential.build_tables), got {type(tables).__name__}")
    if not isinstance(target, (str, bytes)) and hasattr(target, "__iter__"):
        vocab = list(target)
        if len(vocab) != len(tables.vocab) or vocab != list(tables.vocab):
            raise ValueError("tables were built over another vocabulary than the coercion's target")
    return target, tables


class CoercedTrie(NamedTuple):
    """A coercion's `fast_paths.TokenTrie`: `prefix(ctx + [vocab[k]]) ==
    inner.prefix(image(ctx) + trie.path(leaf[k]))`."""

    trie: SymbolTrie
    leaf: np.ndarray
    inner: Potential
    image: Callable[[Sequence[Any]], list]


class Coerced(Potential):
    """`Coerced(p, other, f).prefix(xs) = p.prefix(f(xs))`; likewise `complete`.

    Its vocabulary is `other`'s (pruned to tokens whose image lies in `p`'s vocabulary,
    and in `p.alphabet` where `p` declares one, when `prune=True`). When `f` is
    homomorphic, `logw_next` walks a trie of the
    tokens' images level by level, asking `p.batch_logw_next` once per level for the
    live nodes only, so dead branches cost nothing.

    A subclass that computes every value itself over the target's whole vocabulary
    (the compiled engine's `GuidedCoerced`) passes `walk=False`: no symbol trie is
    built and no token is pruned (its values are still `p.prefix(f(xs))`).

    `Coerced(potential, target_vocab, f, prune=True, homomorphic=None, trie=None,
    tables=None)` is 0.4.1's signature: the target may be given as `target_vocab=`,
    and `tables=` (from `Potential.build_tables(target_vocab)`) shares its tables.

    Raises:
        ValueError: if no token of `other` maps into `p`'s vocabulary.
    """

    def __init__(
        self,
        potential: Potential,
        target: Potential | Sequence[Any] | None = None,
        f: Callable[[list], Any] | None = None,
        prune: bool = True,
        homomorphic: bool | None = None,
        trie: SymbolTrie | None = None,
        tables: VocabTables | None = None,
        *,
        target_vocab: Sequence[Any] | None = None,
        walk: bool = True,
    ):
        target, target_tables = _target_of(target, target_vocab, tables)
        if not callable(f):
            raise TypeError("coerce needs a callable f mapping contexts")
        if not isinstance(target, Potential) and (
            isinstance(target, (str, bytes)) or not hasattr(target, "__iter__")
        ):
            raise TypeError(
                f"coerce needs a Potential or a vocabulary (a list of tokens), got {type(target).__name__}"
            )
        self.potential = potential
        self.f = f
        self.prune = prune
        self.homomorphic = is_join(f) if homomorphic is None else bool(homomorphic)
        if not walk:
            self.trie = None
            super().__init__(list(target) if target_tables is None else None, tables=target_tables)
            return
        target_vocab = target_tables.vocab if target_tables else list(target)
        if trie is not None and len(trie.vocab) != len(target_vocab):
            raise ValueError("the shared trie was built over a different vocabulary")
        self.trie = trie if trie is not None else SymbolTrie.build(target_vocab, f)
        inner = potential.tables.lookup
        if prune:
            live = inner if potential.alphabet is None else potential.alphabet
            keep = [i for i, p in enumerate(self.trie.paths) if all(s in inner and s in live for s in p)]
            if not keep:
                raise ValueError(
                    f"no token of the target vocabulary maps into the vocabulary of {potential!r}"
                )
        else:
            keep = list(range(len(target_vocab)))
        if target_tables is not None and len(keep) == len(target_vocab):
            super().__init__(tables=target_tables)
        else:
            super().__init__([target_vocab[i] for i in keep])
        self._leaf = self.trie.leaf[np.array(keep, dtype=np.int64)]
        miss = len(potential.tables.vocab_eos)
        self._symbol_index = np.array(
            [miss] + [inner.get(s, miss) for s in self.trie.symbol[1:]], dtype=np.int64
        )

    @property
    def token_trie(self) -> CoercedTrie | None:  # type: ignore[override]
        """The trie of the tokens' images when `f` is homomorphic (`fast_paths.TokenTrie`)."""
        if self.trie is None or not self.homomorphic:
            return None
        return CoercedTrie(self.trie, self._leaf, self.potential, self._map)

    @staticmethod
    def build_trie(vocab: Sequence[Any], f: Callable[[list], Any]) -> SymbolTrie:
        """A trie of `f([x])` over `vocab`, to share among coercions over one vocabulary."""
        return SymbolTrie.build(vocab, f)

    def _map(self, context) -> list:
        return list(self.f(list(context)))

    async def prefix(self, context):
        return await self.potential.prefix(self._map(context))

    async def complete(self, context):
        return await self.potential.complete(self._map(context))

    async def batch_prefix(self, contexts):
        return await self.potential.batch_prefix([self._map(c) for c in contexts])

    async def batch_complete(self, contexts):
        return await self.potential.batch_complete([self._map(c) for c in contexts])

    async def logw_next(self, context) -> LazyWeights:
        if not self.homomorphic:
            return await super().logw_next(context)
        trie = self.trie
        if has_vectorised_logw_next(self.potential):
            nodes = _NodeRows(self.potential, self._map(context), trie)
        else:
            warn_unvectorised(self.potential, trie.n_nodes)
            nodes = _PrefixRows(self.potential, self._map(context), trie, self._symbol_index)
        root = await nodes.root()
        padded = {0: np.append(root, NEG_INF)}
        symbol_index = self._symbol_index

        async def step(parent_cum, parents, level):
            """`cum(n) = cum(p) + row(p)[symbol(n)]`, asking rows once per live parent."""
            uniq, pos = np.unique(parents, return_inverse=True)
            need = [int(p) for p in uniq if int(p) not in padded]
            if need:
                for p, w in zip(need, await nodes.rows(need)):
                    padded[p] = np.append(w, NEG_INF)
            block = np.stack([padded[int(p)] for p in uniq])
            return parent_cum + block[pos, symbol_index[level]]

        cum = np.full(trie.n_nodes, NEG_INF)
        cum[0] = 0.0
        await trie.awalk(cum, step, _has_weight)
        logws = np.append(cum[self._leaf], root[-1])
        return self.make_lazy_weights(logws)

    async def batch_logw_next(self, contexts) -> list[LazyWeights]:
        if not self.homomorphic:
            return await super().batch_logw_next(contexts)
        return LazyWeightsBatch(await gather_or_cancel(*(self.logw_next(c) for c in contexts)))

    def spawn(self) -> "Coerced":
        c = object.__new__(Coerced)
        c.__dict__.update(self.__dict__)
        c.potential = self.potential.spawn()
        return c

    def cleanup(self) -> Cleaned:
        return cleaned(self.potential.cleanup())

    def length_hint(self) -> str | None:
        """The inner constraint's `length_hint` (what shortens its texts, for the
        zero-weight warning), where it has one."""
        hint = getattr(self.potential, "length_hint", None)
        return hint() if callable(hint) else None

    def __repr__(self) -> str:
        return f"Coerced({self.potential!r}, |V|={len(self.tables.vocab)})"


class _NodeRows:
    """The inner potential's `logw_next` rows at trie nodes below one mapped context
    `base`: read off carried states when the potential is stateful (`CarriedNodes`),
    else asked for `base + path(node)`."""

    def __init__(self, potential: Potential, base: list, trie: SymbolTrie):
        self.potential, self.base, self.trie = potential, base, trie
        carrier = stateful_potential(potential)
        self.carried = None if carrier is None else CarriedNodes(carrier, trie, base)
        self.paths: dict[int, list] = {0: []}

    async def root(self) -> np.ndarray:
        if self.carried is not None:
            return self.carried.row(0).host()
        return (await self.potential.logw_next(self.base)).host()

    async def rows(self, need: list[int]) -> list[np.ndarray]:
        """Rows at `need`, nodes whose parents were visited before."""
        trie, carried = self.trie, self.carried
        if carried is not None:
            for p in need:
                carried.state(p)
            return [carried.row(p).host() for p in need]
        for p in need:
            self.paths[p] = self.paths[int(trie.parent[p])] + [trie.symbol[p]]
        got = await self.potential.batch_logw_next([self.base + self.paths[p] for p in need])
        return host_rows(got)


def _has_weight(cum: np.ndarray) -> np.ndarray:
    return cum > NEG_INF


class _Pacer:
    """Yields to the event loop after `every` calls or `interval` seconds of work,
    whichever comes first, so that a long synchronous walk stays cancellable."""

    def __init__(self, every: int = 256, interval: float = 0.005):
        self.every, self.interval = every, interval
        self.count, self.since = 0, time.perf_counter()

    async def tick(self, n: int = 1) -> None:
        self.count += n
        if self.count >= self.every or time.perf_counter() - self.since >= self.interval:
            await asyncio.sleep(0)
            self.count, self.since = 0, time.perf_counter()


class _PrefixRows:
    """`logw_next` rows at trie nodes for a potential with only `prefix`/`complete`,
    as the base class defines them, without re-asking what the walk already knows:
    with `P(c) = prefix(c)` and `ctx(n) = base + path(n)`,

        row(n)[x] = P(ctx(n) + [x]) - P(ctx(n)),  row(n)[EOS] = complete(ctx(n)) - P(ctx(n)),

    where `P(ctx(n))` is read off the parent's extensions (one call at the root).
    Calls go through `batch_prefix` in chunks when the potential overrides it, else
    one `prefix` at a time; either way the walk yields to the event loop every few
    milliseconds (`_Pacer`), so cancelling it lands promptly.
    """

    CHUNK = 256

    def __init__(self, potential: Potential, base: list, trie: SymbolTrie, symbol_index: np.ndarray):
        self.potential, self.base, self.trie = potential, base, trie
        self.symbol_index = symbol_index
        self.vocab = self.potential.tables.vocab
        self.batched = type(self.potential).batch_prefix is not Potential.batch_prefix
        self.paths: dict[int, list] = {0: []}
        self.ext: dict[int, np.ndarray] = {}  # node -> P(ctx(node) + [x]) over the vocabulary
        self.pacer = _Pacer()

    async def root(self) -> np.ndarray:
        (logp,) = await self._prefixes([self.base])
        if logp == NEG_INF:
            raise ValueError(f"context {self.base!r} has weight zero under {self.potential!r}")
        return (await self._rows([0], [logp]))[0]

    async def rows(self, need: list[int]) -> list[np.ndarray]:
        """Rows at `need`, nodes whose parents were visited before."""
        trie = self.trie
        parents = [int(trie.parent[p]) for p in need]
        logps = []
        for p, parent in zip(need, parents):
            self.paths[p] = self.paths[parent] + [trie.symbol[p]]
            logps.append(float(self.ext[parent][self.symbol_index[p]]))
        for parent in set(parents):  # each level's parents are asked for once
            del self.ext[parent]
        return await self._rows(need, logps)

    async def _rows(self, need: list[int], logps: list[float]) -> list[np.ndarray]:
        out = []
        for p, logp in zip(need, logps):
            ctx = self.base + self.paths[p]
            ext = await self._prefixes([ctx + [x] for x in self.vocab])
            self.ext[p] = ext
            complete = await self.potential.complete(ctx)
            out.append(np.append(ext, complete) - logp)
        return out

    async def _prefixes(self, contexts: list) -> np.ndarray:
        out = np.empty(len(contexts), dtype=np.float64)
        potential, pacer = self.potential, self.pacer
        if self.batched:
            for i in range(0, len(contexts), self.CHUNK):
                out[i : i + self.CHUNK] = await potential.batch_prefix(contexts[i : i + self.CHUNK])
                await pacer.tick(self.CHUNK)
            return out
        for i, c in enumerate(contexts):
            out[i] = await potential.prefix(c)
            await pacer.tick()
        return out


__all__ = ["CarriedNodes", "Coerced", "CoercedTrie", "SymbolTrie", "has_vectorised_logw_next", "is_join", "stateful_potential"]
