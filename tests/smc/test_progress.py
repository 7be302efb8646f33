"""The run's progress bar: drawn on a terminal (with a default width where the terminal
reports 0×0), never when stderr is not a terminal. The 2-second delay is set to 0 in
the child process, so no test waits on the clock."""

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from genlm.control.smc import progress

TESTS = str(Path(__file__).resolve().parents[1])
CHILD = f"""
import asyncio, sys
sys.path.insert(0, {TESTS!r})
import genlm.control.smc.progress as progress
progress.DELAY_S = float(sys.argv[1])
from toys import ab_lm
from genlm.control import direct_token_sampler
asyncio.run(direct_token_sampler(ab_lm()).smc(n_particles=2, ess_threshold=0.5, max_tokens=6, seed=0))
"""


def _read_all(fd: int) -> bytes:
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the child closed its end
            return out
        if not chunk:
            return out
        out += chunk


def run_on_pty(rows: int, cols: int, delay: float = 0.0) -> bytes:
    """The child's stderr, written to a pseudo-terminal of the given size."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(delay)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=child, close_fds=True,
    )
    os.close(child)
    try:
        out = _read_all(main)
    finally:
        os.close(main)
    assert proc.wait(timeout=120) == 0, out.decode(errors="replace")
    return out


def bar_lines(out: bytes) -> list[str]:
    return [p for p in out.decode("utf-8", errors="replace").split("\r") if p.startswith("smc:")]


@pytest.mark.parametrize("rows, cols", [(24, 100), (0, 0)])
def test_bar_is_drawn_on_a_terminal(rows, cols):
    lines = bar_lines(run_on_pty(rows, cols))
    assert lines, "no bar on the terminal"
    width = cols if cols else progress.DEFAULT_COLUMNS
    assert all(len(line.rstrip()) <= width for line in lines)
    assert any("/6" in line and "|" in line for line in lines), lines


def test_bar_waits_for_its_delay():
    # a run far shorter than the delay shows no bar (a delay no toy run reaches)
    assert bar_lines(run_on_pty(24, 100, delay=3600.0)) == []


def test_no_bar_when_stderr_is_not_a_terminal():
    done = subprocess.run([sys.executable, "-c", CHILD, "0"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "smc:" not in done.stderr


def test_default_size_only_where_the_terminal_reports_none():
    main, child = pty.openpty()
    try:
        with open(child, "w", closefd=False) as stream:
            fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 0, 0, 0, 0))
            assert progress._size(stream) == (progress.DEFAULT_COLUMNS, progress.DEFAULT_ROWS)
            fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 123, 0, 0))
            assert progress._size(stream) == (None, None)  # tqdm reads the size itself
    finally:
        os.close(main)
        os.close(child)
