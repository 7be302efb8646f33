"""One SMC step of a population: batched sampler calls, per-slot random streams, retries.

Particles that share a unit sampler and critic are stepped together: one
`batch_sample` call (and one `batch_logw_eos`, one `critic.batch_score`) serves
them all. Each slot draws from its own Philox stream, a function of the run's
seed, the step and the slot, so a seeded run is reproducible whatever runs beside
it. Contexts change only when the whole step succeeded, so a step whose batch was
abandoned by another run's cancelled task is simply run again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import numpy as np

from genlm.control.draw import using_rng
from genlm.control.potential.autobatch import AutoBatchedPotential
from genlm.control.util import flatten_units
from genlm.control.weights import NEG_INF, fold_nan
from genlm.control.window import BatchAbandoned, gather_or_cancel

if TYPE_CHECKING:  # pragma: no cover
    from genlm.control.sampler.smc import SequenceModel

# A step whose batch was abandoned by another run's cancelled task is retried; the
# bound only guards against a livelock.
_MAX_ATTEMPTS = 16


class SlotStreams:
    """The generators of a run's particle slots, one independent stream per (step, slot).

    Philox is counter based: under the run's key, the stream of slot `s` at step `t`
    starts at counter `(t, s)` (2^128 blocks from any other), so it is a function of
    the run's seed, the step and the slot only. One `Generator` per slot is made once
    and re-pointed at each step, which costs no seed hashing.
    """

    def __init__(self, root: np.random.SeedSequence):
        words = np.random.SeedSequence(root.entropy, spawn_key=(*root.spawn_key, 1)).generate_state(2, np.uint64)
        self._key = words
        self._gens: dict[int, np.random.Generator] = {}

    def at(self, step: int, slots: Any) -> list[np.random.Generator]:
        """The generators of `slots` for step `step`, each at the start of its stream."""
        out = []
        for slot in slots:
            slot = int(slot)
            gen = self._gens.get(slot)
            if gen is None:
                gen = self._gens[slot] = np.random.Generator(np.random.Philox(key=self._key))
            gen.bit_generator.state = {
                "bit_generator": "Philox",
                "state": {"counter": np.array([0, 0, slot, step], dtype=np.uint64), "key": self._key},
                "buffer": np.zeros(4, dtype=np.uint64),
                "buffer_pos": 4,
                "has_uint32": 0,
                "uinteger": 0,
            }
            out.append(gen)
        return out


async def _retrying(call: Callable[[], Any]) -> Any:
    """`await call()`, run again when its batch was abandoned by another run's task."""
    for attempt in range(_MAX_ATTEMPTS):
        try:
            return await call()
        except BatchAbandoned:
            if attempt + 1 == _MAX_ATTEMPTS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


class _Outcome(NamedTuple):
    """What one step makes of a particle, committed only when the whole step succeeded."""

    context: list
    twist: float
    finished: bool


async def _sample_all(sampler: Any, contexts: list[list], rngs: list) -> list:
    batch = getattr(sampler, "batch_sample", None)
    if batch is not None:
        return list(await batch(contexts, rngs))

    async def one(context: list, rng: np.random.Generator) -> Any:
        with using_rng(rng):
            return await sampler.sample(context)

    return await gather_or_cancel(*(one(c, r) for c, r in zip(contexts, rngs)))


async def _logw_eos_all(sampler: Any, contexts: list[list]) -> list:
    batch = getattr(sampler, "batch_logw_eos", None)
    if batch is not None:
        return list(await batch(contexts))
    return await gather_or_cancel(*(sampler.logw_eos(c) for c in contexts))


