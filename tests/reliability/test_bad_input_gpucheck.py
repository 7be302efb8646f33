"""Bad input around the LM backends (LoRA adapters, the vLLM backend) and the GPU check
script: one case per row of docs/bad-input.md, each a clear error raised before any
model work."""

import functools
import importlib.util
import os
import subprocess
import sys

import pytest
from toys.reliability import assert_clear_error, undocumented

from genlm.control import PromptedLLM
from genlm.control.embedded import EMBEDDED_MODEL

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
VLLM_IMPORTABLE = importlib.util.find_spec("vllm") is not None


@functools.lru_cache(maxsize=1)
def _hf_backend():
    return PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf").model


def _lora_unknown():
    return PromptedLLM(_hf_backend(), prompt_ids=[1], lora_name="missing").logw_next([])


def _gpu_check(*args: str):
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "gpu_check.py"), "--out", "unused", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    raise ValueError(f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1]}")


# (row id, thunk, error type, message pattern); keep in the order of docs/bad-input.md
ROWS = [
    ("llm-lora-unsupported", lambda: PromptedLLM.from_name(EMBEDDED_MODEL, backend="mock", lora_name="a"), ValueError, "LoRA adapter 'a' requested, but MockAsyncLM does not support LoRA"),
    ("llm-lora-not-str", lambda: PromptedLLM.from_name(EMBEDDED_MODEL, backend="mock", lora_name=1), TypeError, "lora_name must be a str"),
    ("llm-lora-unknown", _lora_unknown, ValueError, "LoRA adapter 'missing' is not available on CachedTransformer"),
    pytest.param(
        "llm-vllm-unavailable",
        lambda: PromptedLLM.from_name(EMBEDDED_MODEL, backend="vllm"),
        ImportError,
        r"needs the vllm package: `pip install \"genlm-control\[vllm\]\"`",
        marks=pytest.mark.skipif(VLLM_IMPORTABLE, reason="vllm is importable here"),
    ),
    ("gpu-check-repeats-zero", lambda: _gpu_check("--repeats", "0"), ValueError, r"exit 2: .*--repeats: must be a positive finite int, got '0'"),
    ("gpu-check-timeout-nan", lambda: _gpu_check("--test-timeout", "nan"), ValueError, r"exit 2: .*--test-timeout: must be a positive finite float, got 'nan'"),
]


def _row_id(row) -> str:
    return row.values[0] if hasattr(row, "values") else row[0]


def _strip(row):
    if hasattr(row, "values"):
        return pytest.param(*row.values[1:], marks=row.marks, id=row.values[0])
    return pytest.param(*row[1:], id=row[0])


@pytest.mark.parametrize("thunk, err, match", [_strip(r) for r in ROWS])
async def test_bad_input_gives_a_clear_error(thunk, err, match):
    await assert_clear_error(thunk, err, match)


def test_every_row_is_documented():
    missing = undocumented(_row_id(r) for r in ROWS)
    assert not missing, f"rows without a line in docs/bad-input.md: {missing}"
