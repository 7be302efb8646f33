"""One SMC step's model calls: batched sampler and critic calls, per-slot streams, retries.

The live particles of a run share one unit sampler and critic, so a step makes one
`batch_sample` call (and one `batch_logw_eos`, one `critic.batch_score`) for all of
them and returns their `Proposals`; it changes nothing, so a step whose batch was
abandoned by another run's cancelled task is simply run again. Each slot draws
from its own Philox stream, a function of the run's seed, the step and the slot,
so a seeded run is reproducible whatever runs beside it.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Callable

import numpy as np

from genlm.control.horizon import OUT_OF_BUDGET, Cause, DeadEnd, cause_of, using_horizon
from genlm.control.sampler.token import TokenSampler
from genlm.control.sampler.unit import flatten_units
from genlm.control.smc.state import Proposals, ends_with
from genlm.control.weights import NEG_INF, eos_column
from genlm.control.window import BatchAbandoned, gather_or_cancel

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
        # per slot: its generator, and the state it is re-pointed to (Philox copies
        # the arrays in on assignment, so one state per slot serves every step)
        self._gens: dict[int, tuple[np.random.Generator, dict, np.ndarray]] = {}

    def at(self, step: int, slots: Any) -> list[np.random.Generator]:
        """The generators of `slots` for step `step`, each at the start of its stream."""
        out = []
        for slot in slots:
            slot = int(slot)
            kept = self._gens.get(slot)
            if kept is None:
                counter = np.array([0, 0, slot, 0], dtype=np.uint64)
                state = {
                    "bit_generator": "Philox",
                    "state": {"counter": counter, "key": self._key},
                    "buffer": np.zeros(4, dtype=np.uint64),
                    "buffer_pos": 4,
                    "has_uint32": 0,
                    "uinteger": 0,
                }
                kept = self._gens[slot] = (np.random.Generator(np.random.Philox(key=self._key)), state, counter)
            gen, state, counter = kept
            counter[3] = step
            gen.bit_generator.state = state
            out.append(gen)
        return out


async def retrying(call: Callable[[], Any]) -> Any:
    """`await call()`, run again when its batch was abandoned by another run's task."""
    for attempt in range(_MAX_ATTEMPTS):
        try:
            return await call()
        except BatchAbandoned:
            if attempt + 1 == _MAX_ATTEMPTS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def _sample_all(sampler: Any, contexts: list[list], rngs: list) -> list:
    """The sampler's `batch_sample`; a duck-typed unit sampler without one (0.4.1
    harnesses build `SequenceModel`s with such) gets `TokenSampler`'s default, one
    `sample` per context under its generator."""
    batch = getattr(sampler, "batch_sample", None) or partial(TokenSampler.batch_sample, sampler)
    return list(await batch(contexts, rngs))


async def _logw_eos_all(sampler: Any, contexts: list[list]) -> list:
    batch = getattr(sampler, "batch_logw_eos", None) or partial(TokenSampler.batch_logw_eos, sampler)
    return list(await batch(contexts))


def _horizon(model: Any) -> int | None:
    """The `max_tokens` a token sampler prunes its draws to (`sampler.budget`), or None:
    the budget turned off, no finite bound, or units that are not single tokens."""
    sampler, m = model.unit_sampler, model.max_tokens
    if not getattr(model, "budget_aware", True) or not math.isfinite(m):
        return None
    return int(m) if isinstance(sampler, TokenSampler) and sampler.budget_in_tokens else None


async def _draw_units(model: Any, contexts: list[list], rngs: list) -> tuple[list, np.ndarray, np.ndarray]:
    """A unit after each context (EOS forced, with its `logw_eos`, at `max_tokens - 1`),
    its log weight, and where the particle met `max_tokens`: EOS forced there, or a
    draw the budget left without a token that can still end in time."""
    sampler, n = model.unit_sampler, len(contexts)
    forced = [i for i, c in enumerate(contexts) if len(c) >= model.max_tokens - 1]
    drawn = [i for i, c in enumerate(contexts) if len(c) < model.max_tokens - 1]
    calls = []
    if drawn:
        calls.append(_sample_all(sampler, [contexts[i] for i in drawn], [rngs[i] for i in drawn]))
    if forced:
        calls.append(_logw_eos_all(sampler, [contexts[i] for i in forced]))
    with using_horizon(_horizon(model)):  # the tasks gather makes copy it
        results = await calls[0] if len(calls) == 1 else await gather_or_cancel(*calls)
    if len(calls) == 1:
        results = [results]
    units: list[Any] = [None] * n
    logws = np.zeros(n, dtype=np.float64)
    made_to_end = np.zeros(n, dtype=bool)
    if drawn:
        for i, (unit, logw, _) in zip(drawn, results[0]):
            units[i], logws[i] = unit, float(logw)
            made_to_end[i] = cause_of(logw) == OUT_OF_BUDGET
    if forced:
        for i, logw in zip(forced, results[-1]):
            units[i], logws[i] = model.eos, float(logw)
    made_to_end[forced] = True
    return units, logws, made_to_end


