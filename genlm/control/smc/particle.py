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
from genlm.control.smc.deaths import Deaths
from genlm.control.smc.kernel import increments
from genlm.control.smc.record import RunRecord
from genlm.control.smc.resampling import log_mean_exp
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

    The particle's log weight is `weight = start + Σ_s logw_s + twist_amount`; the
    methods `score`, `twist`, `untwist` and `finish` change it as in 0.4.1.

    Args:
        unit_sampler: proposes the next unit with a properly weighted log weight
            (anything with `start_weight`, `sample` and `logw_eos`).
        critic: optional potential over the sampler's tokens; its `score` of the
            current context is the twist.
        max_tokens: bound on the context length, EOS included.
        twist_with_critic: twist by the critic at every step (True) or apply the
            critic only once, at termination (False); the final weights agree.
        terminate_when: optional predicate on the context; when it holds, the
            particle finishes (EOS is forced with the `logw_eos` correction).
        verbosity: 1 prints the particle after each `step`.
        budget_aware: a token sampler draws only tokens after which its target can
            still end within `max_tokens` (`genlm.control.sampler.budget`; the
            length-conditioned target is unchanged).
        end_twist: the end twist's log charge on every unfinished particle, 0 once it
            finishes: a constant (0: none), or None for the cost of ending after the
            particle's context (`genlm.control.smc.step.end_costs`), as
            `SMC(...)(..., end_twist=)` sets it.
    """

    __slots__ = (
        "unit_sampler", "critic", "max_tokens", "twist_with_critic", "terminate_when",
        "verbosity", "budget_aware", "eos", "context", "weight", "twist_amount", "done",
        "end_twist",
    )

    def __init__(
        self,
        unit_sampler: Any,
        critic: Any = None,
        max_tokens: float = math.inf,
        twist_with_critic: bool = True,
        terminate_when: TerminateWhen | None = None,
        verbosity: int = 0,
        budget_aware: bool = True,
        end_twist: float | None = 0.0,
    ):
        self.unit_sampler = unit_sampler
        self.budget_aware = bool(budget_aware)
        self.end_twist = None if end_twist is None else float(end_twist)
        self.critic = critic
        self.max_tokens = max_tokens
        self.twist_with_critic = bool(twist_with_critic)
        self.terminate_when = plain_predicate(terminate_when)
        self.verbosity = verbosity
        self.eos = getattr(getattr(unit_sampler, "target", None), "eos", EOS)
        self.context: list = []
        self.weight = 0.0
        self.twist_amount = 0.0
        self.done = False

    @property
    def finished(self) -> bool:
        """Whether the particle has finished (`done`)."""
        return self.done

    def clone(self) -> "SequenceModel":
        """A copy with its own context list (used for resampled duplicates)."""
        other = object.__new__(SequenceModel)
        for name in SequenceModel.__slots__:
            setattr(other, name, getattr(self, name))
        other.context = list(self.context)
        return other

    # Weight arithmetic (0.4.1's particle methods) ----------------------------

    def score(self, amount: float) -> None:
        """`weight += amount`; a NaN result is `-inf`.

        Raises:
            ValueError: `amount` is `+inf` (no potential may return it).
        """
        if amount == math.inf:
            raise ValueError("a log weight increment of +inf breaks the potential contract")
        w = self.weight + amount
        self.weight = -math.inf if math.isnan(w) else w

    def twist(self, amount: float) -> None:
        """Add `amount` provisionally: `untwist` takes it back."""
        self.twist_amount += amount
        self.score(amount)

    def untwist(self) -> None:
        """Remove the provisional twist from the weight."""
        self.score(-self.twist_amount)
        self.twist_amount = 0.0

    def finish(self) -> None:
        """Untwist and mark the particle done."""
        self.untwist()
        self.done = True

    # Steps ---------------------------------------------------------------------

    async def start_weight(self) -> float:
        """Log weight of the empty context: `unit_sampler.start_weight()`."""
        return float(await self.unit_sampler.start_weight())

    async def start(self) -> float:
        """Add the start weight to `weight` and return it.

        Raises:
            ValueError: the start weight is `-inf` (the target gives the empty
                context weight zero under `prefix`).
        """
        w = await self.start_weight()
        if w == -math.inf:
            raise ValueError(
                "Start weight is -inf: the target gives the empty context weight zero under prefix"
            )
        self.score(w)
        return w

    def _ends(self, unit: Any) -> bool:
        return ends_with(unit, self.eos)

    async def step(self, rng: np.random.Generator | None = None) -> float:
        """Extend the context by one unit, add the increment to `weight` and return it.

        The context changes only after every await succeeded, so a step that fails
        can be run again. Draws use `rng`, by default `genlm.control.draw.current_rng()`.

        Raises:
            TypeError: if `rng` is not a `numpy.random.Generator`.
        """
        if rng is not None and not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        inc = float((await step_many([self], [current_rng() if rng is None else rng]))[0])
        if self.verbosity > 0:
            print(repr(self))
        return inc

    def stop(self) -> None:
        """Finish a particle of weight zero, closing its context with EOS."""
        if not self.done:
            self.done = True
            if not (self.context and self._ends(self.context[-1])):
                self.context.append(self.eos)

    def __repr__(self) -> str:
        return f"SequenceModel({self.weight:.2f}: {self.context!r})"


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
        twists = np.array([particles[i].twist_amount for i in m], dtype=np.float64)
        contexts = [tuple(particles[i].context) for i in m]
        return twists, await propose(particles[m[0]], contexts, twists, [rngs[i] for i in m])

    outs = [await run(members[0])] if len(members) == 1 else await gather_or_cancel(*(run(m) for m in members))
    incs = np.zeros(len(particles), dtype=np.float64)
    for m, (twists, out) in zip(members, outs):
        incs[m] = increments(twists, out)
    for m, (_, out) in zip(members, outs):
        for j, i in enumerate(m):
            p = particles[i]
            p.context, p.twist_amount = list(out.contexts[j]), float(out.twists[j])
            w = p.weight + incs[i]
            p.weight = -math.inf if math.isnan(w) else float(w)
            p.done = bool(out.ends[j]) or p.weight == -math.inf  # killed: done, without EOS
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
        deaths: the sequences of weight zero, by cause (`genlm.control.smc.deaths`).
        ess_before_resample: `1 / Σ W²` of the weights the run's last resampling saw,
            before it resampled (the final ESS when the run never resampled).
    """

    particles: list[SequenceModel]
    log_weights: np.ndarray
    done: np.ndarray
    record: RunRecord | None = field(default=None, repr=False)
    deaths: Deaths = field(default_factory=Deaths)
    ess_before_resample: float | None = None

    @classmethod
    def of_state(cls, model: SequenceModel, state: PopulationState, record: RunRecord | None = None) -> "Population":
        """The particles of `state` as clones of `model` (each with its own context list)."""
        particles = []
        rows = zip(state.contexts, state.twists.tolist(), state.done.tolist(), state.log_weights.tolist())
        for context, twist, done, weight in rows:
            p = model.clone()
            p.context, p.twist_amount, p.done, p.weight = list(context), twist, done, weight
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

    def __getitem__(self, i: int) -> SequenceModel:
        return self.particles[i]

    def __len__(self) -> int:
        return len(self.particles)


__all__ = ["SequenceModel", "Population", "plain_predicate", "step_many", "step_all"]
