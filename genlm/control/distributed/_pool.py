"""`Pool`: a set of Ray actors, each holding what `setup()` built, that solves many
problems with the caller's async `solve(state, problem, seed)`."""

from __future__ import annotations

import asyncio
import math
import sys
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Sequence

from genlm.control._args import is_int, is_real, positive_int, reject_bool
from genlm.control.distributed._actor import (
    Server,
    check_picklable,
    describe,
    is_async_function,
    require_ray,
)
from genlm.control.distributed._records import Result, SetupFailed, check_seed, resolve_seeds
from genlm.control.distributed._run import Run, Slot

Solve = Callable[[Any, Any, int], Awaitable[Any]]


class Pool:
    """Ray actors that each load a model once and solve problems concurrently.

    Args:
        setup: a picklable function run once in each actor (and again in a
            replacement); what it returns (or, for a coroutine, resolves to) is the
            `state` passed to `solve`: the model, potentials, samplers.
        actors: how many actors; default as many as the cluster's GPUs (or CPUs, when
            `gpus_per_actor` is 0) allow.
        gpus_per_actor: GPUs reserved by each actor (Ray's `num_gpus`): 1 for a replica
            per GPU, k for a model that is tensor-parallel over k GPUs, a fraction
            below 1 to share a GPU.
        cpus_per_actor: CPUs reserved by each actor (Ray's `num_cpus`; Ray sets each
            actor's `OMP_NUM_THREADS` to it).
        concurrency: problems in flight on one actor at a time; they run under one
            event loop, so their LM calls meet in the same batches.
        max_retries: how many times a problem is resubmitted after its actor died
            before it is reported as failed (`error_type="ActorDied"`).
        address: the Ray cluster to connect to (`"auto"`, `"ray://host:10001"`, ...)
            when this process has not called `ray.init` yet; None starts a local Ray.
        env_vars: environment variables set in every actor (e.g. `HF_HUB_OFFLINE`).

    Raises:
        ImportError: Ray is not installed.
        TypeError: `setup` not callable or not picklable; a bool where a number goes.
        ValueError: a count or size out of range.
    """

    def __init__(
        self,
        setup: Callable[[], Any],
        *,
        actors: int | None = None,
        gpus_per_actor: float = 0,
        cpus_per_actor: float = 1,
        concurrency: int = 8,
        max_retries: int = 2,
        address: str | None = None,
        env_vars: dict[str, str] | None = None,
    ):
        if not callable(setup):
            raise TypeError(f"setup must be a callable that builds the actor's state, got {type(setup).__name__}")
        self.actors = None if actors is None else positive_int("actors", actors)
        self.gpus_per_actor = _resource("gpus_per_actor", gpus_per_actor)
        self.cpus_per_actor = _resource("cpus_per_actor", cpus_per_actor)
        self.concurrency = positive_int("concurrency", concurrency)
        reject_bool("max_retries", max_retries)
        if not is_int(max_retries) or max_retries < 0:
            raise ValueError(f"max_retries must be a non-negative integer, got {max_retries!r}")
        self.max_retries = int(max_retries)
        if address is not None and not isinstance(address, str):
            raise TypeError(f"address must be a str or None, got {type(address).__name__}")
        self.address = address
        self.env_vars = _env_vars(env_vars)
        check_picklable("setup", setup)
        self._setup = setup
        self._ray: Any = None
        self._slots: list[Slot] = []
        self._live: set = set()  # every actor handle started, for close()
        self._starting: asyncio.Future | None = None
        self._started_actors = 0
        self._closed = False

    async def start(self) -> None:
        """Connects to Ray, checks the cluster has the resources asked for, and starts
        the actors (each runs `setup()`); `map` calls it when needed.

        Raises:
            ValueError: more GPUs or CPUs asked than the cluster has.
            SetupFailed: `setup()` raised in an actor (its traceback is in the message).
        """
        self._check_open()
        if self._slots:
            return
        if self._starting is None or self._starting.done():
            self._starting = asyncio.ensure_future(self._start())
        # Concurrent callers wait for the same start; one that is cancelled leaves it
        # running (a failed start kills its actors and closes the pool).
        await asyncio.shield(self._starting)

    async def _start(self) -> None:
        ray = require_ray()
        if not ray.is_initialized():
            ray.init(address=self.address)
        self.actors = _fit(ray.cluster_resources(), self.actors, self.gpus_per_actor, self.cpus_per_actor)
        options = {
            "num_cpus": self.cpus_per_actor,
            "num_gpus": self.gpus_per_actor,
            "max_concurrency": self.concurrency + 1,
            "max_restarts": 0,
        }
        if self.env_vars:
            options["runtime_env"] = {"env_vars": self.env_vars}
        self._ray, self._remote = ray, ray.remote(Server).options(**options)
        slots = [Slot(i, self._start_actor, self._kill) for i in range(self.actors)]
        try:
            started = await asyncio.gather(*(self._start_actor(s.position) for s in slots))
        except BaseException:
            self.close()
            raise
        for slot, (handle, actor_id) in zip(slots, started):
            slot.handle, slot.actor_id = handle, actor_id
        self._slots = slots

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this Pool was closed; make a new one")

    def _kill(self, handle: Any) -> None:
        self._live.discard(handle)
        if handle is not None:
            try:
                self._ray.kill(handle, no_restart=True)
            except Exception:  # already gone
                pass

    async def _start_actor(self, position: int) -> tuple[Any, int]:
        self._check_open()  # no replacement for an actor that close() killed
        actor_id = self._started_actors
        self._started_actors += 1
        handle = self._remote.remote(self._setup)
        self._live.add(handle)
        try:
            await handle.start.remote()
        except asyncio.CancelledError:
            self._kill(handle)
            raise
        except Exception as exc:
            self._kill(handle)
            raise SetupFailed(
                f"setup function {describe(self._setup)} failed in Ray actor {actor_id} "
                f"(slot {position}):\n{exc}"
            ) from None
        return handle, actor_id

    async def map(
        self,
        solve: Solve,
        problems: Iterable[Any],
        *,
        seeds: Sequence[int] | None = None,
        base_seed: int = 0,
        ordered: bool = True,
        progress: bool = True,
    ) -> AsyncIterator[Result]:
        """Solves every problem, yielding one `Result` per problem.

        `solve(state, problem, seed)` is awaited in an actor, where `state` is what that
        actor's `setup()` returned. A problem that raises becomes a `Result` with its
        traceback; the others go on. A problem whose actor dies is resubmitted to a
        replacement (up to `max_retries` times) and still yields once.

        Args:
            solve: a picklable `async def` function.
            problems: anything picklable, one per item.
            seeds: one non-negative int per problem; default `problem_seeds(n, base_seed)`,
                so a problem's seed is the same whichever actor serves it.
            base_seed: the root of the default seeds.
            ordered: yield in submission order (buffering early finishers); False
                yields as problems complete.
            progress: show a progress bar on stderr (when it is a terminal).

        Leaving the loop early, or cancelling the task that iterates, cancels the calls
        in flight; the actors stay for the next `map` until `close()`.
        """
        if not is_async_function(solve):
            raise TypeError(f"solve must be an async function (async def), got {describe(solve)}")
        check_picklable("solve", solve)
        check_seed("base_seed", base_seed)
        problems = list(problems)
        seeds = resolve_seeds(len(problems), seeds, base_seed)
        await self.start()
        run = Run(self._ray, [self._ray.put(solve)], problems, seeds, self.max_retries)
        lanes = [  # round-robin over the actors, so a short run is spread over all of them
            asyncio.ensure_future(run.lane(slot)) for _ in range(self.concurrency) for slot in self._slots
        ]
        try:
            with _progress(len(problems), progress) as bar:
                async for result in _collect(run, len(problems), ordered):
                    bar.update(1)
                    yield result
        finally:
            for lane in lanes:
                lane.cancel()
            run.cancel_inflight()  # a replacement being started stays, for the next map
            await asyncio.gather(*lanes, return_exceptions=True)

    async def gather(self, solve: Solve, problems: Iterable[Any], **kwargs: Any) -> list[Result]:
        """`[r async for r in self.map(solve, problems, **kwargs)]`, in submission order."""
        kwargs["ordered"] = True
        return [r async for r in self.map(solve, problems, **kwargs)]

    def close(self) -> None:
        """Kills the actors (idempotent); the pool cannot be used after."""
        self._closed = True
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
        for slot in self._slots:
            slot.stop_starting()
        for handle in list(self._live):
            self._kill(handle)
        self._slots = []

    async def __aenter__(self) -> "Pool":
        await self.start()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Pool({describe(self._setup)}, actors={self.actors}, gpus_per_actor={self.gpus_per_actor}, "
            f"concurrency={self.concurrency})"
        )


