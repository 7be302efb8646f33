"""`gpu_check.py`'s report: `gpu_check.json` (everything) and `gpu_check.md` (tables)."""

from __future__ import annotations

import json
from pathlib import Path

#: The benchmark table's columns: (header, row key).
COLUMNS = [
    ("model", "model"),
    ("workload", "workload"),
    ("N", "n"),
    ("tokens", "tokens"),
    ("floor ms/step", "floor_ms_per_step"),
    ("SMC ms/step", "smc_ms_per_step"),
    ("ratio to floor", "ratio"),
    ("target", "target"),
    ("syncs/step", "syncs_per_step"),
    ("read-backs/step", "readbacks_per_step"),
    ("status", "status"),
]


def _cell(key: str, value) -> str:
    if value is None:
        return "n/a"
    if key == "ratio":
        return f"**{value:.2f}×**"
    if key == "target":
        return f"≤ {value}×"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value).replace("|", "\\|")


def markdown(report: dict) -> str:
    env, tests = report["environment"], report["gpu_tests"]
    lines = [
        f"# GPU check ({report['mode']})",
        "",
        "| " + " | ".join(env) + " |",
        "|" + "---|" * len(env),
        "| " + " | ".join(str(v) for v in env.values()) + " |",
        "",
        "## gpu-marked tests",
        "",
        "| status | passed | failed | skipped | errors |",
        "|---|---:|---:|---:|---:|",
        "| " + " | ".join(_cell("", tests.get(k)) for k in ("status", "passed", "failed", "skipped", "errors")) + " |",
        "",
    ]
    if tests.get("tail"):
        lines += ["```text", tests["tail"].strip()[-1500:], "```", ""]
    lines += _pass_lines(report["rows"])  # before the timed table, which ends the tables read by row
    lines += [
        "## SMC against the batched-decode floor",
        "",
        "| " + " | ".join(h for h, _ in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for row in report["rows"]:
        status = row.get("status", "")
        if status == "error":
            status = f"error: {row.get('error', '')}"
        cells = [_cell(k, row.get(k)) if k != "status" else _cell(k, status) for _, k in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    lines += _vllm_lines(report.get("vllm"))
    lines += _vllm_decode_lines(report.get("vllm_decode"))
    lines += ["", f"Total: {report['seconds']:.1f} s.", ""]
    return "\n".join(lines)


#: The pass table's columns: (header, row key).
PASS_COLUMNS = [
    ("model", "model"),
    ("workload", "workload"),
    ("N", "n"),
    ("passes/particle-step", "passes_per_step"),
    ("floor passes", "floor_passes_per_step"),
    ("pass ratio", "pass_ratio"),
    ("row MB/particle-step", "row_mb_per_step"),
    ("floor row MB", "floor_row_mb_per_step"),
    ("largest", "passes_by_op"),
]


def _pass_lines(rows: list[dict]) -> list[str]:
    """Passes over the vocabulary per particle and step beside the floor's, for the
    rows that were measured."""
    measured = [r for r in rows if r.get("passes_per_step") is not None]
    if not measured:
        return []
    lines = [
        "## Passes over the vocabulary per particle and step",
        "",
        "| " + " | ".join(h for h, _ in PASS_COLUMNS) + " |",
        "|" + "---|" * len(PASS_COLUMNS),
    ]
    for row in measured:
        cells = [f"{row[k]:.2f}×" if k == "pass_ratio" and row[k] is not None else _cell(k, row.get(k)) for _, k in PASS_COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def _vllm_lines(section: dict | None) -> list[str]:
    """The vLLM backend beside HF (`vllm_steps.py`), or why it was not measured."""
    if section is None:
        return []
    lines = ["", "## The vLLM backend beside HF", ""]
    if section.get("status") != "ok":
        return lines + [f"{section.get('status')}: {section.get('error', '')}".rstrip(": ")]
    from vllm_steps import table

    return lines + [table(section["rows"])]


def _vllm_decode_lines(section: dict | None) -> list[str]:
    """SMC on vLLM beside vLLM's own decode (`vllm_decode.py`), or why it was not measured."""
    if section is None:
        return []
    lines = ["", "## SMC on vLLM beside vLLM's own decode (one engine)", ""]
    if section.get("status") != "ok":
        return lines + [f"{section.get('status')}: {section.get('error', '')}".rstrip(": ")]
    from vllm_decode import table

    runner = section.get("runner")
    return lines + [f"Model runner: {runner}.", "", table(section["rows"])]


def write_report(out: Path, report: dict) -> None:
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "gpu_check.md").write_text(markdown(report))
