"""Typed records of an SMC run, written as JSON after the run and read back for display.

A `RunRecord` holds the run's settings and one `StepRecord` per step: the
particles' contexts (as token texts), their log weights after the step (before
resampling), which particles are done, the ESS, and the resampling ancestors when
the step resampled. JSON has no infinities, so a `-inf` log weight is written as
`null` and read back as `-inf`.

Records are checked field by field when built and when read: a record file is
input like any other, and a field of the wrong type or out of range is a
`ValueError` (a `RecordError`) naming the field, e.g. `steps[2].contexts[0][1]`.
Files are written by `genlm.control.smc.record_file` (never through a link,
never half-written).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from genlm.control._args import is_int, is_real
from genlm.control.constant import EndOfSequence
from genlm.control.smc.record_file import read_text_file, write_text_atomically
from genlm.control.smc.resampling import ess

if TYPE_CHECKING:  # pragma: no cover
    from genlm.control.smc.particle import Population
    from genlm.control.smc.state import PopulationState

FORMAT = "genlm-control/smc-record/1"


class RecordError(ValueError):
    """A record field of the wrong type or out of range.

    Attributes:
        field: the field's path in the record, e.g. `steps[2].log_weights[0]`.
        problem: what is wrong with it.
    """

    def __init__(self, field: str, problem: str):
        self.field, self.problem = field, problem
        super().__init__(f"SMC record field {field}: {problem}")

    def within(self, prefix: str) -> "RecordError":
        """The same error for a field nested under `prefix`."""
        return RecordError(f"{prefix}.{self.field}", self.problem)


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'…' if len(text) > 40 else ''}"


def _check_int(value: Any, name: str, lo: int = 0, none: bool = False) -> None:
    if value is None and none:
        return
    if not is_int(value) or value < lo:
        raise RecordError(name, f"must be an integer ≥ {lo}{' or null' if none else ''}, got {_shown(value)}")


def _check_real(value: Any, name: str, lo: float = -math.inf, hi: float = math.inf, neg_inf: bool = False) -> None:
    """A real number in [lo, hi], finite (or `-inf` when `neg_inf`)."""
    ok = is_real(value)
    if ok and not (neg_inf and value == -math.inf):
        ok = math.isfinite(value) and lo <= value <= hi
    if not ok:
        extra = " or -inf (null)" if neg_inf else ""
        raise RecordError(name, f"must be a finite number in [{lo}, {hi}]{extra}, got {_shown(value)}")


def _check_list(value: Any, name: str, length: int | None = None) -> None:
    if not isinstance(value, (list, tuple)):
        raise RecordError(name, f"must be a list, got {_shown(value)}")
    if length is not None and len(value) != length:
        raise RecordError(name, f"must have {length} entries (one per particle), got {len(value)}")


def _check_contexts(value: Any, name: str, length: int | None = None) -> None:
    """A list of contexts, each a list of unit texts (str)."""
    _check_list(value, name, length)
    for i, ctx in enumerate(value):
        _check_list(ctx, f"{name}[{i}]")
        for j, unit in enumerate(ctx):
            if not isinstance(unit, str):
                raise RecordError(f"{name}[{i}][{j}]", f"must be a str, got {_shown(unit)}")


def _check_log_weights(value: Any, name: str, length: int) -> None:
    _check_list(value, name, length)
    for i, x in enumerate(value):
        _check_real(x, f"{name}[{i}]", neg_inf=True)


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


def _load_logws(xs: Any, name: str) -> list[float]:
    """JSON log weights: numbers, with `null` for `-inf`."""
    _check_list(xs, name)
    return [-math.inf if x is None else x for x in xs]


def _get(d: dict, key: str) -> Any:
    if key not in d:
        raise RecordError(key, "is missing")
    return d[key]


def _as_dict(d: Any, name: str) -> dict:
    if not isinstance(d, dict):
        raise RecordError(name, f"must be a JSON object, got {_shown(d)}")
    return d


@dataclass(frozen=True)
class StepRecord:
    """The population after one step.

    Attributes:
        step: the step index, from 0.
        contexts: each particle's units as text.
        log_weights: each particle's log weight after the step, before resampling.
        done: whether each particle has finished.
        ess: the effective sample size `1 / Σ W_i²` of `log_weights` (0 when all are `-inf`).
        ancestors: the slot each particle was copied from, when the step resampled.

    Raises:
        RecordError: naming the first field of the wrong type or out of range.
    """

    step: int
    contexts: list[list[str]]
    log_weights: list[float]
    done: list[bool]
    ess: float
    ancestors: list[int] | None = None

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Check every field (lists are mutable: a renderer checks again before use).

        Raises:
            RecordError: naming the first field of the wrong type or out of range.
        """
        _check_int(self.step, "step")
        _check_contexts(self.contexts, "contexts")
        n = len(self.contexts)
        _check_log_weights(self.log_weights, "log_weights", n)
        _check_list(self.done, "done", n)
        for i, x in enumerate(self.done):
            if not isinstance(x, (bool, np.bool_)):
                raise RecordError(f"done[{i}]", f"must be true or false, got {_shown(x)}")
        _check_real(self.ess, "ess", lo=0.0, hi=float(max(n, 1)) * (1 + 1e-9))
        if self.ancestors is not None:
            _check_list(self.ancestors, "ancestors", n)
            for i, a in enumerate(self.ancestors):
                if not is_int(a) or not 0 <= a < n:
                    raise RecordError(f"ancestors[{i}]", f"must be a particle index in [0, {n}), got {_shown(a)}")

    @property
    def resampled(self) -> bool:
        return self.ancestors is not None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["log_weights"] = _dump_logws(self.log_weights)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "StepRecord":
        """A step from its JSON object.

        Raises:
            RecordError: naming the first missing, mistyped or out-of-range field.
        """
        d = _as_dict(d, "step record")
        return cls(
            step=_get(d, "step"),
            contexts=_get(d, "contexts"),
            log_weights=_load_logws(_get(d, "log_weights"), "log_weights"),
            done=_get(d, "done"),
            ess=_get(d, "ess"),
            ancestors=d.get("ancestors"),
        )