async def _collect(run: Run, n: int, ordered: bool) -> AsyncIterator[Result]:
    """The run's results as they arrive, or in index order; re-raises a pool failure."""
    waiting: dict[int, Result] = {}
    next_index = 0
    for _ in range(n):
        item = await run.results.get()
        if isinstance(item, BaseException):
            raise item
        if not ordered:
            yield item
            continue
        waiting[item.index] = item
        while next_index in waiting:
            yield waiting.pop(next_index)
            next_index += 1


def _progress(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(
        total=total, desc="problems", unit="problem", delay=2.0, leave=False,
        disable=None if enabled else True, file=sys.stderr,
    )  # fmt: skip


def _resource(name: str, value: Any) -> float:
    """A per-actor resource: a number ≥ 0, whole when above 1 (as Ray requires)."""
    reject_bool(name, value)
    if not is_real(value) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if value > 1 and value != int(value):
        raise ValueError(f"{name} above 1 must be a whole number (Ray's rule), got {value!r}")
    return int(value) if value == int(value) else float(value)


def _env_vars(env_vars: Any) -> dict[str, str]:
    if env_vars is None:
        return {}
    if not isinstance(env_vars, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items()
    ):
        raise TypeError("env_vars must be a dict of str to str")
    return dict(env_vars)


def _fit(resources: dict, actors: int | None, gpus: float, cpus: float) -> int:
    """The number of actors, checked against the cluster's total resources (an actor
    asking for more than exists would wait forever).

    Raises:
        ValueError: `actors × per-actor` GPUs or CPUs exceed the cluster's.
    """
    have = {"GPU": resources.get("GPU", 0.0), "CPU": resources.get("CPU", 0.0)}
    need = {"GPU": gpus, "CPU": cpus}
    if actors is None:
        fits = [math.floor(have[k] / need[k] + 1e-9) for k in need if need[k] > 0]
        actors = min(fits) if fits else 1
        if actors < 1:
            kind = "GPU" if gpus > have["GPU"] else "CPU"
            raise ValueError(
                f"one actor asks for {need[kind]:g} {kind}s, but the Ray cluster has {have[kind]:g}"
            )
    for kind in ("GPU", "CPU"):
        if actors * need[kind] > have[kind] + 1e-9:
            raise ValueError(
                f"{actors} actors x {need[kind]:g} {kind}s each = {actors * need[kind]:g} {kind}s asked, "
                f"but the Ray cluster has {have[kind]:g}; lower actors or {kind.lower()}s_per_actor"
            )
    return actors
