"""Categorical draws from rows held as torch tensors, on the rows' device.

`sample_tensor_rows` draws one index from each row of a `(n, V)` block of log
weights and reads back, in one transfer, everything the caller needs: the index,
`log Σw`, the row's value at the index (for `logp`) and the target's value there
(for an importance weight). Nothing else leaves the device.

Inverse CDF (the default method) is the row's `max`, `exp`, `cumsum` and a
`searchsorted` of one uniform per row, the uniform drawn from the row's NumPy
Generator as on the NumPy path, so a seeded run consumes the same randomness on
both paths. Rows of 8192 entries or more are scanned by blocks: the sums of blocks
of 512 entries, their cumulative sum, and the cumulative sum of the one block where
the uniform falls (`_blocked_inverse_cdf`). The two paths give the same index except where the single-precision
CDF puts a boundary on the other side of the uniform than the double-precision one
does (an event of probability about `2⁻²⁴` per draw).

A zero-mass entry is never drawn from a row with mass: the uniform's target is
kept strictly below the row's total, the search returns the first entry whose
cumulative sum exceeds it, and an entry whose own mass is zero is then read back
and moved to the nearest earlier entry with mass (a scan's rounding can make a
cumulative sum step at a zero entry; this costs a second read-back only then).

`gumbel_max` and `multinomial` draw with a torch Generator on the device, seeded
per row by one 63-bit integer from the row's NumPy Generator: reproducible under a
seed, but not the same draws as the NumPy path's.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Sequence

import numpy as np
import torch

from genlm.control._device import read_back, to_host


class _Scratch(threading.local):
    """Two reusable blocks per thread for the masses and their cumulative sums of
    CPU rows. A fresh block of a few MiB costs a page fault per 4 KiB on its first
    write (about as long as the arithmetic itself at 128k tokens); reusing one block
    per thread keeps the draw at the speed of its arithmetic. Blocks over
    `SCRATCH_LIMIT` elements are not kept, so at most `2 × SCRATCH_LIMIT × 4` bytes
    (128 MiB) stay held per thread. Device rows use the device's own allocator."""

    def __init__(self) -> None:
        self.blocks: dict = {}


SCRATCH_LIMIT = 1 << 24
_SCRATCH = _Scratch()


def _scratch(like: torch.Tensor, slot: int) -> torch.Tensor:
    """An uninitialised tensor shaped like `like` (which is 2-D), valid until the
    next draw in this thread."""
    size = like.numel()
    if like.device.type != "cpu" or size > SCRATCH_LIMIT:
        return torch.empty_like(like)
    key = (like.dtype, slot)
    block = _SCRATCH.blocks.get(key)
    if block is None or block.numel() < size:
        block = _SCRATCH.blocks[key] = torch.empty(size, dtype=like.dtype)
    return block[:size].view(like.shape)


def _noise(rngs: Sequence[np.random.Generator], method: str) -> np.ndarray:
    """Each row's randomness, taken once from its generator: the inverse-CDF draw's
    uniform, or the seed of the torch generator that the other methods draw with. A
    row drawn again (NaN folded, an underflowed mask) reuses it, so it consumes what
    one draw from the folded row consumes on the NumPy path."""
    if method == "inverse_cdf":
        return np.fromiter((r.random() for r in rngs), np.float64, len(rngs))
    return np.fromiter((r.integers(2**63 - 1) for r in rngs), np.int64, len(rngs))


def _generators(seeds: np.ndarray, device: torch.device) -> list[torch.Generator]:
    out = []
    for seed in seeds:
        g = torch.Generator(device=device)
        g.manual_seed(int(seed))
        out.append(g)
    return out


def _indices(rows: torch.Tensor, probs: torch.Tensor, noise: np.ndarray, method: str) -> tuple:
    """Drawn indices (on the device) and the row totals `Σ exp(row - peak)`."""
    n, v = rows.shape
    if method == "inverse_cdf":
        u = noise
        if v >= _BLOCKED_FROM:
            return _blocked_inverse_cdf(probs, torch.as_tensor(u, device=rows.device))
        cdf = torch.cumsum(probs, dim=1, out=_scratch(probs, 1))
        total = cdf[:, -1]
        goal = torch.as_tensor(u, device=rows.device).mul(total).to(cdf.dtype)
        # a goal that rounds up to the total lands on the last entry, which the
        # zero-mass check below moves when it has no mass
        idx = torch.searchsorted(cdf, goal[:, None], right=True)[:, 0]
        return idx.clamp_(max=v - 1), total
    total = probs.sum(dim=1)
    gens = _generators(noise, rows.device)
    if method == "gumbel_max":
        race = torch.empty_like(probs)
        for g, out in zip(gens, race):
            out.exponential_(generator=g)
        race.clamp_(min=torch.finfo(race.dtype).tiny)
        return torch.argmax(probs / race, dim=1), total
    # a row without mass draws index 0 (its result is EOS, from log_z = -inf)
    safe = probs.clone()
    safe[:, 0] += (total <= 0).to(safe.dtype)
    picks = [torch.multinomial(p, 1, generator=g)[0] for p, g in zip(safe, gens)]
    return torch.stack(picks), total


# Rows at least this long are drawn by `_blocked_inverse_cdf`, in blocks of `_BLOCK`.
_BLOCKED_FROM = 8192
_BLOCK = 512


