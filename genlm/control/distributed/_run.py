"""One `Pool.map` call: the queue of problems, the lanes that feed the actors, and the
bookkeeping that makes each problem appear exactly once in the results.

Each actor slot has `concurrency` lanes; a lane takes the next problem from the shared
queue, sends it to its slot's current actor and awaits the answer. When the actor dies,
every lane on it puts its problem back at the front of the queue (charging it one
attempt) and waits for the slot's replacement, so nothing is lost; a problem's result
is emitted once, by the lane whose call returned.

A resubmitted problem runs alone on its actor (the slot takes no other problem until it
returns): the problem that killed the actor then kills only itself again, and those it
took down with it finish, instead of being charged for its deaths.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Callable

from genlm.control.distributed._records import Result


class Slot:
    """One position in the pool: its current actor and, while one is starting, the
    task that starts its replacement."""

    def __init__(self, position: int, start: Callable[[int], Any], kill: Callable[[Any], None]):
        self.position = position
        self._start = start  # async (position) -> (handle, actor id)
        self._kill = kill
        self.handle: Any = None
        self.actor_id = -1
        self._starting: asyncio.Task | None = None

    async def current(self) -> tuple[Any, int]:
        """The live actor's handle and id (waiting for a replacement in progress)."""
        await self._wait_for_start()
        return self.handle, self.actor_id

    async def replace(self, dead_id: int) -> None:
        """Starts a new actor in place of `dead_id` (once, however many lanes saw it
        die) and waits until it has run `setup()`."""
        if self.actor_id == dead_id and self._starting is None:
            self._starting = asyncio.ensure_future(self._restart())
        await self._wait_for_start()

    async def _wait_for_start(self) -> None:
        starting = self._starting
        if starting is None:
            return
        try:
            await asyncio.shield(starting)
        except asyncio.CancelledError:
            # The start was cancelled by close(), not this waiter: an error, so that
            # the run ends instead of waiting for a result that will never come.
            if starting.cancelled() and not asyncio.current_task().cancelling():
                raise RuntimeError("this Pool was closed; make a new one") from None
            raise

    async def _restart(self) -> None:
        # An actor that is only unreachable (`ActorUnavailableError`) may still hold
        # its GPUs; kill it so that its replacement can be placed.
        self._kill(self.handle)
        try:
            self.handle, self.actor_id = await self._start(self.position)
        finally:
            self._starting = None

    def stop_starting(self) -> None:
        if self._starting is not None:
            self._starting.cancel()


class Run:
    """The state of one `map`: what is left, what is in flight, what came back."""

    def __init__(self, ray: Any, fn_box: list, problems: list, seeds: list[int], max_retries: int):
        self.ray = ray
        self.fn_box = fn_box
        self.problems = problems
        self.seeds = seeds
        self.max_retries = max_retries
        self.todo: deque[int] = deque(range(len(problems)))
        self.attempts = [0] * len(problems)
        self.inflight: dict[int, Any] = {}
        self.results: asyncio.Queue = asyncio.Queue()
        self.busy: dict[int, int] = {}  # slot position -> calls in flight
        self.reserved: set[int] = set()  # slots held for a resubmitted problem
        self.changed = asyncio.Condition()

    def emit(self, index: int, **fields: Any) -> None:
        self.results.put_nowait(
            Result(index=index, seed=self.seeds[index], attempts=self.attempts[index], **fields)
        )

    async def lane(self, slot: Slot) -> None:
        """Serves problems on `slot` until the queue is empty; a failure of the pool
        itself (a replacement whose setup fails) reaches the consumer as an exception."""
        try:
            while (taken := await self._take(slot.position)) is not None:
                index, alone = taken
                try:
                    handle, actor_id = await slot.current()
                    await self._serve(slot, handle, actor_id, index)
                finally:
                    await self._leave(slot.position, alone)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.results.put_nowait(exc)

    async def _take(self, position: int) -> tuple[int, bool] | None:
        """The next problem for the slot at `position` and whether it runs alone there
        (a resubmitted one), or None when none is left. Waits while the slot is held
        for a resubmitted problem; taking one holds the slot and waits until the calls
        already in flight there have returned."""
        async with self.changed:
            await self.changed.wait_for(lambda: position not in self.reserved)
            if not self.todo:
                return None
            index = self.todo.popleft()
            alone = self.attempts[index] > 0
            if alone:
                self.reserved.add(position)
                await self.changed.wait_for(lambda: self.busy.get(position, 0) == 0)
            self.busy[position] = self.busy.get(position, 0) + 1
            return index, alone

    async def _leave(self, position: int, alone: bool) -> None:
        async with self.changed:
            self.busy[position] -= 1
            if alone:
                self.reserved.discard(position)
            self.changed.notify_all()

    async def _serve(self, slot: Slot, handle: Any, actor_id: int, index: int) -> None:
        ray = self.ray
        try:
            ref = handle.solve.remote(self.fn_box, self.problems[index], self.seeds[index])
        except Exception as exc:  # the problem cannot be serialized
            self.emit(index, error=f"problem {index} could not be sent to an actor: {exc}",
                      error_type=type(exc).__name__)
            return
        self.attempts[index] += 1
        self.inflight[index] = ref
        try:
            out = await ref
        except ray.exceptions.RayActorError as exc:
            self._requeue(index, actor_id, exc)
            await slot.replace(actor_id)
            return
        except ray.exceptions.RayTaskError as exc:  # e.g. a value Ray cannot serialize
            self.emit(index, error=str(exc), error_type=type(exc).__name__, actor=actor_id)
            return
        finally:
            self.inflight.pop(index, None)
        if out[0]:
            self.emit(index, value=out[1], actor=actor_id)
        else:
            self.emit(index, error=out[2], error_type=out[1], actor=actor_id)

    def _requeue(self, index: int, actor_id: int, exc: BaseException) -> None:
        if self.attempts[index] > self.max_retries:
            self.emit(
                index,
                error=f"actor {actor_id} died while solving problem {index}, and so did the "
                f"actors of its {self.attempts[index] - 1} earlier attempts "
                f"(max_retries={self.max_retries}): {exc}",
                error_type="ActorDied",
                actor=actor_id,
            )
        else:
            self.todo.appendleft(index)

    def cancel_inflight(self) -> None:
        """Asks the actors to cancel every call still running (their asyncio tasks get
        `CancelledError`)."""
        for ref in list(self.inflight.values()):
            try:
                self.ray.cancel(ref)
            except Exception:  # the actor is gone already
                pass
        self.inflight.clear()