async def _step_group(particles: list[SequenceModel], rngs: list) -> tuple[np.ndarray, list[_Outcome]]:
    """One step of particles that share their unit sampler and critic."""
    first = particles[0]
    sampler, critic = first.unit_sampler, first.critic
    n = len(particles)
    forced = [i for i, p in enumerate(particles) if len(p.context) >= p.max_tokens - 1]
    drawn = [i for i, p in enumerate(particles) if len(p.context) < p.max_tokens - 1]
    calls = []
    if drawn:
        calls.append(_sample_all(sampler, [particles[i].context for i in drawn], [rngs[i] for i in drawn]))
    if forced:
        calls.append(_logw_eos_all(sampler, [particles[i].context for i in forced]))
    results = await calls[0] if len(calls) == 1 else await gather_or_cancel(*calls)
    if len(calls) == 1:
        results = [results]
    units: list[Any] = [None] * n
    logws = np.zeros(n, dtype=np.float64)
    if drawn:
        for i, (unit, logw, _) in zip(drawn, results[0]):
            units[i], logws[i] = unit, float(logw)
    if forced:
        for i, logw in zip(forced, results[-1]):
            units[i], logws[i] = particles[i].eos, float(logw)
    news = [[*p.context, u] for p, u in zip(particles, units)]
    ends = [p._ends(u) for p, u in zip(particles, units)]
    stopped = [
        i
        for i, p in enumerate(particles)
        if not ends[i] and p.terminate_when is not None and p.terminate_when(news[i])
    ]
    if stopped:
        for i, logw in zip(stopped, await _logw_eos_all(sampler, [news[i] for i in stopped])):
            logws[i] += float(logw)
            news[i].append(particles[i].eos)
            ends[i] = True
    twists = [p.twist for p in particles]
    if critic is not None:
        scored = [i for i in range(n) if logws[i] > NEG_INF]
        if scored:
            contexts = [flatten_units(news[i]) for i in scored]
            if isinstance(critic, AutoBatchedPotential):
                values = await critic.batch_score(contexts)
            else:  # SMC(autobatch=False): one call per particle
                values = await gather_or_cancel(*(critic.score(c) for c in contexts))
            for i, value in zip(scored, values):
                twists[i] = float(value)
                logws[i] += twists[i] - particles[i].twist
    return logws, [_Outcome(news[i], twists[i], ends[i]) for i in range(n)]


async def step_many(particles: list[SequenceModel], rngs: list) -> np.ndarray:
    """Step `particles` together and return their log weight increments.

    Particles that share a unit sampler (and critic) make one `batch_sample` call
    (and one `batch_logw_eos`, one `critic.batch_score`) instead of one call each;
    particle `i` draws with `rngs[i]`. A unit sampler without `batch_sample` is
    called once per particle, concurrently. Contexts change only after every call
    succeeded, so a step that fails can be run again.
    """
    groups: dict[tuple[int, int], list[int]] = {}
    for i, p in enumerate(particles):
        groups.setdefault((id(p.unit_sampler), id(p.critic)), []).append(i)
    members = list(groups.values())

    async def run(m: list[int]) -> tuple[np.ndarray, list[_Outcome]]:
        return await _step_group([particles[i] for i in m], [rngs[i] for i in m])

    done = [await run(members[0])] if len(members) == 1 else await gather_or_cancel(*(run(m) for m in members))
    incs = np.zeros(len(particles), dtype=np.float64)
    for m, (logws, outcomes) in zip(members, done):
        incs[m] = logws
        for i, o in zip(m, outcomes):
            p = particles[i]
            p.context, p.twist, p.finished = o.context, o.twist, o.finished
    return incs


async def step_all(
    particles: list[SequenceModel],
    root: np.random.SeedSequence,
    step: int,
    slots: np.ndarray,
    streams: SlotStreams | None = None,
) -> np.ndarray:
    """Step `particles` (see `step_many`); their log weight increments, NaN folded to `-inf`.

    Slot `s` draws from a generator that is a function of the run's seed, the step
    and `s` only, so a seeded run draws the same tokens whatever runs beside it. A
    step whose batch was abandoned by another run's cancelled task is run again.

    Raises:
        ValueError: if an increment is `+inf`.
    """
    streams = SlotStreams(root) if streams is None else streams

    async def attempt() -> np.ndarray:
        return await step_many(particles, streams.at(step, slots))

    return fold_nan(await _retrying(attempt))


__all__ = ["SlotStreams", "step_many", "step_all"]
