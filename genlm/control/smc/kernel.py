"""The SMC kernel: pure functions from a population state to the next.

Arrays in, a new `PopulationState` out; no event loop, no model, no hidden
randomness (the resampler takes the run's `numpy.random.Generator`). One SMC step is

    state = reweight(state, live, proposals, eos)       # logw_i += logw_unit + Δtwist
    anc = ancestors(state, rng, ess_threshold, scheme)  # None: no resampling
    state = resample(state, anc) if anc is not None else state

and `state.log_ml = log(Σ exp(logw_i) / n)` estimates `log Z` at every step:
resampling sets every weight to that mean, so it leaves the estimate unchanged
(Del Moral 2004).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from genlm.control.smc.resampling import Scheme, ess, log_mean_exp, normalized_weights
from genlm.control.smc.state import PopulationState, Proposals
from genlm.control.weights import NEG_INF, fold_nan


def _indices(name: str, values: Any, n: int) -> np.ndarray:
    """`values` as a 1-D index array into `n` particles.

    Raises:
        ValueError: not integers, not 1-D, or outside `[0, n)`.
    """
    arr = np.asarray(values)
    if arr.ndim != 1 or not (arr.size == 0 or arr.dtype.kind in "iu"):
        raise ValueError(f"{name} must be a 1-D array of particle indices, got {arr.dtype} of shape {arr.shape}")
    if arr.size and (arr.min() < 0 or arr.max() >= n):
        raise ValueError(f"{name} must be particle indices in [0, {n}), got values in [{arr.min()}, {arr.max()}]")
    return arr.astype(np.intp, copy=False)


def initial_state(n: int, start: float, eos: Any) -> PopulationState:
    """`n` empty contexts of log weight `start = target.prefix([])`; when `start` is
    `-inf` every particle is finished at once with the context `(eos,)`."""
    dead = start == NEG_INF
    return PopulationState(
        contexts=((eos,) if dead else (),) * n,
        log_weights=np.full(n, start, dtype=np.float64),
        twists=np.zeros(n, dtype=np.float64),
        done=np.full(n, dead, dtype=bool),
    )


def increments(old_twists: np.ndarray, proposals: Proposals) -> np.ndarray:
    """`logw_unit + (twist_new - twist_old)` where the critic scored, `logw_unit`
    elsewhere (NaN stays NaN; `reweight` reads it as `-inf`)."""
    inc = np.array(proposals.logws, dtype=np.float64)
    scored = np.asarray(proposals.scored, dtype=bool)
    if scored.any():
        inc[scored] += np.asarray(proposals.twists, dtype=np.float64)[scored] - old_twists[scored]
    return inc


def reweight(state: PopulationState, live: np.ndarray, proposals: Proposals, eos: Any) -> PopulationState:
    """The state after the live particles `live` took their proposed step.

    `logw_i ← logw_i + increments_i` (see `increments`; NaN read as `-inf`); a
    particle finishes when its context ends in EOS or its weight became `-inf` (its
    context is then the proposal's: a particle killed before it ended does not end in
    EOS, as in genlm-control 0.4.1).

    Raises:
        ValueError: if an increment is `+inf`, `proposals` and `live` differ in
            length, or `live` names a finished particle or no particle.
    """
    live = _indices("live", live, state.n)
    fields = (proposals.contexts, proposals.logws, proposals.twists, proposals.scored, proposals.ends)
    if {len(a) for a in fields} != {len(live)}:
        raise ValueError(
            f"reweight needs one proposal per live particle: {len(live)} live, "
            f"proposals of lengths {[len(a) for a in fields]}"
        )
    if state.done[live].any():
        raise ValueError(f"reweight: particle {int(live[state.done[live]][0])} has already finished")
    log_weights = state.log_weights.copy()
    log_weights[live] += fold_nan(increments(state.twists[live], proposals))
    twists = state.twists.copy()
    twists[live] = proposals.twists
    done = state.done.copy()
    dead = log_weights[live] == NEG_INF
    done[live] = np.asarray(proposals.ends, dtype=bool) | dead
    contexts = list(state.contexts)
    for j, i in enumerate(live.tolist()):
        contexts[i] = proposals.contexts[j]
    return PopulationState._owned(tuple(contexts), log_weights, twists, done)


def should_resample(log_weights: np.ndarray, ess_threshold: float) -> bool:
    """Resample when `ess < ess_threshold · n`; 0 never resamples, 1 always does."""
    if ess_threshold <= 0:
        return False
    if ess_threshold >= 1:
        return True
    return ess(log_weights) < ess_threshold * len(log_weights)


def ancestors(
    state: PopulationState, rng: np.random.Generator, ess_threshold: float, scheme: Scheme
) -> np.ndarray | None:
    """The resampling decision and its indices: `scheme(rng, W, n)` with `W` the
    normalized weights, or None when every weight is zero or `should_resample` says
    no (then `rng` is not used).

    The step in which the last particles finish is decided like every other, so a
    run whose final ESS is low ends with one more resample, as in 0.4.1: it leaves
    `log_ml` unchanged and returns an equally weighted population."""
    if not (state.log_weights > NEG_INF).any() or not should_resample(state.log_weights, ess_threshold):
        return None
    return scheme(rng, normalized_weights(state.log_weights), state.n)


def resample(state: PopulationState, ancestors: np.ndarray) -> PopulationState:
    """Particle `i` becomes a copy of particle `ancestors[i]`, every weight the mean:
    `logw_i = log(Σ_j exp(logw_j) / n)`, so `log_ml` is unchanged."""
    idx = _indices("ancestors", ancestors, state.n)
    n = len(idx)
    return PopulationState._owned(
        tuple(state.contexts[a] for a in idx.tolist()),
        np.full(n, log_mean_exp(state.log_weights)),
        state.twists[idx],
        state.done[idx],
    )


__all__ = ["initial_state", "increments", "reweight", "should_resample", "ancestors", "resample"]
