"""Batched categorical draws.

Every `draw_from` made within one event-loop pass joins one window; the window
stacks the rows of one (place, length) group, where a place is NumPy on the host or
a torch device, and draws them in one vectorised reduction. A group of torch rows
is drawn on its device and read back once (`genlm.control._draw_torch`): token
indices, `log Σw`, and the values `logp` and `logw` need. `counting_readbacks()`
counts those read-backs.

Randomness: each request uses the generator of the calling task
(`current_rng()`, set by `using_rng`), so a seeded SMC run draws the same tokens
whatever else runs concurrently. There is no process-wide generator: a draw made
outside a run and outside `using_rng` uses a fresh generator seeded from OS entropy.
"""

from __future__ import annotations

import contextvars
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import numpy as np

from genlm.control._device import (
    counting_readbacks,
    is_tensor,
    like,
    place,
    readback_count,
    stack,
    to_host,
)
from genlm.control.weights import (
    NEG_INF,
    LazyWeights,
    fold_nan,
    infinite_weight_error,
    logsumexp,
    weights_block,
)
from genlm.control.window import Window

DRAW_METHODS = ("gumbel_max", "multinomial", "inverse_cdf")
_draw_method = "inverse_cdf"

_rng: contextvars.ContextVar[np.random.Generator | None] = contextvars.ContextVar(
    "genlm_control_rng", default=None
)