@dataclass(frozen=True)
class RunRecord:
    """A whole run: settings, every step, and the final population.

    Attributes:
        n_particles, ess_threshold, max_tokens, resampling_method, seed: the settings.
        steps: one record per step.
        final_contexts, final_log_weights: the returned population.
        log_ml: the estimate of `log Z` (finite or `-inf`).
        prompt: the text the model continued, when the run's model had one prompt.
        deaths: the final sequences of weight zero by cause (`genlm.control.smc.deaths`:
            `{"max_tokens": n, "dead_prefix": n, "nan": n, "critic": n}`), or None.

    Raises:
        RecordError: naming the first field of the wrong type or out of range
            (every step and the final population hold `n_particles` particles).
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
    prompt: str | None = None
    deaths: dict[str, int] | None = None

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Check every field, the steps' included.

        Raises:
            RecordError: naming the first field of the wrong type or out of range.
        """
        _check_int(self.n_particles, "n_particles", lo=1)
        _check_real(self.ess_threshold, "ess_threshold", lo=0.0, hi=1.0)
        _check_int(self.max_tokens, "max_tokens", lo=1, none=True)
        if not isinstance(self.resampling_method, str):
            raise RecordError("resampling_method", f"must be a str, got {_shown(self.resampling_method)}")
        _check_int(self.seed, "seed", none=True)
        _check_list(self.steps, "steps")
        for i, s in enumerate(self.steps):
            if not isinstance(s, StepRecord):
                raise RecordError(f"steps[{i}]", f"must be a StepRecord, got {_shown(s)}")
            try:
                s.validate()
            except RecordError as exc:
                raise exc.within(f"steps[{i}]") from None
            _check_list(s.contexts, f"steps[{i}].contexts", self.n_particles)
        _check_contexts(self.final_contexts, "final_contexts", self.n_particles)
        _check_log_weights(self.final_log_weights, "final_log_weights", self.n_particles)
        _check_real(self.log_ml, "log_ml", neg_inf=True)
        if self.prompt is not None and not isinstance(self.prompt, str):
            raise RecordError("prompt", f"must be a str or null, got {_shown(self.prompt)}")
        if self.deaths is not None:
            if not isinstance(self.deaths, dict):
                raise RecordError("deaths", f"must be an object or null, got {_shown(self.deaths)}")
            for cause, count in self.deaths.items():
                if not isinstance(cause, str):
                    raise RecordError("deaths", f"keys must be str, got {_shown(cause)}")
                _check_int(count, f"deaths.{cause}", lo=0)

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
        } | {  # optional fields, written when known
            k: v for k, v in (("prompt", self.prompt), ("deaths", self.deaths)) if v is not None
        }

    @classmethod
    def from_dict(cls, d: Any) -> "RunRecord":
        """A record from its JSON object.

        Raises:
            ValueError: if `d` is not an SMC record; a `RecordError` naming the first
                missing, mistyped or out-of-range field.
        """
        d = _as_dict(d, "(the record)")
        if d.get("format") != FORMAT:
            raise ValueError(f"not an SMC record (format {str(d.get('format'))[:60]!r}, expected {FORMAT!r})")
        steps = _get(d, "steps")
        _check_list(steps, "steps")
        parsed = []
        for i, s in enumerate(steps):
            try:
                parsed.append(StepRecord.from_dict(s))
            except RecordError as exc:
                raise exc.within(f"steps[{i}]") from None
        log_ml = _get(d, "log_ml")
        return cls(
            n_particles=_get(d, "n_particles"),
            ess_threshold=_get(d, "ess_threshold"),
            max_tokens=_get(d, "max_tokens"),
            resampling_method=_get(d, "resampling_method"),
            seed=_get(d, "seed"),
            steps=parsed,
            final_contexts=_get(d, "final_contexts"),
            final_log_weights=_load_logws(_get(d, "final_log_weights"), "final_log_weights"),
            log_ml=-math.inf if log_ml is None else log_ml,
            prompt=d.get("prompt"),  # absent from records written before it was kept
            deaths=d.get("deaths"),
        )

    def to_json(self, path: str | Path) -> None:
        """Write the record to `path` as strict JSON, atomically (a temporary file in
        the same folder, then `os.replace`), never through a symbolic link.

        Raises:
            TypeError, ValueError: if `path` is not a usable record path (see
                `record_file.check_output_path`).
            OSError: if writing fails.
        """
        write_text_atomically(path, json.dumps(self.to_dict(), allow_nan=False), what="json_path")

    @classmethod
    def from_json(cls, path: str | Path) -> "RunRecord":
        """Read a record written by `to_json`.

        Raises:
            FileNotFoundError: if there is no file at `path`.
            ValueError: if the file is not UTF-8 strict JSON (no NaN/Infinity, nesting
                bounded) or not an SMC record; a `RecordError` names a bad field.
        """
        return cls.from_dict(strict_json(read_text_file(path), path))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not strict JSON")


