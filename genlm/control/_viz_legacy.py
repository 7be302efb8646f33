"""Run records in genlm-control 0.4.1's format, read for display.

0.4.1 wrote a record as a JSON list of steps, `{"step", "mode", "particles",
"ancestors"?}`, with `mode` one of `init`, `smc_step`, `resample`, and each particle as
`{"contents" | "contents_incr", "logweight", "weight_incr"}`: the context as its
tokens' escaped texts joined by `|` (a space written `␣`, the end marker `EOS`),
either whole (`contents`) or as what the step appended (`contents_incr`, rebuilt
along the ancestor chain, as 0.4.1's viewer does). Log weights are numbers or strings
(`"-Infinity"`), `null` meaning `-inf`.

`legacy_record(data)` turns such a list into a `RunRecord`: every `init`/`smc_step`
entry is a step; a `resample` entry gives the preceding step its ancestors. 0.4.1
did not record the run's settings; they read as unknown in `LEGACY_NOTE`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from genlm.control.smc.record import RecordError, RunRecord, StepRecord
from genlm.control.smc.resampling import ess, log_mean_exp

LEGACY_NOTE = "a genlm-control 0.4.1 record (the run's settings were not recorded)"
_MODES = ("init", "smc_step", "resample")


def _logw(value: Any, name: str) -> float:
    if value is None:
        return -math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise RecordError(name, f"must be a number or a numeric string, got {type(value).__name__}")
    try:
        x = float(value)
    except ValueError:
        raise RecordError(name, f"must be a number, got {str(value)[:40]!r}") from None
    if math.isnan(x) or x == math.inf:
        raise RecordError(name, f"must be finite or -inf, got {value!r}")
    return x


def _units(text: str) -> list[str]:
    """A context's tokens from the `|`-joined escaped texts."""
    if text == "":
        return []
    return ["<EOS>" if u == "EOS" else u.replace("␣", " ") for u in text.split("|")]


def _particles(entry: dict, i: int, parents: list[str] | None) -> tuple[list[str], list[float]]:
    particles = entry.get("particles")
    if not isinstance(particles, list) or not particles:
        raise RecordError(f"[{i}].particles", "must be a non-empty list")
    texts, logws = [], []
    for j, p in enumerate(particles):
        name = f"[{i}].particles[{j}]"
        if not isinstance(p, dict):
            raise RecordError(name, "must be a JSON object")
        if "contents" in p:
            text = p["contents"]
        elif "contents_incr" in p:
            inherited = parents[j] if parents is not None and j < len(parents) else ""
            incr = p["contents_incr"]
            text = f"{inherited}|{incr}" if inherited and incr else inherited + (incr if isinstance(incr, str) else "")
            if not isinstance(incr, str):
                raise RecordError(f"{name}.contents_incr", "must be a str")
        else:
            raise RecordError(name, "has neither contents nor contents_incr")
        if not isinstance(text, str):
            raise RecordError(f"{name}.contents", "must be a str")
        texts.append(text)
        logws.append(_logw(p.get("logweight"), f"{name}.logweight"))
    return texts, logws


def legacy_record(data: Any) -> RunRecord:
    """The `RunRecord` of a 0.4.1 record (a JSON list of steps).

    Raises:
        RecordError (a ValueError): naming the first entry or field that is malformed.
    """
    if not isinstance(data, list) or not data:
        raise RecordError("(the record)", "a 0.4.1 record is a non-empty list of steps")
    steps: list[dict] = []
    texts: list[str] | None = None
    for i, entry in enumerate(data):
        if not isinstance(entry, dict) or entry.get("mode") not in _MODES:
            raise RecordError(f"[{i}].mode", f"must be one of {', '.join(_MODES)}")
        if entry["mode"] == "resample":
            ancestors = entry.get("ancestors")
            if not steps or texts is None or not isinstance(ancestors, list) or len(ancestors) != len(texts):
                raise RecordError(f"[{i}].ancestors", "must follow a step and name one ancestor per particle")
            steps[-1]["ancestors"] = ancestors
            parents = [texts[a] if isinstance(a, int) and 0 <= a < len(texts) else "" for a in ancestors]
            texts, _ = _particles(entry, i, parents)
            continue
        texts, logws = _particles(entry, i, texts)
        contexts = [_units(t) for t in texts]
        done = [bool(c) and c[-1] == "<EOS>" for c in contexts]
        steps.append(dict(step=len(steps), contexts=contexts, log_weights=logws, done=done))
    n = len(steps[0]["contexts"]) if steps else len(texts or [])
    records = []
    for k, s in enumerate(steps):
        if len(s["contexts"]) != n:
            raise RecordError(f"step {k}", f"has {len(s['contexts'])} particles, the first has {n}")
        records.append(StepRecord(**s, ess=ess(np.asarray(s["log_weights"], dtype=np.float64))))
    final_logws = steps[-1]["log_weights"] if steps else [0.0] * n
    final = steps[-1]["contexts"] if steps else [[] for _ in range(n)]
    return RunRecord(
        n_particles=n, ess_threshold=0.0, max_tokens=None, resampling_method="unknown", seed=None,
        steps=records, final_contexts=final, final_log_weights=final_logws,
        log_ml=float(log_mean_exp(np.asarray(final_logws, dtype=np.float64))),
    )


__all__ = ["legacy_record", "LEGACY_NOTE"]
