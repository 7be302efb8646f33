"""Why particles end with weight zero: the cause a step attaches, the counts a run returns.

A particle dies at the step where its weight becomes zero (or NaN, read as zero).
The step (`genlm.control.smc.step.propose`) attaches one `Cause` there:

1. `NAN`: the sampler's log weight or the critic's score was NaN;
2. the cause a sampler reported: a sampler that knows why it found no unit of
   positive weight returns `DeadEnd(cause)` (`genlm.control.horizon`: a `-inf` that
   carries a `Cause`) as its unit, with log weight `-inf` (the step closes the
   context with EOS in its place), or as its log weight (a budget-aware sampler
   that finds no token able to finish in the tokens left returns
   `DeadEnd(Cause.MAX_TOKENS)`);
3. `MAX_TOKENS`: the particle was made to end (at `max_tokens`, or by
   `terminate_when`) and ending there has weight zero;
4. `DEAD_PREFIX`: the sampler found no unit of positive weight (the condition
   allowed no token after the context);
5. `CRITIC`: the critic gave the extended context weight zero.

The driver keeps each particle's cause through resampling and returns the counts
over the final population as `Deaths` (`Sequences.deaths`, the run record, the
command line), with one `ZeroWeightWarning` when every particle died.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable

from genlm.control._held import _MAX_CONTAINER  # longer lists are token tables, never models
from genlm.control.horizon import Cause, DeadEnd


class ZeroWeightWarning(UserWarning):
    """Every particle of an SMC run ended with weight zero; the message says why."""


@dataclass(frozen=True)
class Deaths:
    """How many of the returned sequences have weight zero, by cause.

    Attributes:
        max_tokens: made to end (at `max_tokens` or by `terminate_when`) where ending
            has weight zero: the constraint could not finish in the tokens allowed.
        dead_prefix: the sampler found no allowed next token (the condition allowed
            none after the context).
        nan: a NaN weight from the sampler or the critic.
        critic: the critic gave the context weight zero.
    """

    max_tokens: int = 0
    dead_prefix: int = 0
    nan: int = 0
    critic: int = 0

    @classmethod
    def of(cls, causes: Iterable[Cause]) -> "Deaths":
        """The counts of `causes`."""
        counts = {c: 0 for c in Cause}
        for c in causes:
            counts[Cause(c)] += 1
        return cls(**{c.value: n for c, n in counts.items()})

    @property
    def total(self) -> int:
        """Sequences of weight zero."""
        return self.max_tokens + self.dead_prefix + self.nan + self.critic

    def as_dict(self) -> dict[str, int]:
        """`{cause: count}` for every cause (the record's and the CLI's `deaths`)."""
        return {c.value: getattr(self, c.value) for c in Cause}

    def explain(self, n_particles: int, length_hints: Iterable[str] = ()) -> str:
        """Why every particle died, with the next step to try for each cause seen;
        `length_hints` (`length_hints(model)`) name the option of each constraint at
        hand that makes its texts finish in fewer tokens."""
        parts = [
            f"{self.max_tokens} reached max_tokens unable to finish",
            f"{self.dead_prefix} met a dead prefix (the condition allowed no next token)",
            f"{self.nan} had NaN weights",
        ]
        if self.critic:
            parts.append(f"{self.critic} were given weight zero by the critic")
        hints = []
        if self.max_tokens:
            told = list(dict.fromkeys(length_hints))
            hints.append("raise max_tokens" + (f" ({'; '.join(told)})" if told else ""))
        if self.dead_prefix:
            hints.append(
                "check that the condition accepts text the model can tokenize, or try "
                "another sampler (e.g. direct_token_sampler(llm * condition))"
            )
        if self.nan:
            hints.append("find the potential or critic that returns NaN (a log of a negative number?)")
        if self.critic:
            hints.append("check the critic, or sample with it in the target instead")
        hint = "; ".join(hints) if hints else "try more particles or another sampler"
        return f"every one of the {n_particles} particles ended with weight zero: {', '.join(parts)}. Next: {hint}."


def length_hints(root: Any, limit: int = 200) -> list[str]:
    """The `length_hint()` of every constraint reachable from `root` (a sequence model,
    a sampler, a potential) through the attributes of this library's objects: each
    names the option of its constraint that shortens its texts (a `JsonSchema`'s
    spelling, a Lark grammar's `%ignore`, a regex's repeats). An object with a
    `length_hint` speaks for what it holds (a coercion, for its constraint). At most
    `limit` objects are visited, and only this library's objects are queued, from
    attributes and from lists and tuples of at most `_MAX_CONTAINER` items (the work
    is bounded whatever the vocabulary's size)."""
    seen, queue, out = set(), deque([root]), []
    while queue and len(seen) < limit:
        obj = queue.popleft()
        if id(obj) in seen or not _ours(obj):
            continue
        seen.add(id(obj))
        hint = getattr(type(obj), "length_hint", None)
        if callable(hint):
            text = hint(obj)
            if text:
                out.append(text)
            continue
        for value in _attributes(obj):
            if isinstance(value, (list, tuple)):
                if len(value) <= _MAX_CONTAINER:
                    queue.extend(v for v in value if _ours(v))
            elif _ours(value):
                queue.append(value)
    return out


def _ours(obj: Any) -> bool:
    return type(obj).__module__.startswith("genlm.control")


def _attributes(obj: Any) -> list:
    """The values of `obj`'s attributes, from its `__dict__` and its `__slots__`."""
    values = list(getattr(obj, "__dict__", {}).values())
    for cls in type(obj).__mro__:
        slots = getattr(cls, "__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                values.append(getattr(obj, name))
    return values


__all__ = ["Cause", "DeadEnd", "Deaths", "ZeroWeightWarning", "length_hints"]
