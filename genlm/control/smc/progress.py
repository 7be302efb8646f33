"""The progress bar of a run: on stderr, for runs longer than `DELAY_S`, on a terminal.

tqdm draws nothing on a terminal that reports a size of 0×0 (`script`, some CI
runners and editor terminals): it reads -1 rows; there the bar is `DEFAULT_COLUMNS`
wide on a screen of `DEFAULT_ROWS`. When stderr
is not a terminal (a file, a pipe, a notebook's captured stream) no bar is drawn.
"""

from __future__ import annotations

import math
import os
import sys
from typing import IO, Any

DELAY_S = 2.0  # a run shows its bar once it has taken this long (tests set it to 0)
DEFAULT_COLUMNS = 80  # the bar's width on a terminal that reports no size
DEFAULT_ROWS = 24  # and the rows tqdm may use there


def _size(stream: IO) -> tuple[int | None, int | None]:
    """`(ncols, nrows)` for tqdm: None where the terminal reports a size (tqdm reads
    it), the defaults where it reports 0 (tqdm would draw nothing)."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None, None
    return (
        None if size.columns > 0 else DEFAULT_COLUMNS,
        None if size.lines > 0 else DEFAULT_ROWS,
    )


def progress_bar(total: float, stream: IO | None = None, delay: float | None = None) -> Any:
    """A tqdm bar over at most `total` steps (none known when infinite).

    Args:
        stream: where to draw (default `sys.stderr`).
        delay: seconds before the bar first shows (default `DELAY_S`, read at call time).
    """
    from tqdm.auto import tqdm

    stream = sys.stderr if stream is None else stream
    ncols, nrows = _size(stream)
    return tqdm(
        total=None if math.isinf(total) else int(total),
        desc="smc",
        unit="step",
        delay=DELAY_S if delay is None else delay,
        leave=False,
        disable=None,  # off unless `stream` is a terminal
        file=stream,
        ncols=ncols,
        nrows=nrows,
    )


__all__ = ["progress_bar", "DELAY_S", "DEFAULT_COLUMNS", "DEFAULT_ROWS"]
