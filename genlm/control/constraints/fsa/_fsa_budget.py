"""How many tokens a coerced byte automaton still needs to reach acceptance.

With `δ*(q, x)` the state after token `x`'s bytes from state `q` (None where the
token leaves the language), the fewest tokens from `q` to an accepting state is

    d(q) = 0 if q accepts, else 1 + min_x d(δ*(q, x))

a shortest path on the graph of states with one edge per token. The states reachable
from the start are found by one trie walk each (the walk that makes a state's row),
and `d` by one breadth-first pass backwards from the accepting ones. Where more than
`max_states` states are reachable, `d` is bounded below instead by the byte distance
`b(q)` (fewest bytes to acceptance, on the byte automaton) over the longest token:
`d(q) ≥ ⌈b(q) / L⌉`, sound since a token adds at most `L` bytes.

The row a sampler asks for is `d(δ*(q, x))` per next token `x` (`inf` where `x`
leaves the language) and, at EOS, 0 where `q` accepts.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

import numpy as np

INF = float("inf")


def byte_distances(delta: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    """Fewest bytes from each state of the byte automaton to an accepting one (`inf`:
    none); `delta[q, b]` is the state after byte `b` (-1: no arc)."""
    n = len(accepting)
    preds: list[list[int]] = [[] for _ in range(n)]
    for q, t in zip(*np.nonzero(delta >= 0)):
        preds[int(delta[q, t])].append(int(q))
    return _backwards(n, preds, accepting)


def _backwards(n: int, preds: list, accepting: np.ndarray) -> np.ndarray:
    """Unit-cost distances to the accepting states over the predecessor lists."""
    dist = np.full(n, INF)
    queue = deque(int(q) for q in np.flatnonzero(accepting))
    dist[list(queue)] = 0.0
    while queue:
        q = queue.popleft()
        for p in preds[q]:
            if dist[p] == INF:
                dist[p] = dist[q] + 1
                queue.append(p)
    return dist


class TokenDistances:
    """`d(q)` of the module docstring for a coerced automaton, computed on first use.

    Args:
        ends: state `q` → per token, the state after its bytes (-1 where the token
            leaves the language), one trie walk.
        start: the state after the empty context.
        accepting: per automaton state, whether it accepts.
        fallback: per automaton state, a lower bound on `d` (the byte bound).
        max_states: the most reachable states searched for the exact `d`.
    """

    def __init__(
        self,
        ends: Callable[[int], np.ndarray],
        start: int,
        accepting: np.ndarray,
        fallback: Callable[[], np.ndarray],
        max_states: int,
    ):
        self._ends, self._start, self._accepting = ends, start, accepting
        self._fallback, self._max_states = fallback, max_states
        self._dist: np.ndarray | None = None
        self.exact = False

    def of_states(self) -> np.ndarray:
        """`d` per automaton state (`inf` where unreachable or unable to accept)."""
        if self._dist is None:
            self._dist = self._search()
        return self._dist

    def _search(self) -> np.ndarray:
        n = len(self._accepting)
        succ: dict[int, np.ndarray] = {}
        queue = deque([self._start])
        while queue:
            q = queue.popleft()
            if q in succ:
                continue
            if len(succ) >= self._max_states:
                return np.asarray(self._fallback(), dtype=np.float64)
            ends = self._ends(q)
            succ[q] = nxt = np.unique(ends[ends >= 0])
            queue.extend(int(t) for t in nxt if int(t) not in succ)
        preds: list[list[int]] = [[] for _ in range(n)]
        for q, nxt in succ.items():
            for t in nxt.tolist():
                preds[t].append(q)
        reached = np.zeros(n, dtype=bool)
        reached[list(succ)] = True
        self.exact = True
        return _backwards(n, preds, self._accepting & reached)

    def row(self, q: int) -> np.ndarray:
        """`d(δ*(q, x))` per token `x`, then the EOS entry (0 where `q` accepts)."""
        dist = self.of_states()
        ends = self._ends(q)
        out = np.full(len(ends) + 1, INF)
        live = ends >= 0
        out[:-1][live] = dist[ends[live]]
        out[-1] = 0.0 if self._accepting[q] else INF
        return out


__all__ = ["TokenDistances", "byte_distances"]
