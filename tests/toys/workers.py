"""Potentials for the multiprocess tests: importable by name in spawned workers."""

from __future__ import annotations

import os
import time

from genlm.control import Potential

VOCAB = [b"a", b"b"]


class Faulty(Potential):
    """`prefix(ctx) = -len(ctx)`, `complete(ctx) = -len(ctx) - 1`, unless `fault` says
    what `prefix` does instead: "hang" (sleeps for ~11 days), "exit" (`os._exit(3)`)
    or "raise" (`ValueError`)."""

    def __init__(self, fault: str | None = None):
        super().__init__(VOCAB)
        self.fault = fault

    async def prefix(self, context):
        if self.fault == "hang":
            time.sleep(10**6)
        elif self.fault == "exit":
            os._exit(3)
        elif self.fault == "raise":
            raise ValueError(f"prefix refuses {context!r}")
        return -float(len(context))

    async def complete(self, context):
        return -float(len(context)) - 1.0

    def spawn(self) -> "Faulty":
        return Faulty(self.fault)


class NoSpawn(Faulty):
    """Has no spawn() of its own."""

    spawn = Potential.spawn


class BrokenSpawn(Faulty):
    """A spawn() that reads an attribute the class never sets."""

    def spawn(self):
        return BrokenSpawn(self.missing_setting)


class Unpicklable(Faulty):
    """Holds a lambda, so its spawn cannot be sent to a worker."""

    def __init__(self):
        super().__init__()
        self.rule = lambda ctx: len(ctx)


def _refuse_to_load():
    raise OSError("this potential refuses to be unpickled")


class FailsToLoad(Faulty):
    """Pickles, but unpickling it (in the worker) raises OSError."""

    def __reduce__(self):
        return (_refuse_to_load, ())

    def spawn(self):
        return self


class HangsInSpawn(Faulty):
    """A spawn() that never returns."""

    def spawn(self):
        time.sleep(10**6)
