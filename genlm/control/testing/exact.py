"""The exact target of a small SMC problem, by enumeration, to check a run against.

`SMC(...)(n_particles, ess_threshold, max_tokens=M)` targets the sequences of at most
`M - 1` tokens (EOS is forced after them) weighted by the target's `complete`:

    Z = Σ_{|x| ≤ M-1} exp(t.complete(x)),    p(x) = exp(t.complete(x)) / Z,

with `t = potential · condition`. `enumerate_target` computes `Z` and `p` by visiting
every sequence of positive prefix weight, one batched `logw_next` per chunk of
contexts of one length; `sampler_target` computes what a token sampler's SMC
estimates, `E[Ẑ]` of a single particle and the weighted law of its sequences, by
enumerating every random path of the sampler at every step (`enumerate_sampler`). A
properly weighted sampler gives `sampler_target(...).log_z == enumerate_target(...).log_z`
and the same posterior; and `exp(log_ml - log Z)` of seeded runs has mean 1.

Both stop with `SequenceLimitExceeded` once more than `max_sequences` contexts would
be visited, so a problem too large to enumerate is an error, not a hang.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Hashable

import numpy as np

from genlm.control._device import stack, to_host
from genlm.control.horizon import using_horizon
from genlm.control.potential.base import Potential
from genlm.control.testing.samplers import enumerate_sampler
from genlm.control.weights import NEG_INF, fold_nan


class SequenceLimitExceeded(RuntimeError):
    """The enumeration would visit more sequences than `max_sequences` allows."""


@dataclass(frozen=True)
class ExactTarget:
    """The enumerated target of SMC with a given `max_tokens`.

    Attributes:
        log_z: `log Z`, `-inf` when no sequence has weight.
        sequences: log weight `t.complete(x)` of every sequence `x` (a tuple of tokens,
            EOS left out) of positive weight.
        posterior: `p(s) = Σ_{x with text s} exp(t.complete(x)) / Z` per text `s` (the
            bytes of the tokens joined for byte tokens, the strings joined for string
            tokens, else the tuple of tokens).
        visited: the number of contexts whose next-token weights were read.
    """

    log_z: float
    sequences: dict[tuple, float]
    posterior: dict[Hashable, float]
    visited: int


def text_of(tokens: tuple) -> Hashable:
    """The text of a token sequence: joined bytes (a model's tokens carry theirs in
    `byte_string`), joined strings, else the tuple itself."""
    pieces = [getattr(t, "byte_string", t) for t in tokens]
    if all(isinstance(p, bytes) for p in pieces):
        return b"".join(pieces)
    if all(isinstance(p, str) for p in pieces):
        return "".join(pieces)
    return tuple(tokens)


def _exact(sequences: dict[tuple, float], visited: int) -> ExactTarget:
    log_z = float(np.logaddexp.reduce(list(sequences.values()))) if sequences else NEG_INF
    posterior: dict[Hashable, float] = {}
    for tokens, logw in sequences.items():
        text = text_of(tokens)
        posterior[text] = posterior.get(text, 0.0) + math.exp(logw - log_z)
    return ExactTarget(log_z, sequences, posterior, visited)


def _check(max_tokens: Any, max_sequences: Any) -> None:
    for name, value in (("max_tokens", max_tokens), ("max_sequences", max_sequences)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an integer ≥ 1, got {value!r}")


def _over(max_sequences: int, max_tokens: int) -> SequenceLimitExceeded:
    return SequenceLimitExceeded(
        f"the target has more than max_sequences={max_sequences} sequences of at most "
        f"{max_tokens - 1} tokens with positive prefix weight; lower max_tokens, tighten "
        "the condition, or raise max_sequences"
    )


async def enumerate_target(
    potential: Potential,
    max_tokens: int,
    *,
    condition: Potential | None = None,
    max_sequences: int = 100_000,
    chunk: int = 64,
) -> ExactTarget:
    """`log Z` and the posterior of `t = potential · condition` over the sequences of at
    most `max_tokens - 1` tokens: the target of SMC with this `max_tokens`.

    Each context `x` of positive weight is visited once: it ends with weight
    `t.prefix(x) + t.logw_next(x)[EOS]` and, below `max_tokens - 1` tokens, extends by
    every token of finite `t.logw_next(x)`.

    Args:
        potential: the target, or its first factor (e.g. a `PromptedLLM`).
        max_tokens: as in `SMC(...)(..., max_tokens=...)`, EOS included.
        condition: optional second factor (e.g. a coerced constraint; its vocabulary
            may be a subset of the potential's, as AWRS allows).
        max_sequences: the most contexts visited.
        chunk: contexts per batched `logw_next` call.

    Raises:
        SequenceLimitExceeded: more than `max_sequences` contexts would be visited.
        ValueError: `max_tokens` or `max_sequences` not an integer ≥ 1.
    """
    _check(max_tokens, max_sequences)
    target = potential
    if condition is not None:
        with warnings.catch_warnings():  # a subset vocabulary is intended here
            warnings.simplefilter("ignore")
            target = potential * condition
    vocab_eos = target.vocab_eos
    eos = len(vocab_eos) - 1
    start = float(fold_nan(np.array([await target.prefix([])]))[0])
    level = [((), start)] if start > NEG_INF else []
    ends: dict[tuple, float] = {}
    visited = 0
    while level:
        if visited + len(level) > max_sequences:
            raise _over(max_sequences, max_tokens)
        visited += len(level)
        deeper = []
        for at in range(0, len(level), chunk):
            part = level[at : at + chunk]
            rows = await target.batch_logw_next([list(x) for x, _ in part])
            block = fold_nan(np.asarray(to_host(stack([r.weights for r in rows])), dtype=np.float64))
            for (x, logw), row in zip(part, block):
                if row[eos] > NEG_INF:
                    ends[x] = logw + float(row[eos])
                if len(x) < max_tokens - 1:
                    deeper += [(x + (vocab_eos[i],), logw + float(row[i])) for i in np.flatnonzero(row[:eos] > NEG_INF)]
        level = deeper
    return _exact(ends, visited)


async def sampler_target(
    sampler: Any,
    max_tokens: int,
    *,
    budget_aware: bool = True,
    max_sequences: int = 10_000,
    max_paths: int = 100_000,
) -> ExactTarget:
    """What one particle of `sampler.smc(..., max_tokens=max_tokens)` estimates, exactly.

    With `w(x)` the product of the sampler's weights along `x` (the forced EOS's
    `logw_eos` after `max_tokens - 1` tokens), `E[w(x) · [x = s]]` summed over every
    random path of every step: `log_z = log E[Ẑ]` and `posterior[s] = E[w · [x = s]] /
    E[Ẑ]`. A properly weighted sampler gives `enumerate_target`'s values.

    Args:
        sampler: a token sampler honouring the `draw` contract of `enumerate_sampler`.
        max_tokens: as in SMC.
        budget_aware: sample under the run's token budget, as SMC does by default
            (`genlm.control.sampler.budget`).
        max_sequences: the most contexts visited.
        max_paths: the most random paths of one step.

    Raises:
        SequenceLimitExceeded: more than `max_sequences` contexts would be visited.
        PathLimitExceeded: a step with more than `max_paths` random paths.
    """
    _check(max_tokens, max_sequences)
    eos = sampler.target.eos
    ends: dict[tuple, list[float]] = {}
    visited = 0

    async def visit(x: tuple, logw: float) -> None:
        nonlocal visited
        visited += 1
        if visited > max_sequences:
            raise _over(max_sequences, max_tokens)
        if len(x) >= max_tokens - 1:
            last = float(await sampler.logw_eos(list(x)))
            if last > NEG_INF:
                ends.setdefault(x, []).append(logw + last)
            return
        with using_horizon(max_tokens if budget_aware else None):
            steps = await enumerate_sampler(sampler, list(x), max_paths=max_paths)
        for token, w in steps.items():
            if w == NEG_INF or math.isnan(w):
                continue
            if token == eos:
                ends.setdefault(x, []).append(logw + w)
            else:
                await visit(x + (token,), logw + w)

    start = float(await sampler.start_weight())
    if start > NEG_INF:
        await visit((), start)
    return _exact({x: float(np.logaddexp.reduce(v)) for x, v in ends.items()}, visited)


__all__ = ["ExactTarget", "SequenceLimitExceeded", "enumerate_target", "sampler_target", "text_of"]
