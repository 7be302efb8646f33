"""Batched categorical draws.

Every `draw_from` made within one event-loop pass joins one window; the window
stacks the rows of equal length and draws them in one vectorised reduction. Rows
are numpy arrays on the host, so a group's read-back is the reduction's result.

Randomness: each request uses the generator of the calling task
(`current_rng()`, set by `using_rng`), so a seeded SMC run draws the same tokens
whatever else runs concurrently.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np

from genlm.control.weights import NEG_INF, LazyWeights, fold_nan, logsumexp
from genlm.control.window import Window

DRAW_METHODS = ("gumbel_max", "multinomial", "inverse_cdf")
_draw_method = "gumbel_max"

_rng: contextvars.ContextVar[np.random.Generator | None] = contextvars.ContextVar(
    "genlm_control_rng", default=None
)
_default_rng = np.random.default_rng()


def set_draw_method(name: str) -> None:
    """Choose the categorical sampler used by every draw.

    All methods draw from the same distribution; they consume randomness
    differently (`inverse_cdf` uses one uniform per draw, which suits
    common-random-number experiments).

    Raises:
        ValueError: if `name` is not one of `DRAW_METHODS`.
    """
    global _draw_method
    if name not in DRAW_METHODS:
        raise ValueError(f"unknown draw method {name!r}; choose one of {DRAW_METHODS}")
    _draw_method = name


def get_draw_method() -> str:
    return _draw_method


def current_rng() -> np.random.Generator:
    """The generator of the calling context (a process-wide one by default)."""
    rng = _rng.get()
    return _default_rng if rng is None else rng


@contextmanager
def using_rng(rng: np.random.Generator) -> Iterator[None]:
    """Make `rng` the generator of draws made in this context (and tasks it starts)."""
    token = _rng.set(rng)
    try:
        yield
    finally:
        _rng.reset(token)


class Draw(NamedTuple):
    """One categorical draw from a row of log weights `w`.

    Attributes:
        token: the drawn token (EOS of the row when the row has no mass).
        logp: `log q(token)` with `q = w / Σw`.
        logw: properly weighted log weight of the draw for the target: `log Σw`
            when no target is given, else `target[token] - logp`.
    """

    token: Any
    logp: float
    logw: float


class _Request(NamedTuple):
    row: np.ndarray
    rng: np.random.Generator
    method: str


_TINY = np.finfo(np.float64).tiny


def _sample_rows(rows: np.ndarray, rngs: list, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Indices drawn from each row of log weights, and the row log-sums.

    One pass computes `p = exp(row - max(row))`, which gives both `log Σw` and the
    draw. `gumbel_max` takes `argmax_i p_i / E_i` with `E_i ~ Exp(1)`, which is
    `argmax_i (log w_i + G_i)` with the Gumbel variables `G_i = -log E_i`.
    """
    n, v = rows.shape
    peak = rows.max(axis=1)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    probs = np.subtract(rows, peak[:, None])
    np.exp(probs, out=probs)
    total = probs.sum(axis=1)
    with np.errstate(divide="ignore"):
        log_z = np.log(total) + peak
    if method == "gumbel_max":
        race = np.empty_like(probs)
        for rng, out in zip(rngs, race):
            rng.standard_exponential(out=out)
        np.maximum(race, _TINY, out=race)  # an exact 0 would make 0/0 = NaN win argmax
        np.divide(probs, race, out=race)
        idx = np.argmax(race, axis=1)
    elif method == "inverse_cdf":
        cdf = np.cumsum(probs, axis=1)
        u = np.array([rng.random() for rng in rngs]) * cdf[:, -1]
        idx = np.minimum((cdf <= u[:, None]).sum(axis=1), v - 1)
    else:  # multinomial
        idx = np.array(
            [
                rng.choice(v, p=p / t) if t > 0 else 0
                for rng, p, t in zip(rngs, probs, total)
            ]
        )
    return idx, log_z


async def _flush(requests: list[_Request]) -> list[tuple[int, float]]:
    out: list[Any] = [None] * len(requests)
    groups: dict[tuple[int, str], list[int]] = {}
    for i, r in enumerate(requests):
        groups.setdefault((r.row.shape[0], r.method), []).append(i)
    for (_, method), members in groups.items():
        rows = np.stack([requests[i].row for i in members])
        idx, log_z = _sample_rows(rows, [requests[i].rng for i in members], method)
        for j, i in enumerate(members):
            out[i] = (int(idx[j]), float(log_z[j]))
    return out


_window: Window = Window(_flush)


async def draw_from(
    weights: LazyWeights,
    draw: Callable[[dict], Any] | None = None,
    target: LazyWeights | None = None,
) -> Draw:
    """Draw a token with probability proportional to `exp(weights)`.

    With `target`, the draw is an importance draw: sampled from `weights` and
    weighed under `target` (`logw = target[token] - logp`).

    Args:
        weights: log weights of the proposal row.
        draw: optional choice function from a dict token → probability to a token;
            it replaces the random draw (tests use it to enumerate paths).
        target: optional log weights to weigh the draw under.
    """
    if not weights.is_log:
        raise ValueError("draw_from expects log weights")
    row = fold_nan(weights.weights)
    if draw is not None:
        log_z = logsumexp(row)
        if log_z == NEG_INF:
            index = len(row) - 1
        else:
            probs = np.exp(row - log_z)
            choice = {weights.decode[i]: float(p) for i, p in enumerate(probs) if p > 0}
            index = weights.index(draw(choice))
            if index is None:
                raise ValueError("draw returned a token outside the vocabulary")
    else:
        index, log_z = await _window.submit(_Request(row, current_rng(), _draw_method))
    token = weights.decode[index]
    if log_z == NEG_INF:
        return Draw(weights.decode[-1], NEG_INF, NEG_INF)
    logp = float(row[index] - log_z)
    if target is None:
        return Draw(token, logp, float(log_z))
    return Draw(token, logp, float(fold_nan(target.weights[index : index + 1])[0]) - logp)


__all__ = [
    "DRAW_METHODS",
    "Draw",
    "draw_from",
    "set_draw_method",
    "get_draw_method",
    "current_rng",
    "using_rng",
]
