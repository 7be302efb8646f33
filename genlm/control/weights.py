"""Lazy weights over a vocabulary plus EOS, and the array math they need.

Weights are a NumPy float64 array on the host or a torch tensor on a device (see
`genlm.control._device`); every operation keeps them where they are.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from genlm.control._device import (
    as_row_tensor,
    fold_nan_tensor,
    is_tensor,
    logsumexp_rows,
    match,
    stack,
    to_host,
)
from genlm.control._warn import warn_user

NEG_INF = float("-inf")


def logsumexp(x: Any, axis: int | None = None) -> Any:
    """`log Σ exp(x)` along `axis`, exact for rows that are all `-inf` (gives `-inf`).

    A tensor stays on its device along an axis; over all entries the result is a float.
    """
    if is_tensor(x):
        out = logsumexp_rows(x, axis)
        return float(to_host(out)) if axis is None else out
    x = np.asarray(x, dtype=np.float64)
    m = np.max(x, axis=axis, keepdims=True) if x.size else np.array(NEG_INF)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        s = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    if axis is None:
        return float(s.reshape(()))
    return np.squeeze(s, axis=axis)


def fold_nan(x: Any) -> Any:
    """Map NaN log weights to `-inf`; a `+inf` log weight is an error.

    A tensor is folded on its device; its `+inf` entries are reported by the draw
    that reads the row back (checking here would read it back). A NumPy row stays
    float32 when it is float32 and is float64 otherwise.

    Raises:
        ValueError: if any entry of a NumPy row is `+inf`.
    """
    if is_tensor(x):
        return fold_nan_tensor(x)
    x = np.asarray(x)
    if x.dtype != np.float32:  # float32 rows (a model's) stay float32
        x = np.asarray(x, dtype=np.float64)
    if x.size:
        top = x.max()  # NaN when any entry is NaN
        if top < np.inf:
            return x
    if np.isposinf(x).any():
        raise infinite_weight_error()
    nan = np.isnan(x)
    if nan.any():
        x = np.where(nan, NEG_INF, x)
    return x


def infinite_weight_error() -> ValueError:
    """The error for a `+inf` log weight (`fold_nan`'s, and the draw's)."""
    return ValueError(
        "a log weight is +inf: a potential returned an infinite weight, "
        "which no normalized target can have"
    )


class WeightSpaceError(ValueError, AssertionError):
    """`exp()` of weights not in log space, or `log()` of log weights: a `ValueError`
    (ours) and an `AssertionError` (what 0.4.1's check raised)."""


class LazyWeights:
    """Weights over `vocab + [EOS]`, held as one array and looked up by token.

    Args:
        weights: array of length `len(decode)`; log weights when `log=True`. A torch
            tensor stays a tensor on its device (half precision upcast to float32);
            anything else becomes a float64 NumPy array.
        encode: token → index into `weights`.
        decode: index → token.
        log: whether `weights` are in log space.
        fallback: optional second map (e.g. plain bytes → index) consulted when a
            token is not a key of `encode`. Without one, weights over `Token`s (objects
            with a `byte_string`) take plain bytes too, as in 0.4.1: the first token
            with those bytes, with 0.4.1's `DeprecationWarning`.

    `np.array(weights)` raises `NotImplementedError` (as in 0.4.1): read `.weights`,
    or `.host()` for a NumPy copy.
    """

    __slots__ = ("weights", "encode", "decode", "is_log", "fallback", "_by_bytes")

    def __init__(
        self,
        weights: Any,
        encode: Mapping[Any, int],
        decode: Sequence[Any],
        log: bool = True,
        fallback: Mapping[Any, int] | None = None,
    ):
        if is_tensor(weights):
            weights = as_row_tensor(weights)
        elif not isinstance(weights, np.ndarray):
            weights = np.asarray(weights, dtype=np.float64)
        if weights.shape != (len(decode),):
            raise ValueError(
                f"weights have shape {weights.shape}, expected ({len(decode)},)"
            )
        self.weights = weights
        self.encode = encode
        self.decode = decode
        self.is_log = log
        self.fallback = fallback
        self._by_bytes: dict[bytes, int] | None = None

    def _spawn(self, weights: np.ndarray, log: bool) -> "LazyWeights":
        return LazyWeights(weights, self.encode, self.decode, log, self.fallback)

    def spawn(self, new_weights: Any, log: bool | None = None) -> "LazyWeights":
        """New weights over the same tokens (log space as this one's unless `log` says)."""
        return self._spawn(new_weights, self.is_log if log is None else log)

    def index(self, token: Any) -> int | None:
        """The index of `token`, or None when it is not in the vocabulary."""
        i = self.encode.get(token)
        if i is None:
            if self.fallback is not None:
                i = self.fallback.get(token)
            elif type(token) is bytes and self.decode and hasattr(self.decode[0], "byte_string"):
                i = self._bytes_index(token)
        return i

    def _bytes_index(self, token: bytes) -> int | None:
        """The first `Token` whose bytes are `token` (0.4.1's deprecated lookup)."""
        if self._by_bytes is None:
            self._by_bytes = {}
            for k, t in enumerate(self.decode):
                b = getattr(t, "byte_string", None)
                if isinstance(b, bytes):
                    self._by_bytes.setdefault(b, k)
        i = self._by_bytes.get(token)
        if i is not None:
            warn_user(
                "Indexing LazyWeights by bytes is deprecated: index by the Token "
                "(e.g. from llm.tokenize()); plain bytes give the first token with them",
                DeprecationWarning,
            )
        return i

    def __array__(self, dtype: Any = None, copy: Any = None):
        raise NotImplementedError(
            "LazyWeights is not an array: read .weights (or .host() for a NumPy copy)"
        )

    def __getitem__(self, token: Any) -> float:
        i = self.index(token)
        if i is None:
            return NEG_INF if self.is_log else 0.0
        if is_tensor(self.weights):
            return float(to_host(self.weights[i]))
        return float(self.weights[i])

    def host(self) -> np.ndarray:
        """The weights as a float64 NumPy array (a tensor is read back once)."""
        return to_host(self.weights)

    def __len__(self) -> int:
        return len(self.decode)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.decode)

    def keys(self) -> Sequence[Any]:
        return self.decode

    def values(self) -> np.ndarray:
        return self.weights

    def items(self) -> Iterator[tuple[Any, float]]:
        return zip(self.decode, self.host().tolist())

    def sum(self) -> float:
        """`log Σ w` in log space, `Σ w` otherwise."""
        if self.is_log:
            return logsumexp(self.weights)
        if is_tensor(self.weights):
            return float(to_host(self.weights.sum()))
        return float(np.sum(self.weights))

    def normalize(self) -> "LazyWeights":
        """Weights divided by their sum (`w - logsumexp(w)` in log space)."""
        w = self.weights
        if self.is_log:
            z = logsumexp_rows(w) if is_tensor(w) else logsumexp(w)
            return self._spawn(w - z, True)
        return self._spawn(w / w.sum(), False)

    def exp(self) -> "LazyWeights":
        """The weights out of log space.

        Raises:
            WeightSpaceError (a ValueError and an AssertionError): not in log space.
        """
        if not self.is_log:
            raise WeightSpaceError("weights are not in log space")
        w = self.weights
        return self._spawn(w.exp() if is_tensor(w) else np.exp(w), False)

    def log(self) -> "LazyWeights":
        """The weights in log space.

        Raises:
            WeightSpaceError (a ValueError and an AssertionError): already in log space.
        """
        if self.is_log:
            raise WeightSpaceError("weights are already in log space")
        if is_tensor(self.weights):
            return self._spawn(self.weights.log(), True)
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
        a, b = match(self.weights, other.weights)
        if self.is_log:
            return self._spawn(a + b, True)
        return self._spawn(a * b, False)

    def __add__(self, other: "LazyWeights") -> "LazyWeights":
        """Pointwise sum (`logaddexp` of log weights)."""
        self._check_aligned(other)
        a, b = match(self.weights, other.weights)
        if self.is_log:
            return self._spawn(a.logaddexp(b) if is_tensor(a) else np.logaddexp(a, b), True)
        return self._spawn(a + b, False)

    def argmax(self) -> Any:
        w = self.weights
        return self.decode[int(to_host(w.argmax())) if is_tensor(w) else int(np.argmax(w))]

    def materialize(self, top: int | None = None) -> dict[Any, float]:
        """A dict token → weight, largest first, of the `top` largest (all by default)."""
        w = self.host()
        order = np.argsort(-w, kind="stable")
        if top is not None:
            order = order[:top]
        return {self.decode[i]: float(w[i]) for i in order}

    def assert_equal(self, other: "LazyWeights", rtol: float = 1e-5, atol: float = 1e-8) -> None:
        """Assert equal weights over the same tokens (matching `-inf` entries too)."""
        self._check_aligned(other)
        np.testing.assert_allclose(self.host(), other.host(), rtol=rtol, atol=atol)

    def assert_equal_unordered(self, other: "LazyWeights", rtol: float = 1e-5, atol: float = 1e-8) -> None:
        """Assert the same tokens with close weights, in any order."""
        assert set(self.decode) == set(other.decode), "the two weights have different tokens (keys do not match)"
        for x in self.decode:
            np.testing.assert_allclose(self[x], other[x], rtol=rtol, atol=atol, err_msg=repr(x))

    def __repr__(self) -> str:
        shown = self.materialize(top=5)
        kind = "log " if self.is_log else ""
        return f"LazyWeights({kind}{shown}{' ...' if len(self) > 5 else ''})"


