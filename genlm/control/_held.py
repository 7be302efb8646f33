"""Models that a running SMC holds: their settings must not change under the run.

A run walks the object graph of its sampler and critic (the potentials, samplers and
set samplers of this package, and the lists, tuples and dicts they hold) once, at its
start, and holds every `HeldByRuns` object it finds until it ends. A
`PromptedLLM` shared by two concurrent runs then refuses a prompt change that would
silently make one run continue the other's prompt (see `PromptedLLM.prompt_ids`).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

_MAX_OBJECTS = 10_000  # a bound on the walk: sampler graphs hold a few dozen objects
_MAX_CONTAINER = 256  # longer lists are token tables, never lists of models


class HeldByRuns:
    """A mixin for an object whose settings a running SMC relies on.

    `runs_holding` counts the runs now using the object; a setter that would change
    what such a run computes checks it and refuses the change.
    """

    _runs_holding: int = 0

    @property
    def runs_holding(self) -> int:
        """How many SMC runs are using this object now."""
        return self._runs_holding

    def prompt_text(self) -> str | None:
        """The text this object's output continues (a run's record keeps it), if any."""
        return None


#: Types whose instances hold no model: the walk does not visit them (a constraint's
#: caches hold hundreds of token tuples, byte strings and NumPy rows).
_LEAVES: tuple[type, ...] = (int, float, complex, str, bytes, bytearray, type(None), range, type)


def _leaf(obj: Any) -> bool:
    """Whether the walk skips `obj`: a value of a leaf type, a NumPy or torch value,
    or a tuple of such (a token context, a cache key). A class of this package that
    holds only tables (a token trie) declares `holds_no_models = True`, and the walk
    does not look inside its instances."""
    if isinstance(obj, tuple):
        return all(map(_scalar, obj))
    return _scalar(obj)


def _scalar(obj: Any) -> bool:
    return isinstance(obj, _LEAVES) or type(obj).__module__ in ("numpy", "torch")


def _children(obj: Any) -> Iterator[Any]:
    if isinstance(obj, dict):
        if len(obj) <= _MAX_CONTAINER:
            yield from (v for v in obj.values() if not _leaf(v))
        return
    if isinstance(obj, (list, tuple, set, frozenset)):
        if len(obj) <= _MAX_CONTAINER:
            yield from (v for v in obj if not _leaf(v))
        return
    if type(obj).__module__.startswith("genlm.control") and not getattr(type(obj), "holds_no_models", False):
        state = getattr(obj, "__dict__", None)
        if state is not None:
            yield from [v for v in state.values() if not _leaf(v)]


def held_objects(*roots: Any) -> list[HeldByRuns]:
    """Every `HeldByRuns` object reachable from `roots` (each once)."""
    seen: set[int] = set()
    found: list[HeldByRuns] = []
    stack = [r for r in roots if r is not None]
    while stack and len(seen) < _MAX_OBJECTS:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, HeldByRuns):
            found.append(obj)
        stack.extend(_children(obj))
    return found


@contextmanager
def holding(*roots: Any) -> Iterator[list[HeldByRuns]]:
    """Hold every `HeldByRuns` object reachable from `roots` for the block's duration."""
    held = held_objects(*roots)
    for obj in held:
        obj._runs_holding = obj._runs_holding + 1
    try:
        yield held
    finally:
        for obj in held:
            obj._runs_holding = obj._runs_holding - 1


__all__ = ["HeldByRuns", "held_objects", "holding"]
