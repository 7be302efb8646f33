"""`Ensemble`: two language models' next-token distributions combined by a weighted mean."""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

import numpy as np

from genlm.control._cleanup import Cleaned, cleaned
from genlm.control.potential.base import Potential
from genlm.control.weights import NEG_INF, LazyWeights, host_rows, logsumexp
from genlm.control.window import gather_or_cancel

NAMED_EXPONENTS = {
    "sum": 1.0,
    "mixture": 1.0,
    "arithmetic": 1.0,
    "prod": 0.0,
    "geometric": 0.0,
    "harmonic": -1.0,
    "min": -math.inf,
    "max": math.inf,
}
"""Each named operation's power-mean exponent `r` (see `power_mean`)."""

_POWER_NAME = re.compile(r"^p(m?)(\d+(?:\.\d*)?|\.\d+)$|^p(-\d+(?:\.\d*)?)$")
OPS = (*NAMED_EXPONENTS, "power", "p<r>", "pm<r>")


class EnsembleOpError(TypeError, ValueError):
    """An `op` that is neither an operation's name nor a real exponent: a `TypeError`
    (ours) that is also a `ValueError` (genlm-control 0.4.1's type for it)."""


def op_exponent(op: str | float, exponent: float | None = None) -> float:
    """The power-mean exponent `r` an operation stands for.

    `"sum"`, `"mixture"`, `"arithmetic"`: r = 1; `"prod"`, `"geometric"`: r = 0;
    `"harmonic"`: r = -1; `"min"`: r = -inf; `"max"`: r = +inf; `"power"`: r =
    `exponent`; `"p<r>"` (e.g. `"p2"`, `"p0.5"`, `"p-2"`) and `"pm<r>"` (minus,
    e.g. `"pm2.5"` is r = -2.5): the number in the name; a real number (0.4.1's
    form, e.g. `2.5`): that number (`±inf` are `max`/`min`).

    Raises:
        ValueError: an unknown name (the message lists the choices), `"power"`
            without a finite `exponent`, an `exponent` with another name, or a NaN.
        EnsembleOpError (a TypeError and a ValueError): `op` is neither a string
            nor a real number.
    """
    if isinstance(op, (int, float, np.integer, np.floating)) and not isinstance(op, (bool, np.bool_)):
        if exponent is not None:
            raise ValueError(f"exponent= is only used with op='power', got op={op!r}")
        if math.isnan(op):
            raise ValueError("op is NaN: give an operation's name or a real power-mean exponent")
        return float(op)
    if not isinstance(op, str):
        raise EnsembleOpError(
            f"op must be a string naming the operation or a real power-mean exponent, "
            f"got {op!r}; choose one of {list(OPS)}"
        )
    if exponent is not None and op != "power":
        raise ValueError(f"exponent= is only used with op='power', got op={op!r}")
    if op in NAMED_EXPONENTS:
        return NAMED_EXPONENTS[op]
    if op == "power":
        if exponent is None or isinstance(exponent, bool) or not isinstance(exponent, (int, float)):
            raise ValueError(f"op='power' needs a real exponent=, got {exponent!r}")
        if not math.isfinite(exponent):
            raise ValueError(
                f"op='power' needs a finite exponent (use 'min'/'max'), got {exponent!r}"
            )
        return float(exponent)
    m = _POWER_NAME.match(op)
    if m is None:
        raise ValueError(f"unknown ensemble operation {op!r}: choose one of {list(OPS)}")
    if m.group(3) is not None:
        return float(m.group(3))
    return -float(m.group(2)) if m.group(1) else float(m.group(2))


