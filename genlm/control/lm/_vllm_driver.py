"""The vLLM backend's engine thread: particles decode in place as live engine requests.

All engine calls (`add_request`, `step`, `abort_request`, adapters, the prefix cache)
are made by one thread, which serves jobs from a queue in order. A job asks for the
rows of some `(ids, lora)` queries (one event-loop pass of the backend, or a
synchronous call) or runs a function on the engine between steps.

A query's row is, in this order: a kept row; the continuation of a *live* request
(a request whose row for `ids[:-1]` was captured and whose step is held, see below)
by the token `ids[-1]`; or a new request whose prompt is `ids`. A request is made
with `max_tokens` up to the engine's length, temperature 0 and `ignore_eos`, so that
it can be continued.

Holding. When the step that captures the last row a job waits for also captured a
request that may continue, the logits processor calls `_held` on this thread, inside
`engine.step()`: the job is answered there, its requests become live, and the thread
waits (at most `idle_s`) for the next job. A job the kept rows answer is answered at
once and the wait goes on. Any other job ends the wait: each live request that one of
its queries extends by one token is forced to take that token (the processor masks
every other token of its greedy row); the step then finishes, and every live request
not continued is aborted before any new request is added. A wait that times out, or
a job that runs a function, ends all live requests. So when a step starts, every one
of our requests in the engine is one the current job waits for, and every row
captured is the row of the request's full context: chunked prefill is off (a prompt
is computed whole in one step) and async scheduling is off (a token is appended
before the next step is scheduled). Exactness rests on the processor forcing the
token: vLLM appends the token its sampler picks, and a row with one finite logit
has one argmax.

A step whose rows do not complete the job (more requests than one step takes, or a
preempted request) holds nothing: the requests it captured are aborted after it and
their next tokens, if asked, start new requests.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from genlm.control.lm._kv_cache import parent_key
from genlm.control.lm._vllm_capture import Capture

Key = tuple  # (ids tuple, lora name or None)
_ids = itertools.count()


@dataclass
class _Job:
    """Rows for `wanted` (kind "rows") or `fn()` run between steps (kind "call")."""

    kind: str
    future: Future
    wanted: list = field(default_factory=list)
    fn: Callable[[], Any] | None = None
    # filled by `_plan`
    rows: dict = field(default_factory=dict)
    extend: dict = field(default_factory=dict)  # live rid -> (child key, token)
    new: list = field(default_factory=list)
    planned: bool = False


class Driver:
    """One engine thread serving jobs (see the module doc).

    Args:
        engine: the `vllm.LLMEngine`.
        capture: the state the logits processor shares.
        request: `request(rid, key, max_tokens)` adds a request to the engine.
        in_place: whether requests may be held and continued.
        backend: the `VLLMBackend` (its kept rows, under its `_rows_lock`, and counters).
    """

    def __init__(
        self, engine: Any, capture: Capture, request: Callable, in_place: bool, backend: Any
    ):
        self.engine, self.capture, self._request = engine, capture, request
        self.in_place = in_place
        self.backend = backend
        self.idle_s = 1.0
        self.jobs: "queue.SimpleQueue[_Job]" = queue.SimpleQueue()
        self.live: dict[Key, str] = {}
        self.context: dict[str, Key] = {}  # request id -> the key its next row answers
        self.continued = 0  # queries answered by continuing a live request
        self.started = 0  # requests started
        self._job: _Job | None = None
        self._next: _Job | None = None
        self._hold_seconds = 0.0
        self._was_held = False
        capture.hold = self._held
        self._thread = threading.Thread(target=self._main, name="genlm-vllm-engine", daemon=True)
        self._thread.start()

    # Submitting (any thread) ------------------------------------------------

    def submit(self, kind: str, wanted: list | None = None, fn: Callable | None = None) -> Future:
        future: Future = Future()
        if not self._thread.is_alive():
            future.set_exception(RuntimeError("the vLLM engine thread has stopped"))
            return future
        self.jobs.put(_Job(kind, future, list(wanted or []), fn))
        return future

    def stop(self) -> None:
        """End live requests and the thread."""
        if self._thread.is_alive():
            self.submit("call", fn=_Stop).result()
            self._thread.join()

    # The engine thread -----------------------------------------------------------

    def _main(self) -> None:
        # torch gives a new thread its intra-op thread count (the process's, e.g. a
        # user's `torch.set_num_threads(1)`) at the thread's first parallel call; before
        # it, OpenMP reports its own default (the cores). vLLM's CPU attention sizes its
        # schedule by the count it reads first and checks it in the kernel, after torch's
        # ops have set it: a mismatch aborts the step. Asking torch first makes both one.
        torch.get_num_threads()
        job: _Job | None = None
        while True:
            if job is None:
                job = self.jobs.get()
                if not job.future.set_running_or_notify_cancel():
                    job = None
                    continue
            if job.kind == "call":
                self._end(list(self.context))
                try:
                    job.future.set_result(job.fn())
                except _Stopping:
                    job.future.set_result(None)
                    return
                except BaseException as exc:
                    job.future.set_exception(exc)
                job = None
                continue
            job = self._serve(job)

    def _plan(self, job: _Job, held: bool) -> None:
        """Split the job's queries into kept rows, continuations and new requests."""
        job.planned = True
        backend = self.backend
        with backend._rows_lock:
            kept = backend._rows
            for item in dict.fromkeys(job.wanted):
                row = kept.get(item)
                if row is None:
                    rid = (
                        self.live.get((parent_key(item[0]), item[1]))
                        if held and len(item[0]) > 1
                        else None
                    )
                    if rid is not None and rid not in job.extend:
                        job.extend[rid] = (item, item[0][-1])
                    else:
                        job.new.append(item)
                else:
                    kept.move_to_end(item)
                    job.rows[item] = row
                    backend.row_hits += 1

    def _serve(self, job: _Job) -> _Job | None:
        """Serve a rows job (planned already if it arrived during a hold); the next
        job if one arrived during a hold of this job's last step."""
        if not job.planned:
            self._plan(job, held=False)
        if not job.extend and not job.new:
            job.future.set_result(job.rows)
            return None
        waits: dict[str, Key] = {}
        try:
            self._end([rid for rid in self.context if rid not in job.extend])
            for rid, (item, _) in job.extend.items():
                waits[rid] = self.context[rid] = item
                self.continued += 1
            self.live.clear()
            for item in job.new:
                rid = f"genlm-{next(_ids)}"
                self.started += 1
                room = self.backend.max_model_len - len(item[0])
                self._timed(self._request, rid, item, room if self.in_place else 1)
                waits[rid] = self.context[rid] = item
                if self.in_place and room > 1:
                    self.capture.holdable.add(rid)
            return self._step_until_done(job, waits)
        except BaseException as exc:
            self._fail([job, self._next], exc)
            self._next, self._was_held = None, False
            return None

    def _step_until_done(self, job: _Job, waits: dict[str, Key]) -> _Job | None:
        capture = self.capture
        capture.pending = set(waits)
        self._job, self._waits = job, waits
        try:
            while True:
                self.backend.steps += 1
                self._hold_seconds = 0.0
                outputs = self._timed(self.engine.step)
                self.backend.engine_seconds -= self._hold_seconds
                done = [rid for rid in waits if rid in capture.sink]
                for rid in done:
                    self._keep(waits.pop(rid), capture.sink.pop(rid))
                for out in outputs:
                    if out.finished:
                        self._forget(out.request_id)
                if self._was_held:  # the job was answered inside the step
                    nxt, self._next, self._was_held = self._next, None, False
                    if nxt is None or nxt.kind == "call":
                        self._end(list(self.context))  # idle, or a call: the live requests end
                    return nxt
                # rows captured without a hold: the tokens sampled are not ours
                self._end([rid for rid in done if rid in self.context])
                if not waits:
                    job.future.set_result(job.rows)
                    return None
                if not outputs and not self.engine.has_unfinished_requests():
                    raise RuntimeError(f"the vLLM engine dropped {len(waits)} requests")
        finally:
            self._job = None

    def _held(self, rids: list[str]) -> dict[str, int]:
        """Inside `apply`: answer the current job, make its requests live, and wait for
        the next job; the tokens of the live requests it continues."""
        start = time.perf_counter()
        job, waits = self._job, self._waits
        self._was_held = True
        try:
            for rid in list(waits):
                item = waits.pop(rid)
                self._keep(item, self.capture.sink.pop(rid))
                if rid in self.capture.holdable and rid in rids:
                    self.live[item] = rid
            job.future.set_result(job.rows)
        except BaseException as exc:  # never raise inside vLLM's step
            if not job.future.done():
                job.future.set_exception(exc)
            self.live.clear()
            return {}
        forced: dict[str, int] = {}
        while True:
            try:
                nxt = self.jobs.get(timeout=self.idle_s)
            except queue.Empty:
                break  # idle: the live requests end
            if not nxt.future.set_running_or_notify_cancel():
                continue
            if nxt.kind == "rows":
                try:
                    self._plan(nxt, held=True)
                except BaseException as exc:
                    nxt.future.set_exception(exc)
                    continue
                if not nxt.extend and not nxt.new:
                    nxt.future.set_result(nxt.rows)
                    continue
                forced = {rid: tok for rid, (_, tok) in nxt.extend.items()}
            self._next = nxt
            break
        self._hold_seconds += time.perf_counter() - start
        return forced

    # Helpers (engine thread) -------------------------------------------------------

    def _keep(self, item: Key, row: torch.Tensor) -> None:
        """Answer `item` with a copy of `row` (a view of the step's batch) and keep it."""
        backend = self.backend
        row = row.clone()
        with backend._rows_lock:
            rows = backend._rows
            self._job.rows[item] = rows[item] = row
            while len(rows) > backend.row_cache_rows:
                rows.popitem(last=False)

    def _forget(self, rid: str) -> None:
        key = self.context.pop(rid, None)
        if key is not None and self.live.get(key) == rid:
            del self.live[key]
        self.capture.holdable.discard(rid)
        self.capture.sink.pop(rid, None)
        self.capture.pending.discard(rid)

    def _end(self, rids: list[str]) -> None:
        """Abort our requests `rids` (no step is in flight)."""
        rids = [rid for rid in rids if rid in self.context]
        if rids:
            self.engine.abort_request(rids)
            for rid in rids:
                self._forget(rid)

    def _fail(self, jobs: list, exc: BaseException) -> None:
        try:
            self._end(list(self.context))
        finally:
            self.live.clear()
            self.capture.pending.clear()
            for job in jobs:
                if job is not None and not job.future.done():
                    job.future.set_exception(exc)

    def _timed(self, fn: Callable, *args):
        start = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.backend.engine_seconds += time.perf_counter() - start


class _Stopping(Exception):
    """Raised by the stop job to end the engine thread."""


def _Stop() -> None:
    raise _Stopping


__all__ = ["Driver"]
