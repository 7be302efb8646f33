"""Result records and per-problem seeds of a distributed run (no Ray needed here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from genlm.control._args import is_int, reject_bool


class ProblemFailed(RuntimeError):
    """The error `Result.unwrap()` raises for a problem that failed; its message
    carries the problem's index and the traceback from the actor."""


class SetupFailed(RuntimeError):
    """`setup()` raised (or its actor died) while a Ray actor was starting; the message
    carries the traceback from the actor."""


@dataclass(frozen=True)
class Result:
    """What one problem gave.

    Attributes:
        index: the problem's position in the submitted sequence.
        seed: the seed it was solved with (passed to `solve` as its third argument).
        value: what `solve` returned; None when it failed.
        error: None on success; else the formatted traceback of the exception `solve`
            raised in the actor, or the reason the pool gave up on it (its actor died
            `max_retries + 1` times, or it could not be sent to an actor).
        error_type: the exception's class name (`"ActorDied"` when actors died under it).
        actor: the id of the actor that served its last attempt (ids count actors in
            the order the pool started them, replacements included); -1 when no actor
            received it.
        attempts: how many actors it was sent to (1 unless an actor died under it).
    """

    index: int
    seed: int
    value: Any = None
    error: str | None = None
    error_type: str | None = None
    actor: int = -1
    attempts: int = 1

    @property
    def ok(self) -> bool:
        """True when `solve` returned."""
        return self.error is None

    def unwrap(self) -> Any:
        """The value, or `ProblemFailed` with the problem's traceback."""
        if self.error is not None:
            raise ProblemFailed(f"problem {self.index} failed ({self.error_type}):\n{self.error}")
        return self.value


def problem_seeds(n: int, base_seed: int = 0) -> list[int]:
    """The default seed of each of `n` problems.

    `seed_i = SeedSequence(base_seed, spawn_key=(i,))` (the i-th child that
    `SeedSequence(base_seed).spawn` gives) read as a 63-bit integer, so a problem's
    seed depends only on `base_seed` and its index: not on `n`, on the number of
    actors, or on which actor serves it.
    """
    check_seed("base_seed", base_seed)
    return [
        int(np.random.SeedSequence(int(base_seed), spawn_key=(i,)).generate_state(1, np.uint64)[0] >> 1)
        for i in range(n)
    ]


def check_seed(name: str, seed: Any) -> None:
    """Raises `TypeError`/`ValueError` unless `seed` is a non-negative integer."""
    reject_bool(name, seed)
    if not is_int(seed) or seed < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {seed!r}")


def resolve_seeds(n: int, seeds: Sequence[int] | None, base_seed: int) -> list[int]:
    """The caller's `seeds` (one non-negative int per problem), or `problem_seeds`."""
    if seeds is None:
        return problem_seeds(n, base_seed)
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__len__"):
        raise TypeError(f"seeds must be a sequence of integers, got {type(seeds).__name__}")
    if len(seeds) != n:
        raise ValueError(f"seeds has {len(seeds)} entries for {n} problems; give one seed per problem")
    for i, seed in enumerate(seeds):
        check_seed(f"seeds[{i}]", seed)
    return [int(s) for s in seeds]