def power_mean(logp1: np.ndarray, logp2: np.ndarray, r: float, a: float) -> np.ndarray:
    """The weighted power mean of two arrays of probabilities, in log space.

    `M_r(p1, p2; a) = (a · p1^r + (1 - a) · p2^r)^(1/r)` elementwise, with its limits
    `r = 0`: `p1^a · p2^(1-a)`, `r = -inf`: `min(p1, p2)`, `r = +inf`: `max(p1, p2)`.
    `a = 1` gives `p1` and `a = 0` gives `p2` for every `r`. For `r < 0` a zero
    in either argument gives zero (the limit of `x^r → inf`).

    Args:
        logp1, logp2: log probabilities (`-inf` for zero), of one shape.
        r: the exponent.
        a: the weight of `p1`, in [0, 1].
    """
    if a == 1.0:
        return np.array(logp1, dtype=np.float64)
    if a == 0.0:
        return np.array(logp2, dtype=np.float64)
    if r == math.inf:
        return np.maximum(logp1, logp2)
    if r == -math.inf:
        return np.minimum(logp1, logp2)
    if r == 0.0:
        return a * logp1 + (1.0 - a) * logp2
    with np.errstate(invalid="ignore"):
        out = np.logaddexp(math.log(a) + r * logp1, math.log(1.0 - a) + r * logp2) / r
    if r < 0:
        out[np.isneginf(logp1) | np.isneginf(logp2)] = NEG_INF
    return out


def normalize_rows(block: np.ndarray) -> np.ndarray:
    """`row - logsumexp(row)` for each row; a row with no mass stays all `-inf`."""
    z = logsumexp(block, axis=-1)
    z = np.where(np.isfinite(z), z, 0.0)
    return block - z[..., None]


def _check_weight(a: Any) -> float:
    if isinstance(a, bool) or not isinstance(a, (int, float, np.integer, np.floating)):
        raise TypeError(f"a must be a real number in [0, 1], got {a!r}")
    if not 0.0 <= float(a) <= 1.0:
        raise ValueError(f"a must be in [0, 1], got {a!r}")
    return float(a)


