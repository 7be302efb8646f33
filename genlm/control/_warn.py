"""Warnings that point at the user's line, not into this package or the event loop."""

from __future__ import annotations

import asyncio
import os
import sys
import warnings

# this package's folder (this module lies at its top) and asyncio's
_INTERNAL = (
    os.path.dirname(os.path.abspath(__file__)) + os.sep,
    os.path.dirname(os.path.abspath(asyncio.__file__)) + os.sep,
)


def _internal(filename: str) -> bool:
    return filename.startswith("<frozen ") or os.path.abspath(filename).startswith(_INTERNAL)


def user_stacklevel() -> int:
    """The `stacklevel` (for a `warnings.warn` made by this function's caller) of the
    first frame outside this package and asyncio: the user's line that led here. In
    a run, that is the line awaiting or running it (`asyncio.run(...)`, `await ...`)."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and _internal(frame.f_code.co_filename):
        frame = frame.f_back
        level += 1
    return level


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """`warnings.warn(message)` attributed to the user's line (see `user_stacklevel`)."""
    warnings.warn(message, category, stacklevel=user_stacklevel())


__all__ = ["user_stacklevel", "warn_user"]
