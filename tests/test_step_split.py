"""`benchmarks/step_split.py`: its clocks sit on the functions a step really calls.

The split names library functions by module and attribute; when one of them moves or
stops being called, its clock reads zero and the table would silently blame "rest".
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def step_split():
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        yield importlib.import_module("step_split")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def _originals(step_split) -> list:
    out = []
    for _, module, name in step_split.CLOCKED:
        owner = importlib.import_module(module)
        *path, attr = name.split(".")
        for part in path:
            owner = getattr(owner, part)
        out.append(inspect.getattr_static(owner, attr))
    return out


def test_every_clock_fires_on_the_embedded_model_and_is_removed_after(step_split):
    before = _originals(step_split)
    model, jobs = step_split.embedded(["unconstrained", "regex"])
    rows = {}
    for label, llm, sampler, n in jobs:
        rows[label.split(" ")[0]] = asyncio.run(step_split.split(model, label, llm, sampler, n, tokens=4, repeats=2))
    assert _originals(step_split) == before  # every wrapper taken off again
    for name, row in rows.items():
        parts = row["parts"]
        for part in ("forward", "log-softmax", "backend bookkeeping", "layout", "draw"):
            assert parts[part] > 0, (name, part)
        assert parts["rest"] >= 0, (name, parts)  # no time counted twice
        assert abs(sum(parts.values()) - row["smc"]) < 1e-9
        assert 0 < row["floor forward"] < row["floor"]
    # only the constrained run asks the compiled engine for masks
    assert rows["regex"]["parts"]["constraint mask"] > 0
    assert rows["unconstrained"]["parts"]["constraint mask"] == 0


def test_the_particle_fit_recovers_a_line_and_reports_each_part(step_split):
    ns = [1, 4, 16, 64]
    fixed, per = step_split.fit(ns, [0.5 + 0.03 * n for n in ns])
    assert fixed == pytest.approx(0.5) and per == pytest.approx(0.03)
    parts = {"forward": 1.0, "rest": 0.0}
    rows = [{"floor": 1.0 + 0.02 * n, "smc": 1.6 + 0.05 * n, "parts": dict(parts, rest=0.1 * n)} for n in ns]
    text = step_split.scaling_table("w", ns, rows)
    lines = {line.split(" | ")[0].strip("| "): line.split(" | ")[-2:] for line in text.splitlines()[3:]}
    assert lines["SMC - floor"] == ["0.60", "30.0 |"]  # 0.6 ms fixed, 0.03 ms = 30 µs per particle
    assert lines["rest"] == ["0.00", "100.0 |"]
    assert lines["forward"] == ["1.00", "0.0 |"]
