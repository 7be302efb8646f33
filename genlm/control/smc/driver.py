"""The SMC driver: the one async loop that runs a population to the end.

It owns the run's randomness (one `SeedSequence` root: the resampler's generator
and every particle slot's per-step stream derive from it and are passed down
explicitly), the concurrency (one batched `propose` per step for all live
particles), progress and recording. The arithmetic is the pure kernel's.
"""

from __future__ import annotations

import math

import numpy as np

from genlm.control._args import is_int, is_real, positive_int, reject_bool
from genlm.control._warn import warn_user
from genlm.control.smc import kernel, progress
from genlm.control.smc.deaths import Cause, Deaths, ZeroWeightWarning, length_hints
from genlm.control.smc.particle import Population, SequenceModel
from genlm.control.smc.record import Recorder, context_text
from genlm.control.smc.record_file import check_output_path, write_record_or_warn
from genlm.control.smc.resampling import get_resampler
from genlm.control.smc.state import PopulationState, Proposals
from genlm.control.smc.step import SlotStreams, propose, retrying
from genlm.control.weights import fold_nan


def check_args(n_particles: int, ess_threshold: float) -> None:
    """Raises `ValueError`/`TypeError` for a bad population size or threshold."""
    positive_int("n_particles", n_particles)
    reject_bool("ess_threshold", ess_threshold)
    if not is_real(ess_threshold) or not 0 <= ess_threshold <= 1:
        raise ValueError(f"ess_threshold must be a number in [0, 1], got {ess_threshold!r}")


def check_seed(seed: int | None) -> None:
    """Raises `ValueError`/`TypeError` unless `seed` is None or an integer ≥ 0."""
    if seed is not None:
        reject_bool("seed", seed)
        if not is_int(seed) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")


def run_streams(seed: int | None) -> tuple[np.random.Generator, SlotStreams]:
    """The run's resampling generator (spawn key 0 of the root) and its slot streams
    (spawn key 1); fresh OS entropy when `seed` is None."""
    root = np.random.SeedSequence(None if seed is None else int(seed))
    rng = np.random.default_rng(np.random.SeedSequence(root.entropy, spawn_key=(0,)))
    return rng, SlotStreams(root)


async def smc_standard(
    model: SequenceModel,
    n_particles: int,
    ess_threshold: float = 0.5,
    resampling_method: str = "multinomial",
    json_path: str | None = None,
    *,
    json_file: str | None = None,
    seed: int | None = None,
    verbosity: int = 0,
    prompt: str | None = None,
) -> Population:
    """Run SMC with `n_particles` copies of `model` until every particle has finished.

    Each step proposes a unit for every live particle (`step.propose`, slot `s`
    drawing from the run's stream of (step, `s`)), then applies the kernel:
    `reweight`, the resampling decision `ancestors` (ESS below
    `ess_threshold · n_particles`) and `resample`.

    Args:
        model: the initial particle (its sampler, critic, `max_tokens`, `terminate_when`).
        n_particles: population size.
        ess_threshold: resample when `ess < ess_threshold · n_particles`.
        resampling_method: one of `resampling.RESAMPLING_METHODS` (0.4.1's order:
            the fourth positional argument).
        json_path: (or `json_file=`) when given, a record of every step is written there after the run
            (the path is checked first; if writing fails, a `RecordNotWrittenWarning`
            says why and the population, with its `record`, is still returned).
        seed: makes the run reproducible bit for bit (also when run concurrently
            with other seeded runs); fresh entropy when None.
        verbosity: 1 prints the particles after each step.
        prompt: the model's prompt as text, kept in the record.

    Returns:
        The final `Population` (its `record` is set when `json_file` is given; its
        `ess_before_resample` is the ESS the run's last resampling saw, before it
        resampled, or the final ESS when the run never resampled).
    """
    check_args(n_particles, ess_threshold)
    if json_path is not None and json_file is not None:
        raise TypeError("pass json_path or json_file (its other name), not both")
    json_file = json_path if json_file is None else json_file
    if json_file is not None:
        check_output_path(json_file)
    scheme = get_resampler(resampling_method)
    check_seed(seed)
    rng, streams = run_streams(seed)
    raw_start = float(await retrying(model.start_weight))
    start = float(fold_nan(np.array([raw_start]))[0])
    state = kernel.initial_state(n_particles, start, model.eos)
    # each particle's cause of death (genlm.control.smc.deaths), kept through resampling
    start_cause = Cause.NAN if raw_start != raw_start else Cause.DEAD_PREFIX
    causes: list[Cause | None] = [start_cause if start == -math.inf else None] * n_particles
    recorder = None
    if json_file:
        recorder = Recorder(n_particles, ess_threshold, model.max_tokens, resampling_method, seed, prompt)
    step = 0
    ess_before_resample = None  # the ESS the run's last resampling saw
    with progress.progress_bar(model.max_tokens) as bar:
        while not state.done.all():
            live = state.live
            contexts = [state.contexts[i] for i in live.tolist()]
            twists = state.twists[live]

            async def attempt() -> Proposals:
                # each attempt restarts the slots' streams, so a retried step draws the same
                return await propose(model, contexts, twists, streams.at(step, live))  # noqa: B023

            proposals = await retrying(attempt)
            state = kernel.reweight(state, live, proposals, model.eos)
            _attach_causes(causes, state, live, proposals)
            ancestors = kernel.ancestors(state, rng, ess_threshold, scheme)
            if verbosity > 0:
                _print_step(step, state, ancestors)
            if recorder is not None:
                recorder.add(step, state, ancestors)
            if ancestors is not None:
                ess_before_resample = state.ess
                state = kernel.resample(state, ancestors)
                causes = [causes[a] for a in ancestors.tolist()]
            step += 1
            bar.update(1)
    pop = Population.of_state(model, state)
    pop.ess_before_resample = state.ess if ess_before_resample is None else ess_before_resample
    pop.deaths = Deaths.of(c or Cause.DEAD_PREFIX for c, w in zip(causes, state.log_weights) if w == -math.inf)
    if n_particles and pop.deaths.total == n_particles:
        hints = length_hints(model) if pop.deaths.max_tokens else []
        warn_user(ZeroWeightWarning(pop.deaths.explain(n_particles, hints)), ZeroWeightWarning)
    if recorder is not None:
        pop.record = recorder.finish(pop)
        write_record_or_warn(pop.record, json_file)
    return pop


def _attach_causes(causes: list, state: PopulationState, live: np.ndarray, proposals: Proposals) -> None:
    """The cause of each live particle whose weight has just become zero (from the
    step's `proposals.causes`; a sampler's weight zero when they are missing)."""
    for j, i in enumerate(live.tolist()):
        if state.log_weights[i] == -math.inf and causes[i] is None:
            causes[i] = proposals.causes[j] if proposals.causes else Cause.DEAD_PREFIX


def _print_step(step: int, state: PopulationState, ancestors: np.ndarray | None) -> None:
    print(f"step {step}: ess {state.ess:.2f} / {state.n}")
    for i, context in enumerate(state.contexts):
        mark = "done" if state.done[i] else "    "
        print(f"  [{i}] {mark} logw {state.log_weights[i]:10.4f}  {''.join(context_text(context))!r}")
    if ancestors is not None:
        print(f"  resampled: ancestors {ancestors.tolist()}")


__all__ = ["smc_standard", "check_args", "check_seed", "run_streams"]
