"""Files of run records (and of their HTML pages): checked before a run, written
atomically after it, never through a symbolic link.

The rules for an output path (`json_path=`, `--record`, `InferenceVisualizer.to_html`):

- its folder exists, is a folder, and is writable;
- the path itself is not a directory, not a symbolic link (dangling or not: a record
  is never written through a link; pass the link's target instead), and, when it
  exists, a regular file (never a device, pipe or socket) that is writable.

Checking creates and truncates nothing. Writing goes to a new temporary file in the
same folder (`O_CREAT | O_EXCL | O_NOFOLLOW`), which `os.replace` then puts in
place: readers never see half a file, and the rename replaces a directory entry
without following any link.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from typing import Any

from genlm.control._warn import warn_user


class RecordNotWrittenWarning(UserWarning):
    """The run finished but its record could not be written; the result is returned
    and its record is in `sequences.record` (save it with `.to_json(other_path)`).

    Attributes:
        path: where the record was to be written.
        reason: why it was not.
    """

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(
            f"the run's record was not written to {path!r}: {reason}; the result is returned "
            "and its record is in `sequences.record` (save it with "
            "`sequences.record.to_json(other_path)`)"
        )


def _fail(what: str, path: str, problem: str) -> ValueError:
    return ValueError(f"{what} {path!r} {problem}")


def check_output_path(path: Any, what: str = "json_path") -> Path:
    """The path where a record (or page) may be written, or a clear error.

    Args:
        path: a `str` or `os.PathLike` (of `str`).
        what: the argument's name, for the messages.

    Raises:
        TypeError: if `path` is not a path.
        ValueError: naming the rule that `path` breaks (see the module docstring).
    """
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{what} must be a path (str or os.PathLike), got {type(path).__name__}")
    raw = os.fspath(path)
    if not isinstance(raw, str):
        raise TypeError(f"{what} must be a str path, got {type(raw).__name__}")
    if not raw:
        raise ValueError(f"{what} is empty")
    if "\0" in raw:
        raise _fail(what, raw, "contains a NUL character")
    if raw.endswith(("/", os.sep)):
        raise _fail(what, raw, "names a folder, not a file")
    target = Path(raw)
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _fail(what, raw, f"cannot be used: {exc.strerror or exc}") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise _fail(what, raw, "is a symbolic link (records are never written through links)")
        if stat.S_ISDIR(st.st_mode):
            raise _fail(what, raw, "is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise _fail(what, raw, "is not a regular file (a device, pipe or socket)")
    folder = target.parent
    try:
        folder_st = os.stat(folder)
    except FileNotFoundError:
        raise _fail(what, raw, f"is in a folder that does not exist ({str(folder)!r})") from None
    except OSError as exc:
        raise _fail(what, raw, f"is in an unusable folder: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(folder_st.st_mode):
        raise _fail(what, raw, f"is under {str(folder)!r}, which is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise _fail(what, raw, f"is in a folder that is not writable ({str(folder)!r})")
    if st is not None and not os.access(target, os.W_OK):
        raise _fail(what, raw, "is a read-only file")
    return target


def write_text_atomically(path: Any, text: str, what: str = "json_path") -> None:
    """Write `text` (UTF-8) to `path`: a temporary file beside it, then `os.replace`.

    An existing file keeps its permission bits; a new one gets the usual
    `0o666 & ~umask`.

    Raises:
        TypeError, ValueError: if `path` breaks a rule of `check_output_path`.
        OSError: if writing fails (the temporary file is removed).
    """
    target = check_output_path(path, what)
    previous = target.stat().st_mode if target.exists() else None
    tmp = target.parent / f".{target.name[:100]}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if previous is not None:
            os.chmod(tmp, stat.S_IMODE(previous))
        if os.path.islink(target) or os.path.isdir(target):  # appeared since the check
            raise _fail(what, str(target), "became a link or a directory while the run was going on")
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_record_or_warn(record: Any, path: Any) -> bool:
    """Write `record` to `path`; on failure warn (`RecordNotWrittenWarning`, naming
    the path and the cause) instead of raising, so that the run's result survives.

    Returns:
        Whether the record was written.
    """
    try:
        record.to_json(path)
    except (OSError, ValueError) as exc:
        reason = f"{exc.strerror}" if isinstance(exc, OSError) and exc.strerror else str(exc)
        warn_user(RecordNotWrittenWarning(os.fspath(path), reason))
        return False
    return True


def read_text_file(path: Any) -> str:
    """The UTF-8 text of the file at `path`.

    Raises:
        TypeError: if `path` is not a path.
        FileNotFoundError: if there is no file there.
        ValueError: if it is a directory or not UTF-8 text.
    """
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"a record path must be a str or os.PathLike, got {type(path).__name__}")
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no SMC record at {str(p)!r}")
    if not p.is_file():
        raise ValueError(f"{str(p)!r} is not a file")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{str(p)!r} is not an SMC record: not UTF-8 text ({exc.reason})") from None


__all__ = [
    "RecordNotWrittenWarning",
    "check_output_path",
    "write_text_atomically",
    "write_record_or_warn",
    "read_text_file",
]