def _cause(logw: float, twist: float, scored: bool, unit: Any, made_to_end: bool) -> Cause | None:
    """Why a proposal has weight zero (or NaN), in the order of `genlm.control.smc.deaths`;
    None when it has not."""
    if logw != logw or (scored and twist != twist):
        return Cause.NAN
    if isinstance(unit, DeadEnd):
        return unit.cause
    if logw == NEG_INF:
        return Cause.MAX_TOKENS if made_to_end else Cause.DEAD_PREFIX
    if scored and twist == NEG_INF:
        return Cause.CRITIC
    return None


async def _scores(critic: Any, contexts: list[list]) -> list:
    if getattr(critic, "collects_calls", False):  # declared by the autobatched view
        return list(await critic.batch_score(contexts))
    # SMC(autobatch=False): one call per particle
    return await gather_or_cancel(*(critic.score(c) for c in contexts))


# The default end twist's clip: the log of the charge on an unfinished particle lies
# in [END_TWIST_FLOOR, 0]. A charge below e^-20.7 (1e-9) would stand for an ending no
# model prices that low, and would only make the weight it gives back heavy tailed.
END_TWIST_FLOOR = math.log(1e-9)


def _ending_factors(sampler: Any) -> list | None:
    """The potentials whose EOS entries price ending for the default end twist, or
    None (no default twist): what the unit sampler declares
    (`TokenSampler.ending_factors`); a unit sampler that declares nothing has none."""
    declared = getattr(sampler, "ending_factors", None)
    return None if declared is None else declared()


