"""The real-vLLM tests (one engine per module, on the embedded model; see
`toys/vllm_engine.py`) run where the `vllm` package is importable and are skipped
elsewhere. CI builds a second environment for them with `requirements-vllm-cpu.txt`
(see `.ci/run`)."""

from __future__ import annotations

import os

import pytest
from toys.vllm_engine import HAVE_VLLM


def pytest_collection_modifyitems(config, items):
    if HAVE_VLLM:
        return
    skip = pytest.mark.skip(reason="vllm is not importable (see docs/vllm.md for the CPU build)")
    here = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(skip)