def strict_json(text: str, path: Any) -> Any:
    """The JSON value of `text` (read from `path`), refusing NaN and Infinity.

    Raises:
        ValueError: naming `path`, when `text` is not strict JSON or is nested too
            deeply for the parser.
    """
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError(f"{str(path)!r} is not an SMC record: JSON nested too deeply") from None
    except ValueError as exc:
        raise ValueError(f"{str(path)!r} is not an SMC record: not JSON ({exc})") from None


class Recorder:
    """Collects `StepRecord`s during a run (in memory; the file is written after)."""

    def __init__(self, n_particles, ess_threshold, max_tokens, resampling_method, seed, prompt=None):
        self._prompt = prompt
        self._settings = dict(
            n_particles=int(n_particles),
            ess_threshold=float(ess_threshold),
            max_tokens=None if math.isinf(max_tokens) else int(max_tokens),
            resampling_method=resampling_method,
            seed=None if seed is None else int(seed),
        )
        self._steps: list[StepRecord] = []

    def add(self, step: int, pop: "PopulationState", ancestors: np.ndarray | None) -> None:
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
            prompt=self._prompt,
            deaths=pop.deaths.as_dict(),
        )


__all__ = [
    "StepRecord",
    "RunRecord",
    "RecordError",
    "Recorder",
    "token_text",
    "context_text",
    "strict_json",
    "FORMAT",
]
