"""`SMC`, the front door of the algorithm, and `Sequences`, the weighted result."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from genlm.control._args import positive_int
from genlm.control.constant import EndOfSequence
from genlm.control.potential.base import Potential
from genlm.control.sampler.record import RunRecord
from genlm.control.sampler.record_file import check_output_path
from genlm.control.sampler.resampling import ess, get_resampler, log_mean_exp, normalized_weights
from genlm.control.sampler.smc import SequenceModel, smc_standard
from genlm.control.sampler.token import TokenSampler
from genlm.control.typing import Sequence as SequenceType
from genlm.control.util import flatten_units
from genlm.control.weights import NEG_INF, fold_nan, logsumexp

if TYPE_CHECKING:
    from genlm.grammar import Float


class SMC:
    """Sequential Monte Carlo over sequences grown by a unit sampler.

    Each step extends every live particle by one unit from `unit_sampler`
    (multiplying in its properly weighted importance weight) and, with a
    `critic`, replaces the particle's twist by `critic.score` of the new context;
    the population is resampled when its ESS falls below `ess_threshold · n`.
    Particles stop at EOS, at `max_tokens` (EOS forced with the `logw_eos`
    correction) or when `terminate_when` holds. The returned sequences are
    properly weighted for `target.complete(x) · critic.complete(x)` over sequences
    of at most `max_tokens` units (EOS included), and `log_ml` estimates the log
    of its normalizing constant, unbiased on the exp scale.

    Args:
        unit_sampler: a `TokenSampler` (or a multi-token unit sampler).
        critic: optional potential over the sampler's tokens.
        autobatch: serve the particles' concurrent critic calls as batches.

    Raises:
        TypeError: if `unit_sampler` is not a `TokenSampler` or `critic` not a `Potential`.
        ValueError: if the critic's token type differs from the sampler's.
    """

    def __init__(self, unit_sampler: TokenSampler, critic: Potential | None = None, autobatch: bool = True):
        if not isinstance(unit_sampler, TokenSampler):
            raise TypeError(f"unit_sampler must be a TokenSampler, got {type(unit_sampler).__name__}")
        if critic is not None:
            if not isinstance(critic, Potential):
                raise TypeError(f"critic must be a Potential, got {type(critic).__name__}")
            _check_token_types(unit_sampler, critic)
            if autobatch:
                critic = critic.to_autobatched()
        self.unit_sampler = unit_sampler
        self.critic = critic

    async def __call__(
        self,
        n_particles: int,
        ess_threshold: float,
        max_tokens: int,
        *,
        verbosity: int = 0,
        json_path: str | None = None,
        resampling_method: str = "multinomial",
        terminate_when: Callable[[list], bool] | None = None,
        seed: int | None = None,
    ) -> "Sequences":
        """Run SMC and return the weighted sequences.

        Args:
            n_particles: number of particles.
            ess_threshold: resample when `ess < ess_threshold · n_particles`
                (0 never resamples, 1 resamples at every step).
            max_tokens: bound on every sequence's length, EOS included.
            verbosity: 1 prints the particles after each step.
            json_path: write a record of the run there (see `InferenceVisualizer`). The
                path is checked before sampling (its folder exists and is writable; it
                is not a directory, a symbolic link or a special file). If writing still
                fails after the run, a `RecordNotWrittenWarning` names the cause and the
                result is returned all the same, its record in `sequences.record`.
            resampling_method: 'multinomial', 'stratified', 'systematic' or 'residual'.
            terminate_when: a plain (not async) function of a particle's context; the
                particle stops when it returns true.
            seed: makes the run reproducible bit for bit.

        Raises:
            ValueError: for a bad argument, or a `+inf` log weight during the run.
            TypeError: a bool where a number is expected; a `terminate_when` that is
                not a plain function.
        """
        positive_int("max_tokens", max_tokens)
        if isinstance(verbosity, bool) or not isinstance(verbosity, (int, np.integer)):
            raise TypeError(f"verbosity must be an integer, got {verbosity!r}")
        if json_path is not None:
            check_output_path(json_path)
        get_resampler(resampling_method)
        model = SequenceModel(self.unit_sampler, self.critic, int(max_tokens), terminate_when)
        pop = await smc_standard(
            model,
            n_particles,
            ess_threshold,
            json_path,
            resampling_method=resampling_method,
            seed=seed,
            verbosity=verbosity,
        )
        return Sequences(pop.contexts, pop.log_weights, record=pop.record)

    async def cleanup(self) -> None:
        """Release the sampler's and the critic's resources."""
        self.unit_sampler.cleanup()
        if self.critic is not None:
            self.critic.cleanup()


def _check_token_types(unit_sampler: TokenSampler, critic: Potential) -> None:
    ours, theirs = unit_sampler.token_type, critic.token_type
    if ours == theirs:
        _check_critic_vocabulary(unit_sampler.target, critic)
        return
    if isinstance(ours, SequenceType) and ours.element_type == theirs:
        return
    hint = ""
    if isinstance(theirs, SequenceType) and theirs.element_type == ours:
        hint = " (coerce the critic to the sampler's tokens with `critic.coerce(...)`)"
    raise ValueError(
        f"the critic's token type {theirs!r} differs from the sampler's {ours!r}{hint}"
    )


def _check_critic_vocabulary(target: Potential, critic: Potential) -> None:
    """The critic scores the contexts the sampler produces: a critic sharing no token
    with the sampler is an error; one lacking some tokens gets a warning (a coerced
    critic may be pruned yet still score every context through its map)."""
    if target.tables is critic.tables:
        return
    lookup = critic.lookup
    missing = [x for x in target.vocab if x not in lookup]
    if len(missing) == len(target.vocab):
        raise ValueError(
            f"the critic's vocabulary shares no token with the sampler's (e.g. {missing[:3]!r} "
            "are missing); build the critic over the sampler's vocabulary or coerce it"
        )
    if missing:
        warnings.warn(
            f"the critic's vocabulary lacks {len(missing)} of the sampler's tokens "
            f"(e.g. {missing[:3]!r}); it must still score contexts containing them",
            stacklevel=4,
        )


@dataclass
class Sequences:
    """Weighted sequences returned by SMC.

    Args:
        contexts: the sequences (lists of tokens, or of units).
        log_weights: their log importance weights (NaN is read as `-inf`).

    Attributes:
        size: number of sequences.
        log_total: `log Σ exp(logw)`.
        log_ml: `log(Σ exp(logw) / size)`, the estimate of `log Z`.
        log_normalized_weights: `logw - log_total`.
        log_ess, ess: the effective sample size `1 / Σ W²` and its log.
        record: the run record when the run wrote one.
    """

    contexts: list
    log_weights: Any
    record: RunRecord | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        self.contexts = list(self.contexts)
        self.log_weights = fold_nan(np.asarray(self.log_weights, dtype=np.float64).reshape(-1))
        if len(self.contexts) != len(self.log_weights):
            raise ValueError(
                f"{len(self.contexts)} contexts but {len(self.log_weights)} log weights"
            )
        self.size = len(self.contexts)
        self.log_total = logsumexp(self.log_weights) if self.size else NEG_INF
        self.log_ml = log_mean_exp(self.log_weights)
        if self.log_total == NEG_INF:
            self.log_normalized_weights = np.full(self.size, NEG_INF)
        else:
            self.log_normalized_weights = self.log_weights - self.log_total
        self.ess = ess(self.log_weights) if self.size else 0.0
        self.log_ess = math.log(self.ess) if self.ess > 0 else NEG_INF

    @property
    def normalized_weights(self) -> np.ndarray:
        """`W_i = exp(logw_i) / Σ exp(logw)` (all zeros when every weight is `-inf`)."""
        return normalized_weights(self.log_weights)

    @cached_property
    def posterior(self) -> Float.chart:
        """Normalized weights summed over identical sequences (keyed by the token tuple,
        EOS included; units are flattened), largest first. Sequences of weight zero
        stay in the chart with value 0.0, as in genlm-control 0.4.1."""
        # imported on use: importing genlm.grammar takes seconds, inside a run's first step
        from genlm.grammar import Float

        chart = Float.chart()
        for ctx, w in zip(self.contexts, self.normalized_weights):
            chart[tuple(flatten_units(ctx))] += float(w)
        return _normalized(chart)

    @cached_property
    def decoded_posterior(self) -> Float.chart:
        """Posterior over the text of the finished sequences: those ending in EOS whose
        tokens decode (bytes as UTF-8, or strings); weights renormalized over them.
        Texts of weight zero stay in the chart with value 0.0, as in genlm-control 0.4.1."""
        from genlm.grammar import Float

        chart = Float.chart()
        for ctx, w in zip(self.contexts, self.normalized_weights):
            tokens = flatten_units(ctx)
            if tokens and isinstance(tokens[-1], EndOfSequence):
                text = _decode(tokens[:-1])
                if text is not None:
                    chart[text] += float(w)
        return _normalized(chart)

    def show(self) -> None:
        """Print the sequences with their log weights, heaviest first."""
        for i in np.argsort(-self.log_weights, kind="stable"):
            print(f"{self.log_weights[i]:10.4f}  {self.contexts[i]!r}")

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[tuple[list, float]]:
        return iter(zip(self.contexts, self.log_weights.tolist()))

    def __getitem__(self, i: int) -> tuple[list, float]:
        return self.contexts[i], float(self.log_weights[i])

    def __str__(self) -> str:
        return str(self.decoded_posterior)

    def _repr_html_(self) -> str:
        return self.decoded_posterior._repr_html_()


def _decode(tokens: list) -> str | None:
    if all(isinstance(t, (bytes, bytearray)) for t in tokens):
        try:
            return b"".join(tokens).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if all(isinstance(t, str) for t in tokens):
        return "".join(tokens)
    return None


def _normalized(chart: Float.chart) -> Float.chart:
    if not chart:
        return chart
    return chart.normalize().sort_descending()


__all__ = ["SMC", "Sequences"]
