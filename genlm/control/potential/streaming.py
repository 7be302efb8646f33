"""Potentials written as an async program over a stream of chunks (as in 0.4.1).

Subclass `AsyncStreamingPotential` and write `calculate_score_from_stream(stream)`: an
async function that calls `await stream.more()` for the next chunk of the context
(a list of tokens) and gets `StopAsyncIteration` when the context has ended. Each
particle runs its own copy of the program in a background task, fed incrementally:

    prefix(ctx)   = 0 while the program waits for more, else its return value
    complete(ctx) = the program's return value once the stream has ended

A return value of None counts as 0.0 (accept); an exception as -inf (reject, the
exception kept in the state's `diagnostics["error"]`). A program may return early (a
parser that has already failed returns -inf): later chunks are then ignored.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from enum import Enum, auto
from typing import Any, Sequence

from genlm.control.potential.stateful import ParticleState, StatefulPotential
from genlm.control.weights import NEG_INF


class _Marker:
    """A named sentinel sent to a program's task in place of a chunk."""

    def __init__(self, name: str):
        self._name = name

    def __repr__(self) -> str:
        return self._name


#: The first message a program's task receives: it starts the program.
PING_TOKEN = _Marker("PING_TOKEN")
#: The message that ends a program's stream (`more()` raises `StopAsyncIteration`).
SHUTDOWN_TOKEN = _Marker("SHUTDOWN_TOKEN")

#: Strong references to the programs' running tasks: asyncio keeps only weak ones,
#: and a task collected before it ends is lost. Each task leaves the set when done.
KEEP_ALIVE_SET: set[asyncio.Task] = set()


class AsyncSource(ABC):
    """The stream a program reads: `await more()` is the next chunk of the context."""

    @abstractmethod
    async def more(self) -> Any:
        """The next chunk; raises `StopAsyncIteration` when the context has ended."""


class _Reply(Enum):
    WAITING = auto()  # the program asks for more
    RETURNED = auto()  # the program returned a score
    RAISED = auto()  # the program raised


class _Mailbox(AsyncSource):
    """The two queues between a state and its program: chunks in, replies out."""

    def __init__(self) -> None:
        self.chunks: asyncio.Queue = asyncio.Queue()
        self.replies: asyncio.Queue = asyncio.Queue()

    async def more(self) -> Any:
        await self.replies.put((_Reply.WAITING, None))
        chunk = await self.chunks.get()
        if chunk is SHUTDOWN_TOKEN:
            raise StopAsyncIteration()
        return chunk

    async def run(self, program: Any) -> None:
        """Wait for `PING_TOKEN`, run `program(self)`, and reply with its outcome."""
        first = await self.chunks.get()
        if first is not PING_TOKEN:
            raise RuntimeError(f"a streaming program must be started by PING_TOKEN, got {first!r}")
        try:
            score = await program(self)
        except Exception as error:  # the program's failure is its verdict: weight zero
            await self.replies.put((_Reply.RAISED, error))
        else:
            await self.replies.put((_Reply.RETURNED, score))


class AsyncStreamingState(ParticleState):
    """One particle's running program; its score is 0 until the program returns."""

    def __init__(self, owner: "AsyncStreamingPotential"):
        super().__init__(owner)
        self._mailbox: _Mailbox | None = None
        self._task: asyncio.Task | None = None
        self._done = False
        self._score = 0.0
        self.diagnostics: dict[str, Any] = {}

    @property
    def current_score(self) -> float:
        return self._score

    async def _send(self, message: Any) -> None:
        """Hand `message` to the program and wait until it asks for more or ends."""
        if self._mailbox is None:
            self._mailbox = _Mailbox()
            self._task = asyncio.create_task(
                self._mailbox.run(self.owner.calculate_score_from_stream)
            )
            KEEP_ALIVE_SET.add(self._task)
            self._task.add_done_callback(KEEP_ALIVE_SET.discard)
            await self._send(PING_TOKEN)
        if self._done:
            return
        await self._mailbox.chunks.put(message)
        kind, payload = await self._mailbox.replies.get()
        if kind is _Reply.WAITING:
            return
        self._done = True
        if kind is _Reply.RETURNED:
            self._score = 0.0 if payload is None else float(payload)
        else:
            self.diagnostics["error"] = payload
            self._score = NEG_INF
        await self._task

    async def impl_update_context(self, incremental_context: Sequence[Any]) -> None:
        chunk = list(incremental_context)
        ends = bool(chunk) and chunk[-1] is self.owner.eos
        if ends:
            chunk.pop()
            self.context.pop()
        await self._send(chunk)
        if ends:
            await self.finish()

    async def impl_finish(self) -> None:
        await self._send(SHUTDOWN_TOKEN)
        if not self._done:  # the program asked for more after its stream ended
            self._done = True
            self._task.cancel()
            self.diagnostics["error"] = RuntimeError(
                "the streaming program called more() after StopAsyncIteration"
            )
            self._score = NEG_INF

    async def shutdown(self) -> None:
        """End the program's stream now (what `finish` does)."""
        await self.finish()


class AsyncStreamingPotential(StatefulPotential, ABC):
    """A potential given by `calculate_score_from_stream`, run once per particle.

    Args:
        vocabulary: the tokens.
        token_type: optional; inferred from `vocabulary`.
        eos: the end marker (`EOS` by default).
    """

    def __init__(self, vocabulary: Sequence[Any], token_type: Any = None, eos: Any = None):
        super().__init__(
            vocabulary=vocabulary, token_type=token_type, eos=eos, state_class=AsyncStreamingState
        )

    @abstractmethod
    async def calculate_score_from_stream(self, stream: AsyncSource) -> float | None:
        """The log weight of the context read from `stream` (None: 0.0)."""
