"""Counting twins of a stateful potential class: one that carries states, one that
replays contexts, both counting their async calls in `asked`."""

from __future__ import annotations


class CountedRows:
    """Mixin counting every async call that could answer a `logw_next` row."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.asked = 0

    async def logw_next(self, context):
        self.asked += 1
        return await super().logw_next(context)

    async def batch_logw_next(self, contexts):
        self.asked += 1
        return await super().batch_logw_next(contexts)


class Counted(CountedRows):
    """Mixin counting every async call of the potential (rows, `prefix`, `complete`)."""

    async def prefix(self, context):
        self.asked += 1
        return await super().prefix(context)

    async def complete(self, context):
        self.asked += 1
        return await super().complete(context)


def twins(cls: type, counter: type = Counted) -> tuple[type, type]:
    """A stateful subclass of `cls` and one that replays contexts, both with `counter`."""
    carried = type(f"Carried{cls.__name__}", (counter, cls), {})
    replayed = type(f"Replayed{cls.__name__}", (counter, cls), {"stateful": False})
    return carried, replayed