def _blocked_inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse-CDF draw of each row of `probs` at `u · total`, without the row's
    whole cumulative sum: the sums of blocks of `_BLOCK` entries (one reading pass,
    the last block shorter), their cumulative sum, the block where the goal falls,
    and the cumulative sum of that block only. It is the same draw as the full scan
    up to float rounding (both are float sums of the same masses; the block sums are
    the more accurate), at about a third of its cost on a CPU for long rows. A goal
    that rounds past its block lands on the block's last entry, which the zero-mass
    check of `_draw` moves when it has no mass. Returns indices and row totals."""
    n, v = probs.shape
    whole = (v // _BLOCK) * _BLOCK
    sums = probs[:, :whole].reshape(n, -1, _BLOCK).sum(dim=2)
    if whole < v:
        sums = torch.cat([sums, probs[:, whole:].sum(dim=1, keepdim=True)], dim=1)
    ends = sums.cumsum_(dim=1)
    total = ends[:, -1]
    goal = u.mul(total).to(probs.dtype)[:, None]
    block = torch.searchsorted(ends, goal, right=True).clamp_(max=ends.shape[1] - 1)
    before = torch.where(block > 0, ends.gather(1, (block - 1).clamp_(min=0)), 0.0)
    # the last block's columns past the row read its last entry: the scan reaches
    # them only where the goal rounds past the row's mass, and then draws that entry
    cols = (block * _BLOCK + torch.arange(_BLOCK, device=probs.device)[None, :]).clamp_(max=v - 1)
    masses = probs.gather(1, cols)
    scan = masses.cumsum_(dim=1).add_(before)
    at = torch.searchsorted(scan, goal, right=True).clamp_(max=_BLOCK - 1)
    return cols.gather(1, at)[:, 0], total


# A masked row whose allowed mass is below this share of its peak's is drawn again
# from the masked row itself (its allowed entries may have underflowed).
_LOW_SHARE = math.log(2.0**-60)


def sample_tensor_rows(
    rows: torch.Tensor,
    rngs: Sequence[np.random.Generator],
    method: str,
    targets: torch.Tensor | None = None,
    allowed: torch.Tensor | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One draw per row of `rows` (log weights), read back in one transfer.

    Returns host arrays `(index, log_z, value, target_value)`: the drawn index, the
    row's `log Σ exp`, `rows[index]` and `targets[index]` (`rows[index]` without
    targets). A row holding NaN is folded (NaN → -inf) and drawn again with the
    same randomness, so it is the one draw from the folded row that NumPy rows make.

    With `allowed` (a bool block) each row is drawn restricted to it, exactly as
    from `rows.where(allowed, -inf)`, but without that pass: the masses
    `exp(row - max(row))` are multiplied by the mask. A row whose allowed mass is
    under `2⁻⁶⁰` of its peak's (or zero) is drawn again from the masked row, so an
    allowed set that the unmasked peak would underflow is still drawn exactly.

    Raises:
        ValueError: a row holding `+inf`.
    """
    noise = _noise(rngs, method)
    out = _draw(rows, noise, method, targets, allowed)
    peak = out[4]
    if np.isposinf(peak).any():
        raise ValueError(
            "a log weight is +inf: a potential returned an infinite weight, which no normalized target can have"
        )
    redo_rows = np.isnan(peak)
    if allowed is not None:
        with np.errstate(invalid="ignore"):
            redo_rows |= ~(out[1] - np.nan_to_num(peak, nan=0.0, posinf=0.0, neginf=0.0) >= _LOW_SHARE)
    redo_rows = np.flatnonzero(redo_rows)
    if len(redo_rows):
        sel = torch.as_tensor(redo_rows, device=rows.device)
        fixed = torch.nan_to_num(rows.index_select(0, sel), nan=float("-inf"), posinf=float("inf"))
        if allowed is not None:
            fixed = fixed.where(allowed.index_select(0, sel), float("-inf"))
        sub_t = None if targets is None else targets.index_select(0, sel)
        redo = _draw(fixed, noise[redo_rows], method, sub_t)
        for k in range(4):
            out[k][redo_rows] = redo[k]
    return out[0].astype(np.int64), out[1], out[2], out[3]


def _draw(
    rows: torch.Tensor, noise: np.ndarray, method: str, targets: torch.Tensor | None, allowed: Any = None
) -> list[np.ndarray]:
    peak = rows.amax(dim=1)
    shift = peak.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    probs = torch.sub(rows, shift[:, None], out=_scratch(rows, 0)).exp_()
    if allowed is not None:
        # a bool mask is read as bytes and widened first: multiplying by bools
        # directly takes a slow casting path on CPU (about 10x the multiply)
        mask = allowed.view(torch.uint8) if allowed.dtype == torch.bool else allowed
        probs.mul_(mask.to(probs.dtype))
    idx, total = _indices(rows, probs, noise, method)
    at = idx[:, None]
    picked = rows.gather(1, at)[:, 0]
    mass = probs.gather(1, at)[:, 0]
    tval = picked if targets is None else targets.gather(1, at)[:, 0].to(rows.dtype)
    log_z = total.log().add_(shift)
    # a row without mass reads as "no zero-mass pick" through its total
    zero = torch.where(total > 0, mass, 1.0)
    # float32 holds every index below 2**24, more than any vocabulary
    back = read_back(torch.stack([idx.to(rows.dtype), log_z, picked, tval, peak, zero]))
    back = back.numpy().astype(np.float64)
    out = [back[k] for k in range(6)]
    out[5] = (out[5] <= 0).astype(np.float64)
    for r in np.flatnonzero(out[5] > 0):  # a scan rounded onto a zero-mass entry
        mass_row = to_host(probs[r])
        i = int(out[0][r])
        live = np.flatnonzero(mass_row > 0)
        earlier = live[live <= i]
        j = int(earlier[-1] if earlier.size else live[0])
        out[0][r] = j
        out[2][r] = float(to_host(rows[r, j : j + 1])[0])
        out[3][r] = out[2][r] if targets is None else float(to_host(targets[r, j : j + 1])[0])
    return out[:5]


__all__ = ["sample_tensor_rows"]