async def _eos_entries(potential: Any, contexts: list[list]) -> np.ndarray:
    """`potential.logw_next(x)[EOS]` after each context: the potential's EOS entries
    where it answers them alone (`fast_paths.EosEntries`: a language model reads its
    EOS tokens from the next-token block the next step's draw reads, and writes no
    row for them); from one batch of rows where it computes them; else as `complete(x) - prefix(x)`,
    two batched calls instead of a derived row's one `prefix` per token. NaN is
    `-inf`."""
    from genlm.control.potential import fast_paths

    entries = fast_paths.eos_entries(potential)
    if entries is not None:  # the EOS entries alone: no row is written for them
        eos = np.asarray(await entries(contexts), dtype=np.float64)
        return np.where(eos == eos, eos, NEG_INF)
    if fast_paths.vectorised_logw_next(potential):
        return np.array(eos_column(await potential.batch_logw_next(contexts)), dtype=np.float64)
    complete, prefix = await gather_or_cancel(potential.batch_complete(contexts), potential.batch_prefix(contexts))
    complete, prefix = np.asarray(complete, dtype=np.float64), np.asarray(prefix, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        eos = np.where(prefix > NEG_INF, complete - prefix, NEG_INF)
    return np.where(eos == eos, eos, NEG_INF)


async def end_costs(sampler: Any, contexts: list[list]) -> np.ndarray | None:
    """The default end twist's log charge after each of `contexts`: the sum of the
    finite EOS entries of the ending factors there (a factor that forbids EOS, a
    condition, adds nothing), clipped to `[END_TWIST_FLOOR, 0]`; 0 where no factor
    allows EOS. None when the sampler has no ending factors.

    It is a function of the context alone, so it keeps `log_ml` unbiased (twisted
    SMC)."""
    factors = _ending_factors(sampler)
    if factors is None:
        return None
    total = np.zeros(len(contexts), dtype=np.float64)
    found = np.zeros(len(contexts), dtype=bool)
    for eos in await gather_or_cancel(*(_eos_entries(f, contexts) for f in factors)):
        finite = np.isfinite(eos)
        total[finite] += eos[finite]
        found |= finite
    return np.where(found, np.clip(total, END_TWIST_FLOOR, 0.0), 0.0)


async def _charges(model: Any, news: list[list], logws: np.ndarray, ends: list) -> np.ndarray | None:
    """The end twist's log charge on each proposal: 0 on a finished or dead one, and
    on an unfinished one `model.end_twist` (a constant), or with `end_twist` None the
    cost of ending after its new context (`end_costs`). None: no twist."""
    mode = getattr(model, "end_twist", 0.0)
    if mode == 0.0:
        return None
    unfinished = (np.asarray(logws) > NEG_INF) & ~np.asarray(ends, dtype=bool)
    charges = np.zeros(len(news), dtype=np.float64)
    if mode is not None:
        charges[unfinished] = float(mode)
        return charges
    rows = np.flatnonzero(unfinished)
    if rows.size:
        costs = await end_costs(model.unit_sampler, [news[i] for i in rows.tolist()])
        if costs is None:
            return None
        charges[rows] = costs
    elif _ending_factors(model.unit_sampler) is None:
        return None
    return charges


def _charged(twists: np.ndarray, scored: np.ndarray, logws: np.ndarray, charges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Twists with the end twist's charges. A live particle's twist without the charge
    is the critic's new score where the critic scored it, else 0 (the critic scores
    every live particle, or with `twist_with_critic` False only finished ones, so an
    unscored live twist held the charge alone); every live twist is then new, so it is
    marked scored. A finished particle's charge is 0: its final twist is free of it,
    and the estimate of `Z` stays unbiased (twisted SMC); only resampling reads it."""
    live = np.asarray(logws) > NEG_INF
    base = np.where(scored, twists, 0.0)
    return np.where(live, base + charges, twists), scored | live


async def propose(model: Any, contexts: list[tuple], twists: np.ndarray, rngs: list) -> Proposals:
    """One step of particles that share `model`'s unit sampler and critic.

    Context `i` (with twist `twists[i]`) gets a unit drawn with `rngs[i]`; a
    `terminate_when` that holds closes it with EOS (adding its `logw_eos`); the critic
    scores each extended context whose increment is above `-inf` (only the finished
    ones when `model.twist_with_critic` is False). A context whose increment is `-inf`
    keeps the unit it drew and is not closed with EOS (it was killed, not finished),
    except where EOS was drawn, forced at `max_tokens` or appended by `terminate_when`;
    where the sampler had no unit to draw (a `DeadEnd`) it stays as it was.
    """
    lists = [list(c) for c in contexts]
    units, logws, made_to_end = await _draw_units(model, lists, rngs)
    reported = [u if isinstance(u, DeadEnd) else None for u in units]
    # A dead end at the budget met max_tokens: closed with EOS, as a particle whose
    # forced EOS has weight zero is. Any other dead end (no token allowed) drew no unit:
    # its context stays as it was, unfinished (no EOS), as a killed particle's does.
    at_end = [r is not None and (made_to_end[i] or r.cause == OUT_OF_BUDGET) for i, r in enumerate(reported)]
    units = [u if r is None else model.eos if at_end[i] else None for i, (u, r) in enumerate(zip(units, reported))]
    news = [[*c] if u is None else [*c, u] for c, u in zip(lists, units)]
    ends = [u is not None and ends_with(u, model.eos) for u in units]
    stop = model.terminate_when
    stopped = [i for i in range(len(news))
               if units[i] is not None and not ends[i] and stop is not None and stop(news[i])]
    if stopped:
        for i, logw in zip(stopped, await _logw_eos_all(model.unit_sampler, [news[i] for i in stopped])):
            logws[i] += float(logw)
            news[i].append(model.eos)
            ends[i] = True
            made_to_end[i] = True
    new_twists = np.array(twists, dtype=np.float64)
    scored = np.zeros(len(news), dtype=bool)
    if model.critic is not None:
        scored[:] = logws > NEG_INF
        if not getattr(model, "twist_with_critic", True):
            scored &= np.array(ends, dtype=bool)  # the critic only at termination
        rows = np.flatnonzero(scored)
        if rows.size:
            values = await _scores(model.critic, [flatten_units(news[i]) for i in rows.tolist()])
            new_twists[rows] = [float(v) for v in values]
    charges = await _charges(model, news, logws, ends)
    if charges is not None:
        new_twists, scored = _charged(new_twists, scored, logws, charges)
    causes = tuple(
        _cause(float(logws[i]), float(new_twists[i]), bool(scored[i]), reported[i] or units[i], bool(made_to_end[i]))
        for i in range(len(news))
    )
    return Proposals([tuple(c) for c in news], logws, new_twists, scored, np.array(ends, dtype=bool), causes)


__all__ = ["END_TWIST_FLOOR", "SlotStreams", "end_costs", "propose", "retrying"]
