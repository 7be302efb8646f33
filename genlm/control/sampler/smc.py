"""The SMC algorithm: particles (`SequenceModel`), a columnar population, and the driver.

A particle is a context that a unit sampler extends one unit per step. Its log
weight after `t` steps is

    logw_t = start + Σ_s logw_s + critic.score(x_{≤t})

where `start = target.prefix([])`, `logw_s` is the sampler's properly weighted
increment and the critic term is the current twist (replaced at every step, so the
twists telescope). When the particle finishes — the sampler draws EOS, the
context reaches `max_tokens - 1` units, or `terminate_when` fires — EOS is
appended (forced with the sampler's `logw_eos` correction when it was not drawn)
and the twist becomes `critic.complete`, so a finished particle is properly
weighted for `target.complete(x) · critic.complete(x)` restricted to the sequences
that can end there.

The driver (`smc_standard`) keeps the population's log weights and done flags in
arrays, steps the live particles concurrently (their potential calls and draws meet
in the batching windows), and resamples when the ESS falls below
`ess_threshold · n`. After resampling every weight is set to the mean weight, so
`log_ml = log_mean_exp(final log weights)` is the standard unbiased estimate of
the normalizing constant (Del Moral 2004).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np

from genlm.control.constant import EOS
from genlm.control.draw import current_rng, using_rng
from genlm.control.potential.autobatch import AutoBatchedPotential
from genlm.control.sampler.record import Recorder, RunRecord
from genlm.control.sampler.resampling import (
    ess,
    get_resampler,
    log_mean_exp,
    normalized_weights,
)
from genlm.control.util import flatten_units
from genlm.control.weights import NEG_INF, fold_nan
from genlm.control.window import BatchAbandoned, gather_or_cancel

TerminateWhen = Callable[[list], bool]

# A step whose batch was abandoned by another run's cancelled task is retried; the
# bound only guards against a livelock.
_MAX_ATTEMPTS = 16


class SequenceModel:
    """One particle: a context grown by `unit_sampler`, twisted by `critic`.

    Args:
        unit_sampler: proposes the next unit with a properly weighted log weight.
        critic: optional potential over the sampler's tokens; its `score` of the
            current context is the twist.
        max_tokens: bound on the context length, EOS included.
        terminate_when: optional predicate on the context; when it holds, the
            particle finishes (EOS is forced with the `logw_eos` correction).
    """

    __slots__ = ("unit_sampler", "critic", "max_tokens", "terminate_when", "eos", "context", "twist", "finished")

    def __init__(
        self,
        unit_sampler: Any,
        critic: Any = None,
        max_tokens: float = math.inf,
        terminate_when: TerminateWhen | None = None,
    ):
        self.unit_sampler = unit_sampler
        self.critic = critic
        self.max_tokens = max_tokens
        self.terminate_when = terminate_when
        self.eos = getattr(unit_sampler.target, "eos", EOS)
        self.context: list = []
        self.twist = 0.0
        self.finished = False

    def clone(self) -> "SequenceModel":
        """A copy with its own context list (used for resampled duplicates)."""
        other = object.__new__(SequenceModel)
        for name in SequenceModel.__slots__:
            setattr(other, name, getattr(self, name))
        other.context = list(self.context)
        return other

    async def start(self) -> float:
        """Log weight of the empty context: `unit_sampler.start_weight()`."""
        return float(await self.unit_sampler.start_weight())

    def _ends(self, unit: Any) -> bool:
        if isinstance(unit, list):
            return bool(unit) and unit[-1] == self.eos
        return unit == self.eos

    async def step(self) -> float:
        """Extend the context by one unit and return the log weight increment.

        The context changes only after every await succeeded, so a step that fails
        can be run again. Draws use `genlm.control.draw.current_rng()`.
        """
        return float((await step_many([self], [current_rng()]))[0])

    def stop(self) -> None:
        """Finish a particle of weight zero, closing its context with EOS."""
        if not self.finished:
            self.finished = True
            if not (self.context and self._ends(self.context[-1])):
                self.context.append(self.eos)

    def __repr__(self) -> str:
        return f"SequenceModel({self.context!r})"


@dataclass
class Population:
    """Particles with their log weights and done flags held as arrays.

    Attributes:
        particles: the particles, in slot order.
        log_weights: `logw_i` of each slot.
        done: whether each slot's particle has finished.
        record: the run record when one was requested.
    """

    particles: list[SequenceModel]
    log_weights: np.ndarray
    done: np.ndarray
    record: RunRecord | None = field(default=None, repr=False)

    @classmethod
    def of(cls, model: SequenceModel, n: int, start: float) -> "Population":
        return cls(
            [model.clone() for _ in range(n)],
            np.full(n, start, dtype=np.float64),
            np.zeros(n, dtype=bool),
        )

    @property
    def contexts(self) -> list[list]:
        return [p.context for p in self.particles]

    @property
    def log_ml(self) -> float:
        """`log_mean_exp(log_weights)`: the estimate of `log Z`."""
        return log_mean_exp(self.log_weights)

    def resample(self, ancestors: np.ndarray) -> None:
        """Replace slot `i` by a copy of slot `ancestors[i]`; every weight becomes the mean."""
        seen: set[int] = set()
        particles = []
        for a in ancestors.tolist():
            p = self.particles[a]
            particles.append(p.clone() if a in seen else p)
            seen.add(a)
        self.particles = particles
        self.done = self.done[ancestors]
        self.log_weights = np.full(len(particles), log_mean_exp(self.log_weights))

    def __iter__(self) -> Iterator[SequenceModel]:
        return iter(self.particles)

    def __len__(self) -> int:
        return len(self.particles)


def should_resample(log_weights: np.ndarray, ess_threshold: float) -> bool:
    """Resample when `ess < ess_threshold · n`; 0 never resamples, 1 always does."""
    if ess_threshold <= 0:
        return False
    if ess_threshold >= 1:
        return True
    return ess(log_weights) < ess_threshold * len(log_weights)


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



def _progress(total: float):
    from tqdm.auto import tqdm

    return tqdm(
        total=None if math.isinf(total) else int(total),
        desc="smc",
        unit="step",
        delay=2.0,
        leave=False,
        disable=None,
        file=sys.stderr,
    )


def _check_args(n_particles: int, ess_threshold: float) -> None:
    if isinstance(n_particles, bool) or not isinstance(n_particles, (int, np.integer)) or n_particles < 1:
        raise ValueError(f"n_particles must be a positive integer, got {n_particles!r}")
    if not isinstance(ess_threshold, (int, float)) or not 0 <= ess_threshold <= 1:
        raise ValueError(f"ess_threshold must be a number in [0, 1], got {ess_threshold!r}")


async def smc_standard(
    model: SequenceModel,
    n_particles: int,
    ess_threshold: float = 0.5,
    json_file: str | None = None,
    *,
    resampling_method: str = "multinomial",
    seed: int | None = None,
    verbosity: int = 0,
) -> Population:
    """Run SMC with `n_particles` copies of `model` until every particle has finished.

    Args:
        model: the initial particle (cloned `n_particles` times).
        n_particles: population size.
        ess_threshold: resample when `ess < ess_threshold · n_particles`.
        json_file: when given, a record of every step is written there after the run.
        resampling_method: one of `resampling.RESAMPLING_METHODS`.
        seed: makes the run reproducible bit for bit (also when run concurrently
            with other seeded runs); fresh entropy when None.
        verbosity: 1 prints the particles after each step.

    Returns:
        The final `Population` (its `record` is set when `json_file` is given).
    """
    _check_args(n_particles, ess_threshold)
    resampler = get_resampler(resampling_method)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
    root = np.random.SeedSequence(seed)
    rng = np.random.default_rng(np.random.SeedSequence(root.entropy, spawn_key=(0,)))
    streams = SlotStreams(root)
    start = float(fold_nan(np.array([await _retrying(model.start)]))[0])
    pop = Population.of(model, n_particles, start)
    if start == NEG_INF:
        for p in pop.particles:
            p.stop()
        pop.done[:] = True
    recorder = Recorder(n_particles, ess_threshold, model.max_tokens, resampling_method, seed) if json_file else None
    step = 0
    with _progress(model.max_tokens) as bar:
        while not pop.done.all():
            live = np.flatnonzero(~pop.done)
            incs = await step_all([pop.particles[i] for i in live], root, step, live, streams)
            pop.log_weights[live] += incs
            for i in live.tolist():
                p = pop.particles[i]
                if pop.log_weights[i] == NEG_INF:
                    p.stop()
                pop.done[i] = p.finished
            ancestors = None
            if not pop.done.all() and should_resample(pop.log_weights, ess_threshold):
                ancestors = resampler(rng, normalized_weights(pop.log_weights), n_particles)
            if verbosity > 0:
                _print_step(step, pop, ancestors)
            if recorder is not None:
                recorder.add(step, pop, ancestors)
            if ancestors is not None:
                pop.resample(ancestors)
            step += 1
            bar.update(1)
    if recorder is not None:
        pop.record = recorder.finish(pop)
        pop.record.to_json(json_file)
    return pop


def _print_step(step: int, pop: Population, ancestors: np.ndarray | None) -> None:
    from genlm.control.sampler.record import context_text

    print(f"step {step}: ess {ess(pop.log_weights):.2f} / {len(pop)}")
    for i, p in enumerate(pop.particles):
        mark = "done" if pop.done[i] else "    "
        print(f"  [{i}] {mark} logw {pop.log_weights[i]:10.4f}  {''.join(context_text(p.context))!r}")
    if ancestors is not None:
        print(f"  resampled: ancestors {ancestors.tolist()}")


__all__ = ["SequenceModel", "Population", "smc_standard", "step_all", "step_many", "should_resample"]