class Ensemble(Potential):
    """Two potentials' normalized next-token distributions combined by a weighted power mean.

    With `q1 = normalize(p1.logw_next(ctx))`, `q2 = normalize(p2.logw_next(ctx))`
    (rows over the shared `vocab_eos`) and `M_r` the weighted power mean of
    `power_mean`:

        logw_next(ctx) = normalize(log M_r(q1, q2; a))
        prefix(ctx) = Σ_i logw_next(ctx[:i])[ctx[i]]
        complete(ctx) = prefix(ctx) + logw_next(ctx)[EOS]

    so the ensemble is a locally normalized distribution over finished sequences.

    Operations (`op`) and their exponent `r`: `"sum"` / `"mixture"` /
    `"arithmetic"` (r = 1: `a·q1 + (1-a)·q2`), `"prod"` / `"geometric"` (r = 0:
    `q1^a · q2^(1-a)`), `"harmonic"` (r = -1), `"min"` (r = -inf) and `"max"`
    (r = +inf), `"power"` with `exponent=r`, `"p<r>"` / `"pm<r>"` names
    (`"p2"`: r = 2, `"pm2.5"`: r = -2.5), and a real number `r` itself
    (genlm-control 0.4.1's form: `op=2.5`). For `0 < a < 1`, `"min"` and `"max"`
    are the plain elementwise min and max (the limits of the weighted mean);
    `a = 1` is `p1` alone and `a = 0` is `p2` alone for every operation.

    The vocabulary is `p1`'s; `p2` may list the same tokens in another order (they
    are matched by token: `p1_vocab_idxs` / `p2_vocab_idxs` give each token of
    `vocab_eos` its position in `p1.vocab_eos` / `p2.vocab_eos`).

    Args:
        p1: a potential (e.g. a `PromptedLLM`).
        p2: a potential with the same tokens as `p1` (e.g. a `PromptedLLM` over
            the same model with another prompt or temperature).
        op: the operation's name, or a real power-mean exponent.
        a: the weight of `p1`, in [0, 1].
        cache_size: accepted for genlm-control 0.4.1 code (a positive int); rows are
            not cached across calls, since an inner potential's prompt may change.
        exponent: `r` for `op="power"`.

    Raises:
        ValueError: different vocabularies, an unknown operation, `a` outside [0, 1],
            a `cache_size` below 1.
        TypeError: an argument of the wrong type (an `op` of the wrong type is also a
            ValueError, as in 0.4.1).
    """

    def __init__(
        self,
        p1: Potential,
        p2: Potential,
        op: str | float,
        a: float = 0.5,
        cache_size: int = 256,
        *,
        exponent: float | None = None,
    ):
        if not (isinstance(p1, Potential) and isinstance(p2, Potential)):
            raise TypeError(
                f"Ensemble combines two potentials, got {type(p1).__name__} and {type(p2).__name__}"
            )
        self._p2_cols = _p2_columns(p1, p2)
        self.p1, self.p2 = p1, p2
        self.op_name = op
        self.a = _check_weight(a)
        self.exponent = op_exponent(op, exponent)
        self.cache_size = _check_cache_size(cache_size)
        super().__init__(tables=p1.tables)

    @property
    def p1_vocab_idxs(self) -> list[int]:
        """The position in `p1.vocab_eos` of each token of `vocab_eos` (the identity)."""
        return list(range(len(self.vocab_eos)))

    @property
    def p2_vocab_idxs(self) -> list[int]:
        """The position in `p2.vocab_eos` of each token of `vocab_eos`."""
        cols = self._p2_cols
        return list(range(len(self.vocab_eos))) if cols is None else cols.tolist()

    def combine(self, block1: np.ndarray, block2: np.ndarray) -> np.ndarray:
        """`normalize(log M_r(normalize(block1), normalize(block2); a))`, row by row."""
        return normalize_rows(
            power_mean(normalize_rows(block1), normalize_rows(block2), self.exponent, self.a)
        )

    async def logws_next(self, context: list) -> tuple[LazyWeights, LazyWeights]:
        """The two inner potentials' `logw_next(context)`, uncombined."""
        w1, w2 = await gather_or_cancel(self.p1.logw_next(context), self.p2.logw_next(context))
        return w1, w2

    async def component_logws(self, context: list) -> tuple[float, float]:
        """`(p1.score(context), p2.score(context))`: each inner potential's own log
        weight of `context` (`complete` of the tokens before a final EOS, else `prefix`),
        e.g. to record per-model weights of SMC samples."""
        w1, w2 = await gather_or_cancel(self.p1.score(context), self.p2.score(context))
        return float(w1), float(w2)

    async def _combined(self, contexts: Sequence[list]) -> np.ndarray:
        """The combined rows of `contexts` as one block: one `batch_logw_next` per inner potential."""
        rows1, rows2 = await gather_or_cancel(
            self.p1.batch_logw_next(contexts), self.p2.batch_logw_next(contexts)
        )
        block2 = _stack(rows2)
        if self._p2_cols is not None:
            block2 = block2[:, self._p2_cols]
        return self.combine(_stack(rows1), block2)

    async def batch_logw_next(self, contexts: Sequence[list]) -> list[LazyWeights]:
        """`logw_next` of each context; one `batch_logw_next` per inner potential."""
        if not contexts:
            return []
        return self.rows_to_weights(await self._combined([list(c) for c in contexts]))

    async def logw_next(self, context: list) -> LazyWeights:
        return (await self.batch_logw_next([context]))[0]

    def _index(self, token: Any) -> int:
        i = self.tables.lookup.get(token)
        if i is None and self.tables.fallback is not None and type(token) is bytes:
            i = self.tables.fallback.get(token)
        if i is None:
            raise ValueError(f"token {token!r} is not in the ensemble's vocabulary")
        return i

    async def _path_logws(self, contexts: Sequence[list], finished: Sequence[bool]) -> np.ndarray:
        """`Σ_i logw_next(ctx[:i])[ctx[i]]` (plus the EOS term where `finished`) per context.

        Every distinct prefix of every context is queried once, in one batch.
        """
        keys: dict = {}
        picks: list[tuple[int, int, int]] = []  # (context, row, column)
        for k, (ctx, done) in enumerate(zip(contexts, finished)):
            cols = [self._index(t) for t in ctx] + ([len(self.vocab)] if done else [])
            for n, col in enumerate(cols):
                r = keys.setdefault(tuple(ctx[:n]), len(keys))
                picks.append((k, r, col))
        total = np.zeros(len(contexts), dtype=np.float64)
        if not picks:
            return total
        try:
            block = await self._combined([list(key) for key in keys])
        except ValueError:
            # An inner potential's logw_next is undefined at a prefix of weight zero:
            # walk each context and stop at its first zero.
            return np.array([await self._walk(c, d) for c, d in zip(contexts, finished)])
        owner, r, col = np.array(picks, dtype=np.intp).T
        np.add.at(total, owner, block[r, col])
        return total

    async def _walk(self, context: list, finished: bool) -> float:
        tokens = list(context) + ([self.eos] if finished else [])
        total = 0.0
        for n, tok in enumerate(tokens):
            col = len(self.vocab) if n == len(context) else self._index(tok)
            total += float((await self._combined([list(context[:n])]))[0, col])
            if total == NEG_INF:
                break
        return total

    async def batch_prefix(self, contexts: Sequence[list]) -> np.ndarray:
        """`prefix(ctx) = Σ_i logw_next(ctx[:i])[ctx[i]]` of each context."""
        _nonempty(contexts, "batch_prefix")
        return await self._path_logws([list(c) for c in contexts], [False] * len(contexts))

    async def batch_complete(self, contexts: Sequence[list]) -> np.ndarray:
        """`complete(ctx) = prefix(ctx) + logw_next(ctx)[EOS]` of each context."""
        _nonempty(contexts, "batch_complete")
        return await self._path_logws([list(c) for c in contexts], [True] * len(contexts))

    async def batch_score(self, contexts: Sequence[list]) -> np.ndarray:
        """`complete(ctx[:-1])` for contexts ending in EOS, `prefix(ctx)` otherwise."""
        _nonempty(contexts, "batch_score")
        done = [bool(c) and c[-1] == self.eos for c in contexts]
        trimmed = [list(c[:-1]) if d else list(c) for c, d in zip(contexts, done)]
        return await self._path_logws(trimmed, done)

    async def prefix(self, context: list) -> float:
        return float((await self.batch_prefix([context]))[0])

    async def complete(self, context: list) -> float:
        return float((await self.batch_complete([context]))[0])

    def spawn(self) -> "Ensemble":
        return Ensemble(
            self.p1.spawn(),
            self.p2.spawn(),
            self.op_name,
            self.a,
            self.cache_size,
            exponent=self.exponent if self.op_name == "power" else None,
        )

    def cleanup(self) -> Cleaned:
        return cleaned(self.p1.cleanup(), self.p2.cleanup())

    def __repr__(self) -> str:
        return f"Ensemble({self.p1!r}, {self.p2!r}, op={self.op_name!r}, a={self.a})"