class LazyWeightsBatch(list):
    """The rows of one `batch_logw_next`: a list of `LazyWeights`, one per context, that
    also answers as 0.4.1's one batched `LazyWeights` of shape `[N, V+1]`.

    Indexing, iteration and `len` are the list's (row `i` is the `LazyWeights` of
    context `i`); `weights` is the `[N, V+1]` block (the rows are views of it when
    the batch was built from a block, else it is stacked from them), and `spawn`,
    `normalize`, `host`, `assert_equal`, `encode`, `decode` and `is_log` act on the
    whole batch. Rows stay where they are: a tensor block stays on its device.
    """

    def __init__(self, rows: Sequence[LazyWeights] = (), block: Any = None):
        super().__init__(rows)
        self._block = block
        # the arrays the rows held when the block was given: the block answers for
        # the rows only while each row still holds its array (`rows_block`)
        self._views = tuple(r.weights for r in self) if block is not None else ()

    @classmethod
    def of_block(
        cls,
        block: Any,
        encode: Mapping[Any, int],
        decode: Sequence[Any],
        log: bool = True,
        fallback: Mapping[Any, int] | None = None,
    ) -> "LazyWeightsBatch":
        """One `LazyWeights` per row of `block` (a 2-D array or tensor), sharing its memory."""
        if not is_tensor(block) and not isinstance(block, np.ndarray):
            block = np.asarray(block, dtype=np.float64)
        rows = [LazyWeights(row, encode, decode, log, fallback) for row in block]
        return cls(rows, block if len(rows) and rows[0].weights.dtype == block.dtype else None)

    def _first(self) -> LazyWeights:
        if not self:
            raise ValueError("an empty batch of weights has no vocabulary")
        return self[0]

    def rows_block(self) -> Any:
        """The block whose rows, in order, the rows' weights are (a view of its
        memory, no copy), or None: the batch was made from separate rows, or it has
        changed since (a row replaced, added, removed or moved, or a row's `weights`
        reassigned)."""
        block, views = self._block, self._views
        if block is None or len(self) != len(views) or len(block) != len(views):
            return None
        for row, view in zip(self, views):
            if row.weights is not view:
                return None
        return block

    def parts(self, sizes: Sequence[int]) -> list["LazyWeightsBatch"]:
        """The rows cut into consecutive batches of `sizes` rows, each keeping its rows
        of the block as its block (the block is checked once for all of them)."""
        block = self.rows_block()
        out, start = [], 0
        for n in sizes:
            stop = start + n
            out.append(LazyWeightsBatch(self[start:stop], None if block is None else block[start:stop]))
            start = stop
        return out

    @property
    def weights(self) -> Any:
        """The `[N, V+1]` block of the rows' weights (the rows' own block where they
        are views of one, in order; else stacked from the rows)."""
        block = self.rows_block()
        if block is not None:
            return block
        first = self._first().weights
        if is_tensor(first):
            import torch

            return torch.stack([r.weights for r in self])
        return np.stack([r.weights for r in self])

    @property
    def encode(self) -> Mapping[Any, int]:
        return self._first().encode

    @property
    def decode(self) -> Sequence[Any]:
        return self._first().decode

    @property
    def is_log(self) -> bool:
        return self._first().is_log

    def host(self) -> np.ndarray:
        """The block as a float64 NumPy array (tensors read back in one transfer)."""
        return np.stack(host_rows(self)) if self else np.zeros((0, 0))

    def spawn(self, new_weights: Any, log: bool | None = None) -> "LazyWeights | LazyWeightsBatch":
        """New weights over the same tokens: a batch for a 2-D block, one row for 1-D."""
        first = self._first()
        log = first.is_log if log is None else log
        if getattr(new_weights, "ndim", np.ndim(new_weights)) == 2:
            return LazyWeightsBatch.of_block(new_weights, first.encode, first.decode, log, first.fallback)
        return first.spawn(new_weights, log)

    def normalize(self) -> "LazyWeightsBatch":
        """Each row divided by its sum."""
        return LazyWeightsBatch([r.normalize() for r in self])

    def assert_equal(self, other: Sequence[LazyWeights], rtol: float = 1e-5, atol: float = 1e-8) -> None:
        """Assert the same number of rows, each equal to `other`'s."""
        assert len(self) == len(other), f"{len(self)} rows against {len(other)}"
        for mine, theirs in zip(self, other):
            mine.assert_equal(theirs, rtol=rtol, atol=atol)


