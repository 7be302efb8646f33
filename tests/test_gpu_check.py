"""`benchmarks/gpu_check.py --cpu-smoke` starts, builds every object and writes both
report files with the right structure (no timing is asserted, only that every
measured number is finite and positive)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


@pytest.fixture
def benchmarks(monkeypatch):
    """`benchmarks(name)`: the module `benchmarks/<name>.py`, importable (with its
    siblings) for the duration of the test only."""
    import importlib

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module
TIMED = ("floor_ms_per_step", "smc_ms_per_step", "ratio")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("gpu_check")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--cpu-smoke"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((out / "gpu_check.json").read_text())
    return report, (out / "gpu_check.md").read_text()


def test_json_has_environment_and_skipped_gpu_tests(smoke):
    report, _ = smoke
    assert report["mode"] == "cpu-smoke"
    env = report["environment"]
    assert {"torch", "transformers", "cuda", "device", "device_name"} <= set(env)
    assert env["device"] == "cpu"
    assert report["gpu_tests"]["status"].startswith("skipped")
    assert report["vllm"] == {"status": "skipped (needs CUDA and the vllm package)"}
    assert math.isfinite(report["seconds"]) and report["seconds"] > 0


def test_every_model_and_workload_is_measured(smoke):
    report, _ = smoke
    rows = report["rows"]
    assert [(r["workload"], r["n"], r["tokens"]) for r in rows] == [
        ("unconstrained", 4, 8),
        ("regex AWRS", 4, 8),
        ("regex AWRS search", 4, 8),
    ] * 2
    assert rows[0]["model"] == "embedded" and rows[3]["model"].startswith("random Llama")
    for row in rows:
        assert row["status"] == "ok", row.get("error")
        for key in TIMED:
            assert math.isfinite(row[key]) and row[key] > 0, (key, row)
        assert row["syncs_per_step"] is None  # not applicable off CUDA
        # tensor rows: one read-back per step for the draw (the search's first arrivals),
        # one for the EOS entries the default end twist prices unfinished particles
        # by, plus the EOS column at the end; a search may ask for more arrivals in a step
        most = 3 if row["workload"] != "regex AWRS search" else 5
        assert 1 <= row["readbacks_per_step"] <= most, row
    assert [r["target"] for r in rows] == [1.2, 1.5, None] * 2


def test_markdown_table_has_the_columns_and_one_line_per_row(smoke):
    report, md = smoke
    header = "| model | workload | N | tokens | floor ms/step | SMC ms/step | ratio to floor | target | syncs/step | read-backs/step | status |"
    assert header in md
    lines = md.splitlines()
    start = lines.index(header) + 2
    body = [line for line in lines[start:] if line.startswith("|")]
    assert len(body) == len(report["rows"])
    for line, row in zip(body, report["rows"]):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 11
        assert cells[2] == str(row["n"]) and cells[10] == "ok"
        assert float(cells[4]) == pytest.approx(row["floor_ms_per_step"], abs=0.006)
        assert cells[6] == f"**{row['ratio']:.2f}×**"
        assert cells[8] == "n/a"
    assert "## The vLLM backend beside HF\n\nskipped (needs CUDA and the vllm package)" in md


def test_byte_level_tokenizer_has_the_model_size_and_round_trips(benchmarks):
    _gpu_check_models = benchmarks("_gpu_check_models")
    EOS, byte_level_tokenizer = _gpu_check_models.EOS, _gpu_check_models.byte_level_tokenizer
    from genlm.backend.tokenization.vocab import decode_vocab

    tok = byte_level_tokenizer(600)
    assert len(tok) == 600 and tok.eos_token_id == 599
    byte_vocab, _ = decode_vocab(tok)
    assert [bytes(b) for b in byte_vocab[:256]] == [bytes([i]) for i in range(256)]
    assert len(set(byte_vocab[256:599])) == 343 and bytes(byte_vocab[599]) == EOS.encode()
    text = "héllo ’爨"
    assert b"".join(bytes(byte_vocab[i]) for i in tok.encode(text)) == text.encode()
    with pytest.raises(ValueError, match="at least 258"):
        byte_level_tokenizer(10)


def test_failing_part_is_recorded_and_the_report_still_written(tmp_path, benchmarks):
    report_module = benchmarks("_gpu_check_report")
    markdown, write_report = report_module.markdown, report_module.write_report

    report = {
        "mode": "cuda",
        "environment": {"torch": "x", "device": "cuda"},
        "gpu_tests": {"status": "passed", "passed": 3, "failed": 0, "skipped": 1, "errors": 0, "tail": "3 passed"},
        "rows": [
            {"model": "m", "workload": "regex AWRS", "n": 64, "tokens": 64, "target": 1.5,
             "status": "error", "error": "OutOfMemoryError: CUDA out of memory"},
        ],
        "seconds": 1.0,
    }
    write_report(tmp_path, report)
    md = (tmp_path / "gpu_check.md").read_text()
    assert json.loads((tmp_path / "gpu_check.json").read_text()) == report
    assert "| m | regex AWRS | 64 | 64 | n/a | n/a | n/a | ≤ 1.5× | n/a | n/a | error: OutOfMemoryError: CUDA out of memory |" in md
    assert "| passed | 3 | 0 | 1 | 0 |" in markdown(report)


def test_gpu_test_outcomes_are_counted_from_pytest_summary(monkeypatch, benchmarks):
    gpu_check = benchmarks("gpu_check")

    def fake_run(cmd, **kwargs):
        assert cmd[1:5] == ["-m", "pytest", "-m", "gpu"] and kwargs["timeout"] == 7.0
        out = "..F.s\nFAILED tests/x.py::t\n1 failed, 3 passed, 1 skipped, 2 errors, 900 deselected in 9.1s\n"
        return subprocess.CompletedProcess(cmd, 1, stdout=out, stderr="")

    monkeypatch.setattr(gpu_check.subprocess, "run", fake_run)
    got = gpu_check.run_gpu_tests(7.0)
    assert {k: got[k] for k in ("status", "passed", "failed", "skipped", "errors", "deselected")} == {
        "status": "exit code 1", "passed": 3, "failed": 1, "skipped": 1, "errors": 2, "deselected": 900,
    }
    assert got["tail"].endswith("in 9.1s\n")

    def timeout(cmd, **kwargs):
        raise subprocess.TimeoutExpired(cmd, 7.0, output=b"..partial")

    monkeypatch.setattr(gpu_check.subprocess, "run", timeout)
    assert gpu_check.run_gpu_tests(7.0) == {"status": "timeout after 7 s", "tail": "..partial"}


def test_rows_past_the_time_budget_are_recorded_as_skipped(benchmarks):
    import asyncio

    gpu_check = benchmarks("gpu_check")

    rows = asyncio.run(gpu_check.benchmark("cpu", True, 1, deadline=0.0))
    assert [(r["workload"], r["n"], r["status"]) for r in rows] == [
        ("unconstrained", 4, "skipped: over the time budget"),
        ("regex AWRS", 4, "skipped: over the time budget"),
        ("regex AWRS search", 4, "skipped: over the time budget"),
    ] * 2
    assert rows[0]["model"] == "embedded" and rows[3]["model"].startswith("random Llama")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
async def test_hf_backend_on_cuda_matches_cpu(benchmarks):  # pragma: no cover - needs a GPU
    """`PromptedLLM` over the HF backend with the model on the GPU gives the CPU's rows
    (float32 rounding), and SMC runs on it; a bf16 copy stays within bf16 rounding."""
    prompted_over = benchmarks("_gpu_check_models").prompted_over

    from genlm.control import PromptedLLM, direct_token_sampler
    from genlm.control.embedded import EMBEDDED_MODEL

    cpu = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
    cpu.set_prompt_from_str("The value of x is")
    gpu = prompted_over(cpu.model.model.to("cuda"), cpu.model.tokenizer)
    gpu.prompt_ids = cpu.prompt_ids
    cpu = prompted_over(PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf").model.model, cpu.model.tokenizer)
    cpu.prompt_ids = gpu.prompt_ids
    ctx = cpu.tokenize(" 42")
    want, got = await cpu.logw_next(ctx), await gpu.logw_next(ctx)
    assert got.weights.dtype == want.weights.dtype
    np.testing.assert_allclose(got.weights, want.weights, rtol=1e-4, atol=1e-4)
    seqs = await direct_token_sampler(gpu).smc(n_particles=8, ess_threshold=0.5, max_tokens=8, seed=0)
    assert len(seqs.contexts) == 8 and np.isfinite(seqs.log_weights).all()
    half = prompted_over(gpu.model.model.to(torch.bfloat16), cpu.model.tokenizer)
    half.prompt_ids = gpu.prompt_ids
    np.testing.assert_allclose((await half.logw_next(ctx)).weights, want.weights, rtol=0.05, atol=0.25)


def test_passes_over_the_vocabulary_are_counted_beside_the_floor(smoke):
    report, md = smoke
    for row in report["rows"]:
        # the LM head and a softmax are O(V) kernels of both; SMC adds its draw
        assert row["floor_passes_per_step"] >= 2, row
        assert row["passes_per_step"] > row["floor_passes_per_step"], row
        assert row["pass_ratio"] == pytest.approx(row["passes_per_step"] / row["floor_passes_per_step"])
        assert row["row_mb_per_step"] > 0 and row["floor_row_mb_per_step"] > 0
    header = "| model | workload | N | passes/particle-step | floor passes | pass ratio | row MB/particle-step | floor row MB | largest |"
    lines = md.splitlines()
    start = lines.index(header) + 2
    end = lines.index("", start)
    body = lines[start:end]
    assert len(body) == len(report["rows"])
    for line, row in zip(body, report["rows"]):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[5] == f"{row['pass_ratio']:.2f}×"


def test_row_passes_count_a_block_once_per_row_and_skip_views(benchmarks):
    passes = benchmarks("_row_passes")
    v = 1000
    block = torch.randn(4, v)
    with passes.RowPasses(v) as count:
        block.amax(dim=1)  # a reduction: 4 row passes
        block[:, :10].clone()  # short: none
        block.view(2, 2 * v)  # a view: none
        torch.exp(block)  # 4 more
        block.gather(1, torch.zeros(4, 1, dtype=torch.long))  # an indexed read: none
    assert count.passes == 8 and count.kernels == 2
    assert count.by_op == {"amax": 4, "exp": 4}
