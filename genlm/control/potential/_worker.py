"""The process side of `MultiProcPotential`, and the parent's handle on one worker.

A worker is a daemon process started with the "spawn" method and connected to its
parent by a pipe. It unpickles `(factory, args)`, builds `factory(*args)` and
answers `(method, contexts)` requests with `("ok", value)` or
`("err", pickled exception, traceback)`; it exits on `None`, on the pipe's end, or
when its parent dies.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import pickle
import signal
import threading
import time
import traceback
from typing import Any

import numpy as np

from genlm.control.weights import host_rows

#: Seconds a worker is given to exit after SIGTERM (or a stop request) before SIGKILL.
TERMINATE_TIMEOUT = 1.0


def worker_main(conn: Any, payload: bytes, parent_pid: int) -> None:
    """The worker's loop (runs in the child process)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    try:
        factory, args = pickle.loads(payload)
        potential = factory(*args)
        tables = potential.tables
    except BaseException as exc:  # noqa: BLE001 - every failure goes to the parent
        _send_error(conn, exc)
        return
    conn.send(("ok", tables))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            break
        if request is None:
            break
        try:
            reply = ("ok", _call(potential, *request))
        except BaseException as exc:  # noqa: BLE001
            _send_error(conn, exc)
            continue
        conn.send(reply)
    potential.cleanup()


def _watch_parent(parent_pid: int) -> None:
    """Exit when the parent is gone (a hung method would otherwise outlive it)."""
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    os._exit(1)


def _call(potential: Any, method: str, contexts: list) -> np.ndarray:
    batch = {
        "prefix": potential.batch_prefix,
        "complete": potential.batch_complete,
        "score": potential.batch_score,
        "logw_next": potential.batch_logw_next,
    }[method]
    result = asyncio.run(batch(contexts))
    if method == "logw_next":
        return np.stack(host_rows(result)) if result else np.zeros((0, 0))
    return np.asarray(result, dtype=np.float64)


def _send_error(conn: Any, exc: BaseException) -> None:
    """Send `exc` pickled, or a `RuntimeError` with its type and message when it does
    not survive a pickle round trip."""
    text = traceback.format_exc()
    try:
        payload = pickle.dumps(exc)
        pickle.loads(payload)
    except Exception:  # noqa: BLE001
        payload = pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"))
    try:
        conn.send(("err", payload, text))
    except (OSError, ValueError):  # pragma: no cover - the parent is gone
        pass


def worker_error(payload: bytes, text: str, where: str) -> BaseException:
    """The worker's exception, with its traceback attached as a note."""
    exc = pickle.loads(payload)
    exc.add_note(f"raised in {where}; its traceback there:\n{text.rstrip()}")
    return exc


def _wake(readable: asyncio.Future) -> None:
    if not readable.done():
        readable.set_result(None)


class WorkerDied(RuntimeError):
    """A worker process ended without answering (killed, crashed or `os._exit`)."""


class Worker:
    """The parent's handle on one worker process: start, ask, stop.

    Args:
        payload: `pickle.dumps((factory, args))`.
        label: how errors name the potential.
    """

    def __init__(self, payload: bytes, label: str):
        ctx = multiprocessing.get_context("spawn")
        self.label = label
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=worker_main, args=(child, payload, os.getpid()), daemon=True)
        try:
            self.process.start()
        finally:
            child.close()
        self.tables: Any = None
        self.ready = False
        self.stopped = False
        self._readable: asyncio.Future | None = None

    def describe(self) -> str:
        return f"worker process {self.process.pid} of {self.label}"

    def ready_sync(self, timeout: float | None) -> None:
        """Wait for the worker's potential to be built (blocking)."""
        if not self.conn.poll(timeout):
            raise TimeoutError(f"{self.describe()} did not start within {timeout} s")
        self._take_ready()

    async def ready_async(self) -> None:
        await self.wait_readable()
        self._take_ready()

    def _take_ready(self) -> None:
        status, *rest = self.receive("starting")
        if status == "err":
            raise worker_error(*rest, where=self.describe())
        self.tables, self.ready = rest[0], True

    async def wait_readable(self) -> None:
        """Wait, without blocking the event loop, until the worker has written."""
        if self.conn.poll():
            return
        loop = asyncio.get_running_loop()
        readable = self._readable = loop.create_future()
        fd = self.conn.fileno()
        loop.add_reader(fd, _wake, readable)
        try:
            await readable
        finally:
            self._readable = None
            loop.remove_reader(fd)

    def send(self, request: Any, doing: str) -> None:
        try:
            self.conn.send(request)
        except (OSError, ValueError) as exc:
            raise self.died(doing) from exc

    def receive(self, doing: str) -> tuple:
        try:
            return self.conn.recv()
        except (EOFError, OSError) as exc:
            raise self.died(doing) from exc

    def died(self, doing: str) -> WorkerDied:
        if self.stopped:
            return WorkerDied(f"{self.describe()} was stopped (cleanup) while {doing}")
        self.process.join(TERMINATE_TIMEOUT)
        code = self.process.exitcode
        how = "is still running" if code is None else f"exit code {code}"
        return WorkerDied(f"{self.describe()} died while {doing} ({how})")

    def stop(self, graceful: bool = False, timeout: float = TERMINATE_TIMEOUT) -> None:
        """End the process: ask it to exit (when `graceful`), else or then SIGTERM,
        and SIGKILL after `timeout` seconds; never waits longer than ~2 `timeout`.
        A call waiting on the worker wakes up and raises `WorkerDied`."""
        self.stopped = True
        process = self.process
        if graceful and process.is_alive():
            try:
                self.conn.send(None)
                process.join(timeout)
            except (OSError, ValueError):
                pass
        if process.is_alive():
            process.terminate()
            process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join(timeout)
        self.conn.close()
        self._wake_waiter()

    def _wake_waiter(self) -> None:
        # Closing the pipe drops it from the event loop's selector without an event.
        readable = self._readable
        if readable is not None and not readable.done() and not readable.get_loop().is_closed():
            readable.get_loop().call_soon_threadsafe(_wake, readable)

    def kill_now(self) -> None:
        """SIGKILL without waiting (for finalizers, which must not block)."""
        if self.process.is_alive():
            self.process.kill()
        self.conn.close()


__all__ = ["TERMINATE_TIMEOUT", "Worker", "WorkerDied", "worker_error", "worker_main"]
