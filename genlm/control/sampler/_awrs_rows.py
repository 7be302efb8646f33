"""The rows an AWRS step works on, where the potential made them.

The potential's (and the proposal's) rows are read on the condition's `vocab_eos`
(`Support.view`) as one block per step: NumPy on the host, or tensors on their
device. The condition's allowed tokens come as a bool block on the same device:
an engine condition unpacks its packed masks there (`batch_allowed`); any other
Boolean condition's rows are checked on the host and moved once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from genlm.control._device import is_tensor, mask_like, match, to_host
from genlm.control.potential.base import Potential
from genlm.control.sampler._awrs_exact import Support, boolean_rows, stack_rows
from genlm.control.weights import fold_nan, weights_block
from genlm.control.window import gather_or_cancel


async def proposal_rows(
    potential: Potential, proposal: Potential | None, support: Support, contexts: list[list], fold: bool = True
) -> tuple[Any, Any]:
    """`(w, q)`: the potential's and the proposal's rows after each context on the
    condition's `vocab_eos` (`q is w` without a proposal), one block each. With
    `fold=False` NumPy blocks are not folded (`fold_nan`): for a caller that only
    draws from `q` (the draw finds NaN and `+inf` itself) and reads `w` entry by
    entry (folding each)."""
    keep = _fold if fold else _as_is
    if proposal is None:
        w = weights_block(await potential.batch_logw_next(contexts))
        w = keep(support.view(w, support.potential))
        return w, w
    wl, ql = await gather_or_cancel(potential.batch_logw_next(contexts), proposal.batch_logw_next(contexts))
    w = keep(support.view(weights_block(wl), support.potential))
    q = keep(support.view(weights_block(ql), support.proposal))
    return match(w, q)


async def allowed_rows(condition: Potential, batch_allowed: Any, contexts: list[list], like: Any) -> Any:
    """The condition's allowed tokens after each context, as a bool block on the
    device of `like` (`batch_allowed`: the condition's own, or None).

    Raises:
        ValueError: a condition row value that is neither 0 nor -inf.
    """
    if batch_allowed is not None:
        return await batch_allowed(contexts, like)
    rows = await condition.batch_logw_next(contexts)
    return mask_like(boolean_rows(condition, stack_rows(rows)), like)


def mask_of(allowed: Any, w: Any) -> Any:
    """A bool block as the same kind as the rows `w`: on `w`'s device when `w` is a
    tensor, NumPy otherwise (unchanged when it is already so)."""
    if is_tensor(w):
        return mask_like(allowed, w) if not is_tensor(allowed) else allowed.to(w.device)
    return to_host(allowed) > 0 if is_tensor(allowed) else allowed


def on_host(w: Any, q: Any) -> tuple[np.ndarray, np.ndarray]:
    """Both blocks on the host, in one read-back when they are tensors."""
    if not is_tensor(w):
        return w, q
    if q is w:
        w = to_host(w)
        return w, w
    import torch

    both = to_host(torch.stack([w, q]))
    return both[0], both[1]


def _as_is(block: Any) -> Any:
    return block


def _fold(block: Any) -> Any:
    """`fold_nan` of a NumPy block; a tensor block is left as it is, since the draw
    folds a row holding NaN on the device and the search folds it on the host
    (`_folded_max`), which saves a pass over every row."""
    return block if is_tensor(block) else fold_nan(block)


__all__ = ["proposal_rows", "allowed_rows", "mask_of", "on_host"]
