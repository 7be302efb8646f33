"""Exact checks that a token sampler is properly weighted.

A sampler is properly weighted for its target `t` when, for every `f`,

    E[exp(logw) · f(token)] = Σ_x f(x) · exp(t.logw_next(ctx)[x]).

`enumerate_sampler` computes the left side exactly by running the sampler once per
random path. It needs the sampler to honour the `draw` contract:

- every random choice the sampler makes goes through `draw(options)`, where
  `options` is a dict option → probability (the probabilities of one choice sum to
  one; options with probability zero may be left out);
- `draw` returns one key of `options`;
- apart from `draw`, `sample` is deterministic: the same answers to the same
  sequence of calls give the same path and the same `(token, logw, logp)`.

The helper explores the tree of choice sequences depth first: each run replays a
prefix of earlier answers and then takes the first untried option of each new
choice. A path's probability is the product of the probabilities of its answers.
"""

from __future__ import annotations

import math
from typing import Any, Hashable

import numpy as np

from genlm.control.weights import NEG_INF


class PathLimitExceeded(RuntimeError):
    """The sampler has more random paths than the enumeration allows."""


def _key(token: Any) -> Hashable:
    """A hashable key for a sampled token (units, which are lists, become tuples)."""
    if isinstance(token, list):
        return tuple(_key(t) for t in token)
    return token


class _Replay:
    """A `draw` callback that replays `prefix` and then takes first options."""

    def __init__(self, prefix: list[int]):
        self.prefix = prefix
        self.chosen: list[int] = []
        self.widths: list[int] = []
        self.logp = 0.0

    def __call__(self, options: dict) -> Any:
        live = [(k, p) for k, p in options.items() if p > 0]
        if not live:
            raise ValueError("draw was offered no option with positive probability")
        total = math.fsum(p for _, p in live)
        if not math.isclose(total, 1.0, rel_tol=1e-6):
            raise ValueError(f"draw options sum to {total}, not 1")
        d = len(self.chosen)
        i = self.prefix[d] if d < len(self.prefix) else 0
        self.chosen.append(i)
        self.widths.append(len(live))
        key, p = live[i]
        self.logp += math.log(p)
        return key

    def next_prefix(self) -> list[int] | None:
        """The answers of the next path in depth-first order, or None when done."""
        for d in range(len(self.chosen) - 1, -1, -1):
            if self.chosen[d] + 1 < self.widths[d]:
                return self.chosen[:d] + [self.chosen[d] + 1]
        return None


async def enumerate_sampler(sampler: Any, context: list, max_paths: int = 100_000) -> dict:
    """Exact `log Σ_paths P(path) · exp(logw)` per sampled token.

    Args:
        sampler: a token sampler honouring the `draw` contract (module docstring).
        context: the context to sample after.
        max_paths: bound on the number of random paths explored.

    Returns:
        dict token → log expected weight (lists, such as units, become tuples).
        A token reached only with weight zero maps to `-inf`.

    Raises:
        PathLimitExceeded: if the sampler has more than `max_paths` paths.
        ValueError: if the sampler's `logp` disagrees with the path probability.
    """
    mass: dict[Hashable, list[float]] = {}
    prefix: list[int] | None = []
    n = 0
    while prefix is not None:
        n += 1
        if n > max_paths:
            raise PathLimitExceeded(f"the sampler has more than {max_paths} random paths")
        replay = _Replay(prefix)
        token, logw, logp = await sampler.sample(list(context), draw=replay)
        if logw > NEG_INF and not math.isclose(logp, replay.logp, rel_tol=1e-6, abs_tol=1e-9):
            raise ValueError(
                f"sampler reported logp={logp} for a path of log probability {replay.logp}"
            )
        mass.setdefault(_key(token), []).append(replay.logp + logw)
        prefix = replay.next_prefix()
    return {k: _logsumexp(v) for k, v in mass.items()}


def _logsumexp(xs: list[float]) -> float:
    m = max(xs)
    if m == NEG_INF:
        return NEG_INF
    return m + math.log(math.fsum(math.exp(x - m) for x in xs))


async def expected_logws(sampler: Any, context: list) -> dict:
    """The weights a properly weighted sampler must reproduce: its target's
    `logw_next(context)` as dict token → log weight (zero-weight tokens included)."""
    logws = await sampler.target.logw_next(list(context))
    return {_key(x): float(w) for x, w in zip(logws.decode, logws.host())}


def assert_weights_match(got: dict, expected: dict, rtol: float = 1e-6, atol: float = 1e-10) -> None:
    """Assert `exp(got[x]) ≈ exp(expected[x])` for every token of either dict
    (a token missing from one side has weight zero there)."""
    keys = list(dict.fromkeys([*expected, *got]))
    a = np.exp(np.array([got.get(k, NEG_INF) for k in keys], dtype=np.float64))
    b = np.exp(np.array([expected.get(k, NEG_INF) for k in keys], dtype=np.float64))
    bad = ~np.isclose(a, b, rtol=rtol, atol=atol)
    if bad.any():
        rows = [f"  {k!r}: sampler {a[i]:.10g}, target {b[i]:.10g}" for i, k in enumerate(keys) if bad[i]]
        raise AssertionError("sampler is not properly weighted:\n" + "\n".join(rows))


async def assert_properly_weighted(
    sampler: Any,
    context: list,
    expected: dict | None = None,
    rtol: float = 1e-6,
    atol: float = 1e-10,
    max_paths: int = 100_000,
) -> dict:
    """Assert that `sampler` is properly weighted at `context`, by exact enumeration.

    Checks `Σ_paths P(path) · exp(logw) · [token = x] = exp(t.logw_next(ctx)[x])` for
    every `x` of the target's `vocab + [EOS]` (`expected` replaces the right side,
    e.g. for unit samplers whose tokens are lists).

    Returns:
        The enumerated dict token → log expected weight.
    """
    got = await enumerate_sampler(sampler, context, max_paths=max_paths)
    if expected is None:
        expected = await expected_logws(sampler, context)
    assert_weights_match(got, expected, rtol=rtol, atol=atol)
    return got


__all__ = [
    "PathLimitExceeded",
    "assert_properly_weighted",
    "assert_weights_match",
    "enumerate_sampler",
    "expected_logws",
]
