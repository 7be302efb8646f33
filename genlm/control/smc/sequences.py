"""`Sequences`, the weighted result of an SMC run."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from genlm.control.constant import EndOfSequence
from genlm.control.sampler.unit import flatten_units
from genlm.control.smc.deaths import Deaths
from genlm.control.smc.record import RunRecord, token_text
from genlm.control.smc.resampling import ess, log_mean_exp, normalized_weights
from genlm.control.weights import NEG_INF, fold_nan, logsumexp

if TYPE_CHECKING:
    from genlm.grammar import Float


class SequencesLengthError(ValueError, AssertionError):
    """`Sequences` given a different number of contexts and log weights: a
    `ValueError` (ours) and an `AssertionError` (what 0.4.1's check raised)."""


@dataclass
class Sequences:
    """Weighted sequences returned by SMC.

    Args:
        contexts: the sequences (lists of tokens, or of units).
        log_weights: their log importance weights (NaN is read as `-inf`).
        record: the run record, when the run wrote one.
        deaths: how many sequences have weight zero, by cause (`Deaths`: `max_tokens`,
            `dead_prefix`, `nan`, `critic`); SMC fills it, all zeros otherwise.
        ess_before_resample: the ESS the run's last resampling saw; SMC fills it,
            `ess` otherwise.

    Attributes:
        size: number of sequences.
        log_total: `log Σ exp(logw)`.
        log_ml: `log(Σ exp(logw) / size)`, the estimate of `log Z`.
        log_normalized_weights: `logw - log_total`.
        log_ess, ess: the effective sample size `1 / Σ W²` of `log_weights` and its
            log (as in 0.4.1). Resampling sets every weight to the mean, so after a
            run that resampled near its end `ess` is close to `size` however few
            particles the population descends from.
        ess_before_resample: `1 / Σ W²` of the weights at the run's last resampling,
            before it resampled: the run's diagnostic (near 1, one particle carried
            the posterior). It is `ess` when the run never resampled (and for
            sequences built by hand). After it, every step's ESS stayed at or above
            `ess_threshold · size`, or another resampling would have followed.
        record: the run record when the run wrote one.

    Raises:
        ValueError: different numbers of contexts and log weights (an
            `AssertionError` too, as 0.4.1 raised).
    """

    contexts: list
    log_weights: Any
    record: RunRecord | None = field(default=None, repr=False, compare=False)
    deaths: Deaths = field(default_factory=Deaths, repr=False, compare=False)
    ess_before_resample: float | None = field(default=None, compare=False)

    def __post_init__(self):
        self.contexts = list(self.contexts)
        self.log_weights = fold_nan(np.asarray(self.log_weights, dtype=np.float64).reshape(-1))
        if len(self.contexts) != len(self.log_weights):
            raise SequencesLengthError(
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
        if self.ess_before_resample is None:
            self.ess_before_resample = self.ess
        else:
            self.ess_before_resample = float(self.ess_before_resample)

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
        Texts of weight zero stay in the chart with value 0.0, as in genlm-control 0.4.1
        (harnesses count them); `finished_texts()` gives only the texts with mass."""
        from genlm.grammar import Float

        chart = Float.chart()
        for text, w in self._text_weights().items():
            chart[text] += w
        return _normalized(chart)

    def _text_weights(self) -> dict[str, float]:
        """`W_i` summed over the decoded text of each finished particle (zeros kept)."""
        out: dict[str, float] = {}
        for ctx, w in zip(self.contexts, self.normalized_weights):
            tokens = flatten_units(ctx)
            if tokens and isinstance(tokens[-1], EndOfSequence):
                text = _decode(tokens[:-1])
                if text is not None:
                    out[text] = out.get(text, 0.0) + float(w)
        return out

    def finished_texts(self) -> list[tuple[str, float]]:
        """The texts of `decoded_posterior` with positive mass, heaviest first, as
        `(text, probability)` pairs (renormalized over the finished texts); the
        particles that carry no mass are left out (see `n_without_mass`)."""
        weights = {t: w for t, w in self._text_weights().items() if w > 0}
        total = sum(weights.values())
        return sorted(((t, w / total) for t, w in weights.items()), key=lambda kv: -kv[1])

    @property
    def n_without_mass(self) -> int:
        """How many particles carry no mass in `finished_texts()`: weight zero,
        unfinished (no EOS), or tokens that do not decode to text."""
        live = 0
        for ctx, w in zip(self.contexts, self.normalized_weights):
            tokens = flatten_units(ctx)
            finished = bool(tokens) and isinstance(tokens[-1], EndOfSequence)
            live += bool(w > 0 and finished and _decode(tokens[:-1]) is not None)
        return self.size - live

    def show(self) -> None:
        """Print the particles heaviest first: log weight, then the decoded text (bytes
        as UTF-8 with bad bytes escaped, units joined, `<EOS>` marking a finished one)."""
        for i in np.argsort(-self.log_weights, kind="stable"):
            print(f"{self.log_weights[i]:10.4f}  {_shown_text(self.contexts[i])}")

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


def _shown_text(context: list) -> str:
    """The text of a context: bytes joined before decoding (a character may span
    tokens), `<EOS>` after the quoted text of a finished one."""
    tokens = flatten_units(context)
    end = "<EOS>" if tokens and isinstance(tokens[-1], EndOfSequence) else ""
    body = tokens[:-1] if end else tokens
    if all(isinstance(t, (bytes, bytearray)) for t in body):
        return repr(b"".join(body).decode("utf-8", errors="backslashreplace")) + end
    return repr("".join(token_text(t) for t in body)) + end


def _normalized(chart: Float.chart) -> Float.chart:
    if not chart:
        return chart
    return chart.normalize().sort_descending()


__all__ = ["Sequences"]
