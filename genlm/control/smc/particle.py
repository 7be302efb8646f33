"""A particle object (`SequenceModel`) and the run's result (`Population`).

`SequenceModel` is the 0.4-style particle: the model of a run (its unit sampler,
critic, `max_tokens`, `terminate_when`) together with one mutable context. The
driver reads only the model part and keeps the contexts in a frozen
`PopulationState`; `SequenceModel.step` stays for code that steps one particle.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from genlm.control.constant import EOS
from genlm.control.draw import current_rng
from genlm.control.sampler.record import RunRecord
from genlm.control.sampler.resampling import log_mean_exp
from genlm.control.smc.kernel import increments
from genlm.control.smc.state import PopulationState, ends_with
from genlm.control.smc.step import SlotStreams, propose, retrying
from genlm.control.weights import fold_nan
from genlm.control.window import gather_or_cancel

TerminateWhen = Callable[[list], bool]


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


class SequenceModel:
    """One particle: a context grown by `unit_sampler`, twisted by `critic`.

    Args:
        unit_sampler: proposes the next unit with a properly weighted log weight.
        critic: optional potential over the sampler's tokens; its `score` of the
            current context is the twist.
        max_tokens: bound on the context length, EOS included.
        terminate_when: optional predicate on the context; when it holds, the
            particle finishes (EOS is forced with the `logw_eos` correction).
        budget_aware: a token sampler draws only tokens after which its target can
            still end within `max_tokens` (`genlm.control.sampler.budget`; the
            length-conditioned target is unchanged).
    """

    __slots__ = (
        "unit_sampler", "critic", "max_tokens", "terminate_when", "budget_aware", "eos", "context", "twist", "finished"
    )

    def __init__(
        self,
        unit_sampler: Any,
        critic: Any = None,
        max_tokens: float = math.inf,
        terminate_when: TerminateWhen | None = None,
        budget_aware: bool = True,
    ):
        self.unit_sampler = unit_sampler
        self.budget_aware = bool(budget_aware)
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
        return ends_with(unit, self.eos)

    async def step(self, rng: np.random.Generator | None = None) -> float:
        """Extend the context by one unit and return the log weight increment.

        The context changes only after every await succeeded, so a step that fails
        can be run again. Draws use `rng`, by default `genlm.control.draw.current_rng()`.

        Raises:
            TypeError: if `rng` is not a `numpy.random.Generator`.
        """
        if rng is not None and not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        return float((await step_many([self], [current_rng() if rng is None else rng]))[0])

    def stop(self) -> None:
        """Finish a particle of weight zero, closing its context with EOS."""
        if not self.finished:
            self.finished = True
            if not (self.context and self._ends(self.context[-1])):
                self.context.append(self.eos)

    def __repr__(self) -> str:
        return f"SequenceModel({self.context!r})"


async def step_many(particles: list[SequenceModel], rngs: list) -> np.ndarray:
    """Step `particles` together and return their log weight increments (before NaN
    folding): `logw_unit + twist_new - twist_old`.

    Particles that share a unit sampler (and critic) make one `batch_sample` call
    (and one `batch_logw_eos`, one `critic.batch_score`); particle `i` draws with
    `rngs[i]`. Contexts change only after every call succeeded.
    """
    groups: dict[tuple[int, int], list[int]] = {}
    for i, p in enumerate(particles):
        groups.setdefault((id(p.unit_sampler), id(p.critic)), []).append(i)
    members = list(groups.values())

    async def run(m: list[int]):
        twists = np.array([particles[i].twist for i in m], dtype=np.float64)
        contexts = [tuple(particles[i].context) for i in m]
        return twists, await propose(particles[m[0]], contexts, twists, [rngs[i] for i in m])

    outs = [await run(members[0])] if len(members) == 1 else await gather_or_cancel(*(run(m) for m in members))
    incs = np.zeros(len(particles), dtype=np.float64)
    for m, (twists, out) in zip(members, outs):
        incs[m] = increments(twists, out)
    for m, (_, out) in zip(members, outs):
        for j, i in enumerate(m):
            p = particles[i]
            p.context, p.twist, p.finished = list(out.contexts[j]), float(out.twists[j]), bool(out.ends[j])
    return incs


async def step_all(
    particles: list[SequenceModel],
    root: np.random.SeedSequence,
    step: int,
    slots: np.ndarray,
    streams: SlotStreams | None = None,
) -> np.ndarray:
    """`step_many` with slot `s` drawing from the run's stream of (step, `s`); the
    increments with NaN folded to `-inf`; a step whose batch was abandoned is run again.

    Raises:
        ValueError: if an increment is `+inf`.
    """
    streams = SlotStreams(root) if streams is None else streams
    return fold_nan(await retrying(lambda: step_many(particles, streams.at(step, slots))))


@dataclass
class Population:
    """The result of `smc_standard`: the final particles, weights and done flags.

    Attributes:
        particles: one `SequenceModel` per slot, holding its final context.
        log_weights: `logw_i` of each slot.
        done: whether each slot's particle has finished.
        record: the run record when one was requested.
    """

    particles: list[SequenceModel]
    log_weights: np.ndarray
    done: np.ndarray
    record: RunRecord | None = field(default=None, repr=False)

    @classmethod
    def of_state(cls, model: SequenceModel, state: PopulationState, record: RunRecord | None = None) -> "Population":
        """The particles of `state` as clones of `model` (each with its own context list)."""
        particles = []
        for context, twist, done in zip(state.contexts, state.twists.tolist(), state.done.tolist()):
            p = model.clone()
            p.context, p.twist, p.finished = list(context), twist, done
            particles.append(p)
        return cls(particles, state.log_weights.copy(), state.done.copy(), record)

    @property
    def contexts(self) -> list[list]:
        return [p.context for p in self.particles]

    @property
    def log_ml(self) -> float:
        """`log_mean_exp(log_weights)`: the estimate of `log Z`."""
        return log_mean_exp(self.log_weights)

    def __iter__(self) -> Iterator[SequenceModel]:
        return iter(self.particles)

    def __len__(self) -> int:
        return len(self.particles)


__all__ = ["SequenceModel", "Population", "plain_predicate", "step_many", "step_all"]