def set_draw_method(name: str) -> None:
    """Choose the categorical sampler used by every draw.

    All methods draw from the same distribution; they consume randomness
    differently. `inverse_cdf` (the default) uses one uniform per draw, which is the
    cheapest on a CPU and suits common-random-number experiments; `gumbel_max` uses
    one exponential per vocabulary entry; `multinomial` is NumPy's `choice`.

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
    """The generator of the calling context (set by `using_rng`; in SMC, the
    particle's stream); outside one, a fresh generator seeded from OS entropy."""
    rng = _rng.get()
    return np.random.default_rng() if rng is None else rng


def context_rng() -> np.random.Generator | None:
    """The generator set by `using_rng` in the calling context, or None."""
    return _rng.get()


@contextmanager
def using_rng(rng: np.random.Generator) -> Iterator[None]:
    """Make `rng` the generator of draws made in this context (and tasks it starts)."""
    token = _rng.set(rng)
    try:
        yield
    finally:
        _rng.reset(token)


class Draw(NamedTuple):
    """One categorical draw from a row of log weights `w`; it unpacks, as in 0.4.1,
    as `token, logw, logp`.

    Attributes:
        token: the drawn token (EOS of the row when the row has no mass).
        logw: properly weighted log weight of the draw for the target: `log Σw`
            when no target is given, else `target[token] - logp`.
        logp: `log q(token)` with `q = w / Σw`.
    """

    token: Any
    logw: float
    logp: float


class _Request(NamedTuple):
    rows: Any  # (n, V) log weights: a NumPy array, or a torch tensor on its device
    rngs: list  # one generator per row
    method: str
    targets: Any = None  # (n, V) target log weights of a tensor request, or None
    allowed: Any = None  # (n, V) bool mask of a tensor request, or None


_TINY = np.finfo(np.float64).tiny
_BLOCK = 64


def _block_sums(probs: np.ndarray) -> np.ndarray:
    """The sums of each row's blocks of `_BLOCK` consecutive entries (the last block
    shorter when the row's length is not a multiple), in the masses' precision.

    The whole blocks are summed as the contiguous last axis of a view (`einsum`'s
    vectorised inner loop: about 4× faster than `np.add.reduceat` over the same
    blocks at 128k entries)."""
    n, v = probs.shape
    whole = v // _BLOCK
    sums = np.empty((n, -(-v // _BLOCK)), dtype=probs.dtype)
    if whole:
        np.einsum("ijk->ij", probs[:, : whole * _BLOCK].reshape(n, whole, _BLOCK), out=sums[:, :whole])
    if whole * _BLOCK < v:
        np.sum(probs[:, whole * _BLOCK :], axis=1, out=sums[:, whole])
    return sums


def _locate(probs: np.ndarray, u: np.ndarray, sums: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Inverse-CDF indices of the uniforms `u` (one per row) in rows of nonnegative
    mass, and the row totals (float64).

    Two levels instead of a cumulative sum over the row: the sums of blocks of
    `_BLOCK` entries (`sums`, `_block_sums(probs)` when not given) locate the block,
    a cumulative sum inside it locates the entry. The blocks are summed in the
    masses' precision and accumulated in float64. An entry of zero mass is never
    returned while its row has mass (rounding at a block boundary steps back to the
    nearest entry with mass).
    """
    n, v = probs.shape
    starts = np.arange(0, v, _BLOCK)
    block_cdf = np.cumsum(_block_sums(probs) if sums is None else sums, axis=1, dtype=np.float64)
    total = block_cdf[:, -1]
    target = u * total
    rows = np.arange(n)
    block = np.minimum((block_cdf <= target[:, None]).sum(axis=1), len(starts) - 1)
    below = np.where(block > 0, block_cdf[rows, np.maximum(block - 1, 0)], 0.0)
    cols = (block * _BLOCK)[:, None] + np.arange(_BLOCK)
    inner = np.where(cols < v, probs[rows[:, None], np.minimum(cols, v - 1)], 0.0).astype(np.float64)
    np.cumsum(inner, axis=1, out=inner)
    idx = block * _BLOCK + np.minimum((inner <= (target - below)[:, None]).sum(axis=1), _BLOCK - 1)
    idx = np.minimum(idx, v - 1)
    for r in np.flatnonzero((probs[rows, idx] <= 0) & (total > 0)):
        mass = np.flatnonzero(probs[r] > 0)
        earlier = mass[mass <= idx[r]]
        idx[r] = earlier[-1] if earlier.size else mass[0]
    return idx, total


#: Below this log ratio to its row's peak a float64 entry's mass is taken as zero.
#: `exp` rounds such entries to subnormals or zero anyway (below `log(tiny) ≈ -708`),
#: and NumPy's and torch's vectorised float64 `exp` leave their fast path on them (and
#: on `-inf`), which made a masked row's exponential about 5× slower. Float32 rows need
#: no such step: their `exp` underflows to exactly 0 below about -104 and keeps its
#: speed on `-inf` and deep entries.
_DEEP = -700.0
#: A masked float64 row whose allowed mass, relative to the whole row's peak, is below
#: this is redone against its own allowed peak, so no allowed entry that matters
#: underflows (every allowed entry lost lies more than 100 nats under that mass).
_FAINT = float(np.exp(-600.0))
#: Float32 rows are exponentiated as they are, without the shift by their peak (no
#: pass for the peak, none for the subtraction): a model's log probabilities peak in
#: [-log V, 0]. A row is kept when its (allowed) mass lies in this range, checked on
#: the block sums the draw makes anyway; any other row (an entry that overflows, a
#: NaN, mass that the unshifted `exp` would round away) is redone in float64 against
#: its own (allowed) peak. Kept rows lose only entries under e^-87 (float32's
#: smallest normal), at most 2^18 of them: under e^-24 of the row's mass.
_F32_KEPT = (float(np.exp(-50.0)), float(np.exp(60.0)))


#: The draw's masses are written into one block kept per thread and dtype (up to
#: this many entries): a fresh 10 MB block per step costs as much in page faults as
#: its `exp`.
_SCRATCH_MAX = 1 << 23
_scratch = threading.local()


def _block(shape: tuple[int, int], dtype: Any = np.float64) -> np.ndarray:
    """A block of `shape` and `dtype` to write masses into: the thread's kept buffer
    when it is small enough, else a new one. Its contents never leave the draw."""
    need = shape[0] * shape[1]
    if need > _SCRATCH_MAX:
        return np.empty(shape, dtype)
    bufs = getattr(_scratch, "bufs", None)
    if bufs is None:
        bufs = _scratch.bufs = {}
    key = np.dtype(dtype)
    buf = bufs.get(key)
    if buf is None or buf.size < need:
        buf = bufs[key] = np.empty(need, key)
    return buf[:need].reshape(shape)


def _exp_shifted(rows: np.ndarray, peak: np.ndarray, out: np.ndarray | None = None, allowed: Any = None) -> np.ndarray:
    """`exp(rows - peak)` per row (into `out` when given), times `allowed` when given.
    In float64 the entries more than `-_DEEP` below their peak are set to exactly 0
    (`-inf` entries included); in float32 `exp` rounds them to 0 itself. Zeros are
    written by multiplying with a bool block: NumPy's masked assignment
    (`copyto(where=)`, `putmask`) costs several times as much."""
    probs = np.subtract(rows, peak[:, None].astype(rows.dtype), out=out)
    if probs.dtype == np.float64 and probs.size and probs.min() < _DEEP:
        keep = probs >= _DEEP
        np.maximum(probs, _DEEP, out=probs)
        np.exp(probs, out=probs)
        if allowed is not None:
            np.logical_and(keep, allowed, out=keep)
        np.multiply(probs, keep, out=probs)
        return probs
    np.exp(probs, out=probs)
    if allowed is not None:
        np.multiply(probs, allowed, out=probs)
    return probs


def _screen(rows: np.ndarray, suspects: Any) -> tuple[np.ndarray, list[int]]:
    """`rows` with the NaN entries of the rows `suspects` read as `-inf` (`fold_nan`),
    and those of `suspects` that hold `+inf` (each then read as a row of `-inf`, whose
    draw its caller discards). A copy is made when any suspect needs a change: the
    caller's rows (often a model's cached block) are never written."""
    bad, nans = [], []
    for r in suspects:
        r = int(r)
        if np.isposinf(rows[r]).any():
            bad.append(r)
        elif np.isnan(rows[r]).any():
            nans.append(r)
    if bad or nans:
        rows = rows.copy()
        for r in nans:
            rows[r] = np.where(np.isnan(rows[r]), NEG_INF, rows[r])
        rows[bad] = NEG_INF
    return rows, bad


def _masses(rows: np.ndarray, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, list[int]]:
    """`(probs, peak, sums, bad)`: the masses `exp(rows - peak)` of each row restricted
    to `allowed` (0 elsewhere), in the rows' precision (float32 or float64), the
    per-row shift `peak` (float64), the masses' block sums (`_block_sums`) where they
    were made here (float32 rows), else None, and the rows holding `+inf` (an error).

    The rows need not be folded (`fold_nan`) first: a row holding NaN or `+inf` shows
    in what the draw computes anyway (a float64 row's peak; a float32 row's total,
    which NaN and overflow put outside `_F32_KEPT`), and only such a row is read again
    (`_screen`): its NaN entries have no mass, and a row holding `+inf` is reported in
    `bad`. So no pass over the rows is spent looking for them.

    The mask multiplies the masses instead of writing `-inf` into the rows (one
    pass, and no slow `exp(-inf)`). A float32 row is read unshifted (`peak` 0) when
    its mass lies in `_F32_KEPT`, else redone in float64 against its own allowed
    peak (`_refit`). A float64 row is shifted by its whole row's peak; one whose
    allowed entries all lie far below it (allowed mass under `_FAINT`) is redone
    against the peak of its allowed entries, as masking with `-inf` first would."""
    if rows.dtype == np.float32:
        # an entry over 88.7 overflows (inf, and NaN times a False): its row is redone
        with np.errstate(over="ignore", invalid="ignore"):
            probs = np.exp(rows, out=_block(rows.shape, rows.dtype))
            if allowed is not None:
                np.multiply(probs, allowed, out=probs)
            sums = _block_sums(probs)
            total = sums.sum(axis=1, dtype=np.float64)
            low, high = _F32_KEPT
            redo = np.flatnonzero(~((total >= low) & (total <= high)))
        peak = np.zeros(len(rows))
        bad: list[int] = []
        if redo.size:
            rows, bad = _screen(rows, redo)
        for r in redo:
            _refit(rows, allowed, probs, peak, r)
            sums[r] = _block_sums(probs[r : r + 1])[0]
        return probs, peak, sums, bad
    peak = rows.max(axis=1).astype(np.float64)  # NaN where a row holds NaN
    bad = []
    odd = np.flatnonzero(np.isnan(peak) | (peak == np.inf))
    if odd.size:
        rows, bad = _screen(rows, odd)
        peak[odd] = rows[odd].max(axis=1)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    probs = _exp_shifted(rows, peak, _block(rows.shape, rows.dtype), allowed)
    if allowed is not None:
        for r in np.flatnonzero(probs.max(axis=1) < _FAINT):
            _refit(rows, allowed, probs, peak, r)
    return probs, peak, None, bad


def _refit(rows: np.ndarray, allowed: np.ndarray | None, probs: np.ndarray, peak: np.ndarray, r: int) -> None:
    """Row `r` of `probs` and `peak` made again in float64 against the peak of the
    row's allowed entries (the masses then written in `probs`' precision)."""
    row = rows[r].astype(np.float64)
    if allowed is not None:
        row = np.where(allowed[r], row, NEG_INF)
    top = row.max()
    peak[r] = top if np.isfinite(top) else 0.0
    probs[r] = _exp_shifted(row[None, :], peak[r : r + 1])[0]


def _sample_rows(
    rows: np.ndarray, rngs: list, method: str, allowed: np.ndarray | None = None, bad: list | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Indices drawn from each row of log weights (restricted to `allowed` when
    given), and the row log-sums. NaN entries have weight zero (`fold_nan`). The rows
    holding `+inf` are appended to `bad` when it is given (their draws are
    meaningless), else they raise `ValueError`.

    One pass computes `p = exp(row - peak)` (`_masses`), which gives both `log Σw` and
    the draw. `inverse_cdf` locates one uniform per row in the CDF of `p`;
    `gumbel_max` takes `argmax_i p_i / E_i` with `E_i ~ Exp(1)`, which is
    `argmax_i (log w_i + G_i)` with the Gumbel variables `G_i = -log E_i`.
    """
    n, v = rows.shape
    probs, peak, sums, infinite = _masses(rows, allowed)
    if infinite:
        if bad is None:
            raise infinite_weight_error()
        bad.extend(infinite)
    if method == "inverse_cdf":
        idx, total = _locate(probs, np.fromiter((rng.random() for rng in rngs), dtype=np.float64, count=n), sums)
    else:
        total = probs.sum(axis=1, dtype=np.float64)
    with np.errstate(divide="ignore"):
        log_z = np.log(total) + peak
    if method == "gumbel_max":
        race = np.empty(probs.shape)  # float64 whatever the rows: one stream of exponentials
        for rng, out in zip(rngs, race):
            rng.standard_exponential(out=out)
        np.maximum(race, _TINY, out=race)  # an exact 0 would make 0/0 = NaN win argmax
        np.divide(probs, race, out=race)
        idx = np.argmax(race, axis=1)
    elif method == "multinomial":
        idx = np.array(
            [
                rng.choice(v, p=p.astype(np.float64) / t) if t > 0 else 0
                for rng, p, t in zip(rngs, probs, total)
            ]
        )
    return idx, log_z


async def _flush(requests: list[_Request]) -> list[tuple]:
    out: list[Any] = [None] * len(requests)
    groups: dict[tuple[str, int, str], list[int]] = {}
    for i, r in enumerate(requests):
        groups.setdefault((place(r.rows), r.rows.shape[1], r.method), []).append(i)
    for (where, _, method), members in groups.items():
        rngs = [g for i in members for g in requests[i].rngs]
        if where == "numpy":
            rows = _join([requests[i].rows for i in members])
            mask = None
            if any(requests[i].allowed is not None for i in members):
                mask = _join([_all_allowed(requests[i]) for i in members])
            bad: list[int] = []
            parts: tuple = _sample_rows(rows, rngs, method, mask, bad=bad)
            if bad:  # only the requests holding a +inf row fail; the others are drawn
                ends = np.cumsum([len(requests[i].rngs) for i in members])
                for k in set(np.searchsorted(ends, bad, side="right").tolist()):
                    out[members[k]] = infinite_weight_error()
        else:
            from genlm.control._draw_torch import sample_tensor_rows

            rows = _join([requests[i].rows for i in members])
            targets = allowed = None
            if any(requests[i].targets is not None for i in members):
                targets = _join([requests[i].rows if requests[i].targets is None else requests[i].targets for i in members])
            if any(requests[i].allowed is not None for i in members):
                allowed = _join([_all_allowed(requests[i]) for i in members])
            parts = sample_tensor_rows(rows, rngs, method, targets, allowed)
        start = 0
        for i in members:
            n = len(requests[i].rngs)
            if out[i] is None:
                out[i] = tuple(p[start : start + n] for p in parts)
            start += n
    return out


def _host_log_rows(x: Any) -> np.ndarray:
    """A host block of log weights as the draw reads it: float32 stays float32, any
    other dtype becomes float64 (as `fold_nan` keeps them; the NaN and `+inf`
    entries are left to the draw)."""
    x = np.asarray(x)
    return x if x.dtype in (np.float32, np.float64) else x.astype(np.float64)


def _all_allowed(request: _Request) -> Any:
    if request.allowed is not None:
        return request.allowed
    if not is_tensor(request.rows):
        return np.ones(request.rows.shape, dtype=bool)
    import torch

    return torch.ones(request.rows.shape, dtype=torch.bool, device=request.rows.device)


def _join(blocks: list) -> Any:
    if len(blocks) == 1:
        return blocks[0]
    if is_tensor(blocks[0]):
        import torch

        return torch.cat(blocks)
    return np.concatenate(blocks)


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
    if draw is None:
        return (await draw_many([weights], [current_rng()], None if target is None else [target]))[0]
    row = fold_nan(weights.host())
    log_z = logsumexp(row)
    if log_z == NEG_INF:
        index = len(row) - 1
    else:
        probs = np.exp(row - log_z)
        choice = {weights.decode[i]: float(p) for i, p in enumerate(probs) if p > 0}
        index = weights.index(draw(choice))
        if index is None:
            raise ValueError("draw returned a token outside the vocabulary")
    return _result(weights, row, index, log_z, target)


def _result(weights: LazyWeights, row: np.ndarray, index: int, log_z: float, target: LazyWeights | None) -> Draw:
    """`_values_result` of a draw from a host row (the target's entry read here)."""
    tvalue = NEG_INF
    if target is not None and log_z != NEG_INF:
        tvalue = float(fold_nan(to_host(target.weights[index : index + 1]))[0])
    return _values_result(weights, index, log_z, float(row[index]), tvalue, target)


def _values_result(weights: LazyWeights, index: int, log_z: float, value: float, tvalue: float, target: Any) -> Draw:
    """The `Draw` of index `index` of a row with `log Σw = log_z`, whose entry there is
    `value` (and the target's `tvalue`); EOS with weight zero for a row without mass."""
    if log_z == NEG_INF:
        return Draw(weights.decode[-1], logw=NEG_INF, logp=NEG_INF)
    logp = value - log_z
    if target is None:
        return Draw(weights.decode[index], logw=log_z, logp=logp)
    tvalue = NEG_INF if tvalue != tvalue else tvalue  # a NaN target weight is zero
    return Draw(weights.decode[index], logw=tvalue - logp, logp=logp)


async def draw_many(
    weights: Sequence[LazyWeights],
    rngs: Sequence[np.random.Generator],
    targets: Sequence[LazyWeights] | None = None,
    *,
    allowed: Any = None,
) -> list[Draw]:
    """`draw_from` for several rows at once: row `i` is drawn with `rngs[i]` (and
    weighed under `targets[i]` when given). The rows join the current draw window
    as one block, so this costs one reduction however many rows there are.

    With `allowed`, a bool block with one row per weight row (on the rows' device),
    row `i` is drawn restricted to `allowed[i]`: the law and weights of drawing from
    `where(allowed[i], weights[i], -inf)`, without building that row (the masses are
    multiplied by the mask, on the device or on the host).

    Raises:
        ValueError: if the lengths differ or a row is not in log space.
    """
    host_mask = None
    if allowed is not None and not all(is_tensor(w.weights) for w in weights):
        # host rows: the draw multiplies their masses by the mask (no masked copy)
        host_mask = to_host(allowed) > 0 if is_tensor(allowed) else np.asarray(allowed, dtype=bool)
        weights = [w.spawn(w.host()) if is_tensor(w.weights) else w for w in weights]
        allowed = None
    if len(rngs) != len(weights) or (targets is not None and len(targets) != len(weights)):
        raise ValueError(
            f"draw_many needs one generator (and target) per row: {len(weights)} rows, "
            f"{len(rngs)} generators" + ("" if targets is None else f", {len(targets)} targets")
        )
    if not weights:
        return []
    if not all(w.is_log for w in weights):
        raise ValueError("draw_many expects log weights")
    groups: dict[tuple[str, int], list[int]] = {}
    for i, w in enumerate(weights):
        groups.setdefault((place(w.weights), len(w.weights)), []).append(i)
    out: list[Any] = [None] * len(weights)
    for (where, _), members in groups.items():
        group_rngs = [rngs[i] for i in members]
        if where != "numpy":
            await _draw_tensors(weights, targets, members, group_rngs, out, allowed)
            continue
        # not folded here: the draw finds NaN and +inf in what it computes anyway
        whole = len(members) == len(weights)  # a batch's own block where it has one: no per-row check
        rows = _host_log_rows(weights_block(weights) if whole else stack([weights[i].weights for i in members]))
        mask = None if host_mask is None else host_mask[members] if len(members) < len(host_mask) else host_mask
        request = _Request(rows, group_rngs, _draw_method, allowed=mask)
        answer = await _window.submit(request)
        if isinstance(answer, ValueError):
            raise answer
        indices, log_zs = answer
        for j, i in enumerate(members):
            t = None if targets is None else targets[i]
            out[i] = _result(weights[i], rows[j], int(indices[j]), float(log_zs[j]), t)
    return out


async def _draw_tensors(weights, targets, members: list[int], rngs: list, out: list, allowed: Any = None) -> None:
    """Draw a group of tensor rows on their device; one read-back for the group."""
    from genlm.control._torch_rows import stacked

    rows = stacked([weights[i].weights for i in members])
    tblock = None
    if targets is not None:
        tblock = stacked([like(targets[i].weights, rows[0]) for i in members])
    mask = None
    if allowed is not None:
        mask = allowed if len(members) == len(allowed) else allowed[members]
    request = _Request(rows, rngs, _draw_method, tblock, mask)
    indices, log_zs, values, tvalues = await _window.submit(request)
    for j, i in enumerate(members):
        t = None if targets is None else targets[i]
        out[i] = _values_result(weights[i], int(indices[j]), float(log_zs[j]), float(values[j]), float(tvalues[j]), t)


__all__ = [
    "DRAW_METHODS",
    "Draw",
    "draw_from",
    "draw_many",
    "set_draw_method",
    "get_draw_method",
    "current_rng",
    "context_rng",
    "using_rng",
    "counting_readbacks",
    "readback_count",
]