def _p2_columns(p1: Potential, p2: Potential) -> np.ndarray | None:
    """The column of `p2`'s rows for each token of `p1.vocab_eos`; None when the two
    vocabularies are the same list.

    Raises:
        ValueError: the two potentials do not have the same tokens.
    """
    if p1.tables is p2.tables or p1.vocab_eos == p2.vocab_eos:
        return None
    lookup = p2.lookup
    cols = [lookup.get(tok) for tok in p1.vocab]
    if len(p1.vocab) != len(p2.vocab) or any(c is None for c in cols):
        raise ValueError(
            f"Ensemble needs potentials with the same vocabulary; {p1!r} and {p2!r} differ "
            "(to ensemble models with different tokenizers, ensemble ByteLLM potentials)"
        )
    return np.array([*cols, len(p2.vocab)], dtype=np.intp)


def _check_cache_size(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"cache_size must be a positive int, got {n!r}")
    if n < 1:
        raise ValueError(f"cache_size must be >= 1, got {n!r}")
    return int(n)


def _nonempty(contexts: Sequence[list], method: str) -> None:
    if len(contexts) == 0:
        raise ValueError(f"{method} needs a non-empty list of contexts")


def _stack(rows: Sequence[LazyWeights]) -> np.ndarray:
    return np.stack(host_rows(rows))


__all__ = ["Ensemble"]
