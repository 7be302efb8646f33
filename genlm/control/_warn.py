"""Warnings that point at the user's line, not into this package or the event loop.

A warning raised while `genlm.control.run` runs a call in its worker thread (inside a
notebook's running loop) has no user frame in that thread: it points at the line that
called `run`, which `run` records with `origin_of` in the context of the call.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import sys
import threading
import warnings
from types import FrameType
from typing import Any, NamedTuple

# this package's folder (this module lies at its top) and asyncio's
_INTERNAL = (
    os.path.dirname(os.path.abspath(__file__)) + os.sep,
    os.path.dirname(os.path.abspath(asyncio.__file__)) + os.sep,
)
# the frames a worker thread starts from
_THREADING = os.path.abspath(threading.__file__)


class Origin(NamedTuple):
    """A user's line: its file, line number and module globals."""

    filename: str
    lineno: int
    module_globals: dict[str, Any]


ORIGIN: contextvars.ContextVar[Origin | None] = contextvars.ContextVar(
    "genlm_control_origin", default=None
)


def _internal(filename: str) -> bool:
    if filename.startswith("<frozen "):
        return True
    path = os.path.abspath(filename)
    return path.startswith(_INTERNAL) or path == _THREADING


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


def origin_of(frame: FrameType | None) -> Origin | None:
    """The first frame from `frame` outward that lies outside this package, asyncio
    and the threading module (None when there is none, as in a worker thread)."""
    while frame is not None and _internal(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return None
    return Origin(frame.f_code.co_filename, frame.f_lineno, frame.f_globals)


def warn_user(message: str | Warning, category: type[Warning] = UserWarning) -> None:
    """`warnings.warn(message)` attributed to the user's line: the first frame of the
    caller's stack outside this package and asyncio or, in `run`'s worker thread, the
    line that called `run` (see the module's docstring)."""
    if origin_of(sys._getframe(1)) is None and ORIGIN.get() is not None:
        at = ORIGIN.get()
        warnings.warn_explicit(
            message,
            category,
            at.filename,
            at.lineno,
            module=at.module_globals.get("__name__", "<string>"),
            registry=at.module_globals.setdefault("__warningregistry__", {}),
            module_globals=at.module_globals,
        )
        return
    warnings.warn(message, category, stacklevel=user_stacklevel())


__all__ = ["user_stacklevel", "warn_user", "origin_of", "ORIGIN", "Origin"]
