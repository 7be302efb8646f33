"""The token horizon of a run, which the SMC step sets and the samplers read.

SMC with `max_tokens = M` forces EOS once a context holds `M - 1` tokens; inside
`using_horizon(M)` a sampler draws only tokens that can still end in time (see
`genlm.control.sampler.budget`). A sampler whose context has no such token returns
the log weight `DeadEnd(OUT_OF_BUDGET)`, and the step counts it as a `max_tokens`
death (`cause_of`). Why a particle's weight became zero is one vocabulary, `Cause`,
and one carrier, `DeadEnd`, shared by the samplers that report a cause and the SMC
step that counts it (`genlm.control.smc.deaths`). This module sits below both
`sampler/` and `smc/`, so that neither imports the other for it.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from enum import Enum
from typing import Any, Iterator, Sequence

_HORIZON: contextvars.ContextVar[int | None] = contextvars.ContextVar("genlm_control_horizon", default=None)

class Cause(str, Enum):
    """Why a particle's weight became zero (the order the step checks them in is
    `genlm.control.smc.deaths`'s)."""

    MAX_TOKENS = "max_tokens"
    DEAD_PREFIX = "dead_prefix"
    NAN = "nan"
    CRITIC = "critic"

    def __repr__(self) -> str:
        return repr(self.value)


#: The cause of a zero weight when no token can end within `max_tokens`.
OUT_OF_BUDGET = Cause.MAX_TOKENS
#: The cause of a zero weight when the target allows no next token (nor EOS).
NO_ALLOWED_TOKEN = Cause.DEAD_PREFIX


class DeadEnd(float):
    """A log weight of `-inf` that says why: `DeadEnd(Cause.MAX_TOKENS).cause`.

    It is a float (`-inf`), so code that reads the weight as a number is unchanged,
    and code that counts dead particles reads `cause` (see `cause_of`). A sampler
    returns it as its log weight (the budget does), or as its unit with log weight
    `-inf` (the step then draws no unit: it closes the context with EOS in its place
    for `Cause.MAX_TOKENS`, and leaves it unfinished, without EOS, for other causes).
    """

    cause: Cause

    def __new__(cls, cause: Cause | str) -> "DeadEnd":
        """`-inf` carrying `cause`.

        Args:
            cause: a `Cause` (or its value).

        Raises:
            ValueError: `cause` is not a `Cause`.
        """
        out = super().__new__(cls, float("-inf"))
        out.cause = Cause(cause)
        return out

    def __repr__(self) -> str:
        return f"DeadEnd({self.cause.value!r})"

    def __reduce__(self) -> tuple:
        return (DeadEnd, (self.cause.value,))


def cause_of(logw: Any) -> Cause | None:
    """The cause carried by a sampler's log weight (None: not a `DeadEnd`)."""
    return logw.cause if isinstance(logw, DeadEnd) else None


@contextmanager
def using_horizon(max_tokens: int | None) -> Iterator[None]:
    """Samplers called inside draw only tokens that can end within `max_tokens`
    (EOS included); None turns the budget off."""
    token = _HORIZON.set(None if max_tokens is None else int(max_tokens))
    try:
        yield
    finally:
        _HORIZON.reset(token)


def horizon() -> int | None:
    """The `max_tokens` of the run the caller is in (None: no budget)."""
    return _HORIZON.get()


def tokens_left(context: Sequence[Any]) -> int | None:
    """`r = max_tokens - 2 - len(context)`: how many tokens may follow the next one
    before EOS (None: no budget)."""
    m = _HORIZON.get()
    return None if m is None else m - 2 - len(context)


__all__ = [
    "Cause",
    "DeadEnd",
    "OUT_OF_BUDGET",
    "NO_ALLOWED_TOKEN",
    "cause_of",
    "horizon",
    "tokens_left",
    "using_horizon",
]
