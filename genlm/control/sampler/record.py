"""Typed records of an SMC run, written as JSON after the run and read back for display.

A `RunRecord` holds the run's settings and one `StepRecord` per step: the
particles' contexts (as token texts), their log weights after the step (before
resampling), which particles are done, the ESS, and the resampling ancestors when
the step resampled. JSON has no infinities, so a `-inf` log weight is written as
`null` and read back as `-inf`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from genlm.control.constant import EndOfSequence
from genlm.control.sampler.resampling import ess

if TYPE_CHECKING:  # pragma: no cover
    from genlm.control.sampler.smc import Population

FORMAT = "genlm-control/smc-record/1"


def token_text(token: Any) -> str:
    """A readable text of one token: bytes decoded as UTF-8 (bad bytes escaped),
    end markers by name, units as the text of their tokens."""
    if isinstance(token, (bytes, bytearray)):
        return bytes(token).decode("utf-8", errors="backslashreplace")
    if isinstance(token, EndOfSequence):
        return f"<{token}>"
    if isinstance(token, (list, tuple)):
        return "".join(token_text(t) for t in token)
    return str(token)


def context_text(context: list) -> list[str]:
    """The text of each unit of a context."""
    return [token_text(t) for t in context]


def _dump_logws(xs) -> list[float | None]:
    return [None if x == -math.inf else float(x) for x in xs]


def _load_logws(xs) -> list[float]:
    return [-math.inf if x is None else float(x) for x in xs]


@dataclass(frozen=True)
class StepRecord:
    """The population after one step.

    Attributes:
        step: the step index, from 0.
        contexts: each particle's units as text.
        log_weights: each particle's log weight after the step, before resampling.
        done: whether each particle has finished.
        ess: the effective sample size of `log_weights`.
        ancestors: the slot each particle was copied from, when the step resampled.
    """

    step: int
    contexts: list[list[str]]
    log_weights: list[float]
    done: list[bool]
    ess: float
    ancestors: list[int] | None = None

    @property
    def resampled(self) -> bool:
        return self.ancestors is not None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["log_weights"] = _dump_logws(self.log_weights)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "StepRecord":
        return cls(
            step=int(d["step"]),
            contexts=[list(c) for c in d["contexts"]],
            log_weights=_load_logws(d["log_weights"]),
            done=[bool(x) for x in d["done"]],
            ess=float(d["ess"]),
            ancestors=None if d.get("ancestors") is None else [int(a) for a in d["ancestors"]],
        )


@dataclass(frozen=True)
class RunRecord:
    """A whole run: settings, every step, and the final population.

    Attributes:
        n_particles, ess_threshold, max_tokens, resampling_method, seed: the settings.
        steps: one record per step.
        final_contexts, final_log_weights: the returned population.
        log_ml: the estimate of `log Z`.
    """

    n_particles: int
    ess_threshold: float
    max_tokens: float | None
    resampling_method: str
    seed: int | None
    steps: list[StepRecord] = field(default_factory=list)
    final_contexts: list[list[str]] = field(default_factory=list)
    final_log_weights: list[float] = field(default_factory=list)
    log_ml: float = -math.inf

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "n_particles": self.n_particles,
            "ess_threshold": self.ess_threshold,
            "max_tokens": self.max_tokens,
            "resampling_method": self.resampling_method,
            "seed": self.seed,
            "steps": [s.to_dict() for s in self.steps],
            "final_contexts": self.final_contexts,
            "final_log_weights": _dump_logws(self.final_log_weights),
            "log_ml": None if self.log_ml == -math.inf else self.log_ml,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "RunRecord":
        if d.get("format") != FORMAT:
            raise ValueError(f"not an SMC record (format {d.get('format')!r}, expected {FORMAT!r})")
        return cls(
            n_particles=int(d["n_particles"]),
            ess_threshold=float(d["ess_threshold"]),
            max_tokens=d["max_tokens"],
            resampling_method=str(d["resampling_method"]),
            seed=d["seed"],
            steps=[StepRecord.from_dict(s) for s in d["steps"]],
            final_contexts=[list(c) for c in d["final_contexts"]],
            final_log_weights=_load_logws(d["final_log_weights"]),
            log_ml=-math.inf if d["log_ml"] is None else float(d["log_ml"]),
        )

    def to_json(self, path: str | Path) -> None:
        """Write the record to `path` as strict JSON."""
        Path(path).write_text(json.dumps(self.to_dict(), allow_nan=False), encoding="utf-8")

    @classmethod
    def from_json(cls, path: str | Path) -> "RunRecord":
        """Read a record written by `to_json`.

        Raises:
            ValueError: if the file is not an SMC record.
        """
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


class Recorder:
    """Collects `StepRecord`s during a run (in memory; the file is written after)."""

    def __init__(self, n_particles, ess_threshold, max_tokens, resampling_method, seed):
        self._settings = dict(
            n_particles=int(n_particles),
            ess_threshold=float(ess_threshold),
            max_tokens=None if math.isinf(max_tokens) else int(max_tokens),
            resampling_method=resampling_method,
            seed=None if seed is None else int(seed),
        )
        self._steps: list[StepRecord] = []

    def add(self, step: int, pop: "Population", ancestors: np.ndarray | None) -> None:
        self._steps.append(
            StepRecord(
                step=step,
                contexts=[context_text(c) for c in pop.contexts],
                log_weights=pop.log_weights.tolist(),
                done=pop.done.tolist(),
                ess=ess(pop.log_weights),
                ancestors=None if ancestors is None else ancestors.tolist(),
            )
        )

    def finish(self, pop: "Population") -> RunRecord:
        return RunRecord(
            **self._settings,
            steps=self._steps,
            final_contexts=[context_text(c) for c in pop.contexts],
            final_log_weights=pop.log_weights.tolist(),
            log_ml=pop.log_ml,
        )


__all__ = ["StepRecord", "RunRecord", "Recorder", "token_text", "context_text", "FORMAT"]