def weights_block(rows: Sequence[LazyWeights]) -> Any:
    """The rows' weights as one 2-D block: a batch's own block where its rows are
    views of it, in order (`LazyWeightsBatch.rows_block`; read-only on the host, as
    `stack`'s views are), else the rows stacked (a view where they lie back to back in
    one buffer, else a copy)."""
    if isinstance(rows, LazyWeightsBatch):
        block = rows.rows_block()
        if block is not None:
            if isinstance(block, np.ndarray) and block.flags.writeable:
                block = block.view()
                block.flags.writeable = False
            return block
    return stack([r.weights for r in rows])


def _read_back_all(parts: Sequence[Any]) -> list[np.ndarray]:
    """Arrays of equal shape as float64 NumPy; the tensors among them are read back
    together, in one transfer (on the first tensor's device, in their common dtype)."""
    out: list[Any] = [None] * len(parts)
    tensors = [i for i, x in enumerate(parts) if is_tensor(x)]
    if tensors:
        import torch

        first = parts[tensors[0]]
        dtype = first.dtype if all(parts[i].dtype == first.dtype for i in tensors) else torch.float64
        block = to_host(torch.stack([parts[i].to(first.device, dtype) for i in tensors]))
        for k, i in enumerate(tensors):
            out[i] = block[k]
    return [np.asarray(x, dtype=np.float64) if o is None else o for x, o in zip(parts, out)]


def host_rows(rows: Sequence[LazyWeights]) -> list[np.ndarray]:
    """Each row's weights as a float64 NumPy array; tensor rows are read back
    together (one transfer)."""
    return _read_back_all([r.weights for r in rows])


def eos_column(rows: Sequence[LazyWeights]) -> list[float]:
    """The EOS entry (the last) of each row, the tensor rows' read back in one
    transfer; NaN entries are `-inf`."""
    values = [float(x[0]) for x in _read_back_all([r.weights[-1:] for r in rows])]
    return [NEG_INF if v != v else v for v in values]


__all__ = ["host_rows", "eos_column", "weights_block", "LazyWeights", "LazyWeightsBatch", "logsumexp", "fold_nan", "NEG_INF", "WeightSpaceError"]
