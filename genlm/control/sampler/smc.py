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
arrays, steps the live particles together (one `batch_sample` call of their unit
sampler per step, see `genlm.control.sampler._step`; the calls and draws of runs
gathered on one event loop meet in the batching windows), and resamples when the ESS falls below
`ess_threshold · n`. After resampling every weight is set to the mean weight, so
`log_ml = log_mean_exp(final log weights)` is the standard unbiased estimate of
the normalizing constant (Del Moral 2004).
"""

from __future__ import annotations

import inspect
import math
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from genlm.control._args import is_int, is_real, positive_int, reject_bool
from genlm.control.constant import EOS
from genlm.control.draw import current_rng
from genlm.control.sampler._step import SlotStreams, _retrying, step_all, step_many
from genlm.control.sampler.record import Recorder, RunRecord
from genlm.control.sampler.record_file import check_output_path, write_record_or_warn
from genlm.control.sampler.resampling import (
    ess,
    get_resampler,
    log_mean_exp,
    normalized_weights,
)
from genlm.control.weights import NEG_INF, fold_nan

TerminateWhen = Callable[[list], bool]


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
        self.terminate_when = plain_predicate(terminate_when)
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


def plain_predicate(terminate_when: TerminateWhen | None) -> TerminateWhen | None:
    """`terminate_when`, checked: a plain function of the context returning a bool.

    Raises:
        TypeError: not callable, or an `async def` function (at once, or at its first
            call when it returns an awaitable).
    """
    if terminate_when is None:
        return None
    if not callable(terminate_when):
        raise TypeError(f"terminate_when must be callable, got {type(terminate_when).__name__}")
    message = (
        "terminate_when must be a plain function of the context returning a bool, "
        "not an async function (its coroutine would never run and always count as true)"
    )
    if inspect.iscoroutinefunction(terminate_when) or inspect.iscoroutinefunction(
        type(terminate_when).__call__
    ):
        raise TypeError(message)

    def checked(context: list) -> Any:
        out = terminate_when(context)
        if inspect.isawaitable(out):
            if inspect.iscoroutine(out):
                out.close()
            raise TypeError(message)
        return out

    return checked


def _check_args(n_particles: int, ess_threshold: float) -> None:
    positive_int("n_particles", n_particles)
    reject_bool("ess_threshold", ess_threshold)
    if not is_real(ess_threshold) or not 0 <= ess_threshold <= 1:
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
        json_file: when given, a record of every step is written there after the run
            (the path is checked first; if writing fails, a `RecordNotWrittenWarning`
            says why and the population, with its `record`, is still returned).
        resampling_method: one of `resampling.RESAMPLING_METHODS`.
        seed: makes the run reproducible bit for bit (also when run concurrently
            with other seeded runs); fresh entropy when None.
        verbosity: 1 prints the particles after each step.

    Returns:
        The final `Population` (its `record` is set when `json_file` is given).
    """
    _check_args(n_particles, ess_threshold)
    if json_file is not None:
        check_output_path(json_file)
    resampler = get_resampler(resampling_method)
    if seed is not None:
        reject_bool("seed", seed)
    if seed is not None and (not is_int(seed) or seed < 0):
        raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
    root = np.random.SeedSequence(None if seed is None else int(seed))
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
        write_record_or_warn(pop.record, json_file)
    return pop


def _print_step(step: int, pop: Population, ancestors: np.ndarray | None) -> None:
    from genlm.control.sampler.record import context_text

    print(f"step {step}: ess {ess(pop.log_weights):.2f} / {len(pop)}")
    for i, p in enumerate(pop.particles):
        mark = "done" if pop.done[i] else "    "
        print(f"  [{i}] {mark} logw {pop.log_weights[i]:10.4f}  {''.join(context_text(p.context))!r}")
    if ancestors is not None:
        print(f"  resampled: ancestors {ancestors.tolist()}")


__all__ = [
    "SequenceModel",
    "Population",
    "plain_predicate",
    "smc_standard",
    "step_all",
    "step_many",
    "should_resample",
]
