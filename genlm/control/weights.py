"""Lazy weights over a vocabulary plus EOS, and the array math they need."""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence

import numpy as np

NEG_INF = float("-inf")


def logsumexp(x: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    """`log Σ exp(x)` along `axis`, exact for rows that are all `-inf` (gives `-inf`)."""
    x = np.asarray(x, dtype=np.float64)
    m = np.max(x, axis=axis, keepdims=True) if x.size else np.array(NEG_INF)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        s = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    if axis is None:
        return float(s.reshape(()))
    return np.squeeze(s, axis=axis)


def fold_nan(x: np.ndarray) -> np.ndarray:
    """Map NaN log weights to `-inf`; a `+inf` log weight is an error.

    Raises:
        ValueError: if any entry is `+inf`.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.size:
        top = x.max()  # NaN when any entry is NaN
        if top < np.inf:
            return x
    if np.isposinf(x).any():
        raise ValueError(
            "a log weight is +inf: a potential returned an infinite weight, "
            "which no normalized target can have"
        )
    nan = np.isnan(x)
    if nan.any():
        x = np.where(nan, NEG_INF, x)
    return x


class LazyWeights:
    """Weights over `vocab + [EOS]`, held as one array and looked up by token.

    Args:
        weights: array of length `len(decode)`; log weights when `log=True`.
        encode: token → index into `weights`.
        decode: index → token.
        log: whether `weights` are in log space.
        fallback: optional second map (e.g. plain bytes → index) consulted when a
            token is not a key of `encode`.
    """

    __slots__ = ("weights", "encode", "decode", "is_log", "fallback")

    def __init__(
        self,
        weights: Any,
        encode: Mapping[Any, int],
        decode: Sequence[Any],
        log: bool = True,
        fallback: Mapping[Any, int] | None = None,
    ):
        if not isinstance(weights, np.ndarray):
            weights = _to_numpy(weights)
        if weights.shape != (len(decode),):
            raise ValueError(
                f"weights have shape {weights.shape}, expected ({len(decode)},)"
            )
        self.weights = weights
        self.encode = encode
        self.decode = decode
        self.is_log = log
        self.fallback = fallback

    def _spawn(self, weights: np.ndarray, log: bool) -> "LazyWeights":
        return LazyWeights(weights, self.encode, self.decode, log, self.fallback)

    def spawn(self, new_weights: Any, log: bool | None = None) -> "LazyWeights":
        """New weights over the same tokens (log space as this one's unless `log` says)."""
        return self._spawn(new_weights, self.is_log if log is None else log)

    def index(self, token: Any) -> int | None:
        """The index of `token`, or None when it is not in the vocabulary."""
        i = self.encode.get(token)
        if i is None and self.fallback is not None:
            i = self.fallback.get(token)
        return i

    def __getitem__(self, token: Any) -> float:
        i = self.index(token)
        if i is None:
            return NEG_INF if self.is_log else 0.0
        return float(self.weights[i])

    def __len__(self) -> int:
        return len(self.decode)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.decode)

    def keys(self) -> Sequence[Any]:
        return self.decode

    def values(self) -> np.ndarray:
        return self.weights

    def items(self) -> Iterator[tuple[Any, float]]:
        return zip(self.decode, self.weights.tolist())

    def sum(self) -> float:
        """`log Σ w` in log space, `Σ w` otherwise."""
        if self.is_log:
            return logsumexp(self.weights)
        return float(np.sum(self.weights))

    def normalize(self) -> "LazyWeights":
        """Weights divided by their sum (`w - logsumexp(w)` in log space)."""
        if self.is_log:
            return self._spawn(self.weights - logsumexp(self.weights), True)
        return self._spawn(self.weights / np.sum(self.weights), False)

    def exp(self) -> "LazyWeights":
        if not self.is_log:
            raise ValueError("weights are not in log space")
        return self._spawn(np.exp(self.weights), False)

    def log(self) -> "LazyWeights":
        if self.is_log:
            raise ValueError("weights are already in log space")
        with np.errstate(divide="ignore"):
            return self._spawn(np.log(self.weights), True)

    def _check_aligned(self, other: "LazyWeights") -> None:
        if self.is_log != other.is_log:
            raise ValueError("cannot combine log and non-log weights")
        if self.decode is not other.decode and list(self.decode) != list(other.decode):
            raise ValueError("cannot combine weights over different vocabularies")

    def __mul__(self, other: "LazyWeights") -> "LazyWeights":
        """Pointwise product (a sum of log weights)."""
        self._check_aligned(other)
        if self.is_log:
            return self._spawn(self.weights + other.weights, True)
        return self._spawn(self.weights * other.weights, False)

    def __add__(self, other: "LazyWeights") -> "LazyWeights":
        """Pointwise sum (`logaddexp` of log weights)."""
        self._check_aligned(other)
        if self.is_log:
            return self._spawn(np.logaddexp(self.weights, other.weights), True)
        return self._spawn(self.weights + other.weights, False)

    def argmax(self) -> Any:
        return self.decode[int(np.argmax(self.weights))]

    def materialize(self, top: int | None = None) -> dict[Any, float]:
        """A dict token → weight, largest first, of the `top` largest (all by default)."""
        order = np.argsort(-self.weights, kind="stable")
        if top is not None:
            order = order[:top]
        return {self.decode[i]: float(self.weights[i]) for i in order}

    def assert_equal(self, other: "LazyWeights", rtol: float = 1e-5, atol: float = 1e-8) -> None:
        """Assert equal weights over the same tokens (matching `-inf` entries too)."""
        self._check_aligned(other)
        np.testing.assert_allclose(self.weights, other.weights, rtol=rtol, atol=atol)

    def assert_equal_unordered(self, other: "LazyWeights", rtol: float = 1e-5, atol: float = 1e-8) -> None:
        """Assert the same tokens with close weights, in any order."""
        assert set(self.decode) == set(other.decode), "the two weights have different tokens"
        for x in self.decode:
            np.testing.assert_allclose(self[x], other[x], rtol=rtol, atol=atol, err_msg=repr(x))

    def __repr__(self) -> str:
        shown = self.materialize(top=5)
        kind = "log " if self.is_log else ""
        return f"LazyWeights({kind}{shown}{' ...' if len(self) > 5 else ''})"


def _to_numpy(weights: Any) -> np.ndarray:
    try:
        import torch

        if isinstance(weights, torch.Tensor):
            return weights.detach().to("cpu", torch.float64).numpy()
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    return np.asarray(weights, dtype=np.float64)


__all__ = ["LazyWeights", "logsumexp", "fold_nan", "NEG_INF"]
