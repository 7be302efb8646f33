"""One trie of a vocabulary's token images, and its level-by-level walk.

`SymbolTrie.build(vocab, f)` holds the trie of `f([x])` over the tokens `x` (for
byte-string tokens and `f = b"".join`, the trie of their bytes). Nodes are
numbered as the build first reaches them, so a node's parent always has a smaller
id; the nodes of one depth form one array (`levels`).

`walk(values, step, live)` computes a value per node from its parent's, one depth
at a time, and only below live nodes:

    values[n] = step(values[parent(n)], parent(n), n)   for every n whose parent p has live(values[p])

with `step` and `live` vectorised over the nodes of a level. Coerced potentials
(a cumulative log weight per node), automaton walks (a state per node) and the set
samplers' exact weights all use this one walk; `awalk` is the same walk with an
async `step` (one awaited call per level).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterator, Sequence

import numpy as np

if TYPE_CHECKING:  # scipy is imported on use (a quarter second at start-up)
    import scipy.sparse as sp

Step = Callable[[Any, np.ndarray, np.ndarray], Any]
Live = Callable[[Any], np.ndarray]


@dataclass(frozen=True, eq=False)
class SymbolTrie:
    """The trie of `f([x])` over the tokens `x` of a vocabulary.

    Node 0 is the root; every node's id is larger than its parent's.

    Attributes:
        vocab: the tokens the trie was built from.
        paths: `tuple(f([x]))` for each token.
        leaf: node reached by each token's path.
        parent, symbol: per node (the root's parent is -1, its symbol None).
        levels: per depth d ≥ 1, the array of node ids at that depth.
    """

    holds_no_models = True  # token tables only: a run's walk for its models skips them (_held)

    vocab: list
    paths: list
    leaf: np.ndarray
    parent: np.ndarray
    symbol: list
    levels: list

    @classmethod
    def build(cls, vocab: Sequence[Any], f: Callable[[list], Any]) -> "SymbolTrie":
        """The trie of `tuple(f([x]))` over `vocab`."""
        paths = [tuple(f([x])) for x in vocab]
        children: list[dict] = [{}]
        parent, symbol, depth = [-1], [None], [0]
        leaf = np.empty(len(paths), dtype=np.int64)
        for i, path in enumerate(paths):
            node = 0
            for s in path:
                nxt = children[node].get(s)
                if nxt is None:
                    nxt = len(parent)
                    children[node][s] = nxt
                    children.append({})
                    parent.append(node)
                    symbol.append(s)
                    depth.append(depth[node] + 1)
                node = nxt
            leaf[i] = node
        depth_arr = np.array(depth)
        order = np.argsort(depth_arr, kind="stable")
        levels = [order[depth_arr[order] == d] for d in range(1, int(depth_arr.max()) + 1)]
        return cls(list(vocab), paths, leaf, np.array(parent), symbol, levels)

    @property
    def n_nodes(self) -> int:
        return len(self.parent)

    # The walk -------------------------------------------------------------------

    def frontier(self, values: Any, live: Live, within: np.ndarray | None = None) -> Iterator[tuple]:
        """Per depth, `(nodes, parents, values[parents])`: the nodes (among `within`, node
        ids closed under parents such as `ancestors` gives, when given) whose parents
        have `live(values[parents])`. Reads `values` as the caller fills it, so a level
        sees the one before; stops at the first depth with no such node."""
        for level, parents in self._level_pairs if within is None else self._sublevel_pairs(within):
            at_parents = values[parents]
            ok = live(at_parents)
            if ok.all():
                yield level, parents, at_parents
            elif ok.any():
                yield level[ok], parents[ok], at_parents[ok]
            else:
                return

    def walk(self, values: Any, step: Step, live: Live, within: np.ndarray | None = None) -> Any:
        """Fill `values` (indexed by node; the caller sets the root's) level by level:
        `values[n] = step(values[p], p, n)` for the nodes `n` below live parents `p`
        (see `frontier`); other nodes keep what `values` held. Returns `values`."""
        for nodes, parents, at_parents in self.frontier(values, live, within):
            values[nodes] = step(at_parents, parents, nodes)
        return values

    async def awalk(
        self, values: Any, step: Callable[[Any, np.ndarray, np.ndarray], Awaitable[Any]], live: Live,
        within: np.ndarray | None = None,
    ) -> Any:
        """`walk` with an async `step`, awaited once per level."""
        for nodes, parents, at_parents in self.frontier(values, live, within):
            values[nodes] = await step(at_parents, parents, nodes)
        return values

    def ancestors(self, nodes: Sequence[int]) -> np.ndarray:
        """`nodes` and every node on their paths from the root (the root included), as
        sorted node ids: the `within` of a walk along these nodes' paths only."""
        seen: set[int] = {0}
        parent = self.parent
        for n in nodes:
            n = int(n)
            while n not in seen:
                seen.add(n)
                n = parent.item(n)
        return np.array(sorted(seen), dtype=np.int64)

    def sublevels(self, within: np.ndarray) -> list[np.ndarray]:
        """`levels` restricted to the node ids `within` (the root left out)."""
        return [level for level, _ in self._sublevel_pairs(within)]

    def _sublevel_pairs(self, within: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per depth, the nodes of `within` there (ascending) and their parents."""
        by_depth: list[list[int]] = []
        depth = self.depth
        for n in np.asarray(within, dtype=np.int64).tolist():
            d = depth.item(n)
            if d:
                while len(by_depth) < d:
                    by_depth.append([])
                by_depth[d - 1].append(n)
        out = []
        for level in by_depth:
            level = np.array(level, dtype=np.int64)
            out.append((level, self.parent[level]))
        return out

    @cached_property
    def _level_pairs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per depth, its nodes and their parents."""
        return [(level, self.parent[level]) for level in self.levels]

    @cached_property
    def depth(self) -> np.ndarray:
        """Per node, its depth (the root's is 0)."""
        out = np.zeros(self.n_nodes, dtype=np.int64)
        for d, level in enumerate(self.levels, start=1):
            out[level] = d
        return out

    # Per-node views (built on first use) ------------------------------------------

    @cached_property
    def children(self) -> list[dict]:
        """Per node, dict symbol → child node."""
        out: list[dict] = [{} for _ in range(self.n_nodes)]
        parent, symbol = self.parent, self.symbol
        for node in range(1, self.n_nodes):
            out[int(parent[node])][symbol[node]] = node
        return out

    @cached_property
    def kid_symbols(self) -> list[np.ndarray]:
        """Per node, its children's symbols as an int array (in the order of `children`)."""
        return [np.fromiter(c.keys(), np.int64, len(c)) for c in self.children]

    @cached_property
    def kid_nodes(self) -> list[np.ndarray]:
        """Per node, its children as an array (in the order of `children`)."""
        return [np.fromiter(c.values(), np.int64, len(c)) for c in self.children]

    @cached_property
    def ends(self) -> list[list[int]]:
        """Per node, the indices of the tokens whose paths end there."""
        out: list[list[int]] = [[] for _ in range(self.n_nodes)]
        for i, leaf in enumerate(self.leaf.tolist()):
            out[leaf].append(i)
        return out

    @cached_property
    def _path_memo(self) -> dict[int, list]:
        return {0: []}

    def path(self, node: int) -> list:
        """The symbols from the root to `node`."""
        memo = self._path_memo
        up = []
        while node not in memo:
            up.append(node)
            node = int(self.parent[node])
        path = memo[node]
        for n in reversed(up):
            path = memo[n] = path + [self.symbol[n]]
        return path

    @cached_property
    def subtree(self) -> sp.csr_matrix:
        """`A[node, token] = 1` when `node` lies on the path from the root to the token's leaf."""
        import scipy.sparse as sp

        rows, cols = [], []
        parent = self.parent.tolist()
        for i, leaf in enumerate(self.leaf.tolist()):
            node = leaf
            while node >= 0:
                rows.append(node)
                cols.append(i)
                node = parent[node]
        ones = np.ones(len(rows))
        return sp.csr_matrix((ones, (rows, cols)), shape=(self.n_nodes, len(self.leaf)))

    def masses(self, token_weights: np.ndarray) -> np.ndarray:
        """`M(node) = Σ` of `token_weights` over the tokens in the node's subtree
        (one sparse product with the node × token ancestor matrix)."""
        return self.subtree @ np.asarray(token_weights, dtype=np.float64)


__all__ = ["SymbolTrie"]
