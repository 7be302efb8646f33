"""The token budget of a run: samplers draw only tokens that can still end in time.

SMC with `max_tokens = M` forces EOS once a context holds `M - 1` tokens, so its
target is `t.complete(x)` over sequences of at most `M - 1` tokens. After a context
of `n` tokens and a drawn token `y`, at most

    r = M - 2 - n

tokens can follow before EOS. A token is *in budget* when the target's bound on the
tokens still needed after it (`fast_paths.TokensToFinish`, the minimum for a byte
automaton) is at most `r`; EOS always is. A token out of budget has weight zero under
the length-conditioned target (every completion in time has `t.complete = 0`), so a
sampler that draws from the target's row with those tokens removed is properly
weighted for the same target, and SMC's `log_ml` still estimates the same `Z`: only
the intermediate targets change, to `t(x) · [x can end in time]`.

The run's horizon `M` reaches the samplers through `using_horizon`
(`genlm.control.horizon`, a module below `sampler/` and `smc/`: the SMC step sets it
for token samplers; `SMC(...)(..., budget_aware=False)` leaves it unset).
Outside a run, or for a potential without a bound, nothing is pruned. A context
whose tokens are all out of budget (and EOS not allowed) gets the log weight
`DeadEnd(OUT_OF_BUDGET)`: `-inf`, with its cause.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np

from genlm.control._device import mask_like, masked
from genlm.control.horizon import (
    NO_ALLOWED_TOKEN,
    OUT_OF_BUDGET,
    DeadEnd,
    cause_of,
    horizon,
    tokens_left,
    using_horizon,
)
from genlm.control.potential import fast_paths
from genlm.control.weights import weights_block


class Budget(NamedTuple):
    """Which next tokens are in budget after each context of a batch.

    Attributes:
        ok: bool block over `vocab_eos`, True where the token can still end in time
            (EOS always).
        stuck: per context, True when the bound allows some token but none in time
            (and not EOS): the context cannot end within `max_tokens`.
    """

    ok: np.ndarray
    stuck: np.ndarray

    @property
    def prunes(self) -> bool:
        """Whether some token is out of budget (else masking changes nothing)."""
        return not self.ok.all()

    def mask(self, potential: Any, rows: list) -> list:
        """`rows` (LazyWeights over `potential.vocab_eos`) with the tokens out of
        budget set to `-inf`, on the rows' device (`rows` themselves when no token
        is out of budget: no pass over them)."""
        if not self.prunes:
            return rows
        block = weights_block(rows)
        return potential.rows_to_weights(masked(mask_like(self.ok, block), block))

    def weight(self, i: int, logw: float) -> float:
        """`logw` of context `i`, as `DeadEnd(OUT_OF_BUDGET)` where it is stuck."""
        return DeadEnd(OUT_OF_BUDGET) if self.stuck[i] else logw


async def budget_of(potential: Any, contexts: Sequence[Sequence[Any]]) -> Budget | None:
    """The `Budget` of `contexts` under `potential`'s bound, or None when nothing is
    pruned: no horizon, no contexts, or no `batch_tokens_to_finish` offered."""
    m = horizon()
    if m is None or not contexts:
        return None
    bound = fast_paths.tokens_to_finish(potential)
    if bound is None:
        return None
    left = np.array([m - 2 - len(c) for c in contexts], dtype=np.float64)
    contexts = [list(c) for c in contexts]
    most = fast_paths.most_tokens_to_finish(potential)
    if most is not None and (np.asarray(await most(contexts)) <= left).all():
        # every bound is within the tokens left: only the tokens the potential itself
        # rules out (bound `inf`) would be masked, and no context is stuck
        return None
    rows = np.asarray(await bound(contexts), dtype=np.float64)
    ok = rows <= left[:, None]
    in_time = ok[:, :-1].any(axis=1) | (rows[:, -1] < np.inf)
    ok[:, -1] = True
    stuck = np.zeros(len(contexts), dtype=bool)
    late = np.flatnonzero(~in_time)  # rare: only these rows are read again
    stuck[late] = (rows[late] < np.inf).any(axis=1)
    return Budget(ok, stuck)


__all__ = [
    "DeadEnd",
    "OUT_OF_BUDGET",
    "NO_ALLOWED_TOKEN",
    "Budget",
    "budget_of",
    "cause_of",
    "horizon",
    "tokens_left",
    "using_horizon",
]
