"""How the command line runs the embedded model cheaply (issue 26: ≤ 4 s of CPU in all).

Importing this module imports nothing heavy; torch is imported only by the functions
that run after the arguments are checked.

- `load`: on the HF backend on the CPU the embedded model runs through
  `EmbeddedTransformer` (its GPT-2 forward in plain torch: the same rows as
  transformers' model, without the seconds that importing transformers' model code
  costs); any other model or backend through `PromptedLLM.from_name`.
- `one_thread_before_torch` and `one_torch_thread`: one OpenMP / intra-op thread for
  the embedded model, whose matrices are tiny (idle pool threads cost more CPU than
  they save).
- `end_process`: after such a run, exit without the interpreter's teardown.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Iterator, NoReturn

from genlm.control.embedded import ALIASES


def load(model: str, backend: str | None) -> Any:
    """`PromptedLLM.from_name(model, backend=backend)`, or the same model over
    `EmbeddedTransformer` where `uses_embedded_forward(backend)` for the embedded model."""
    from genlm.control.lm.llm import PromptedLLM

    if model not in ALIASES:
        return PromptedLLM.from_name(model, backend=backend)
    from genlm.control.lm.embedded_lm import load_embedded

    return PromptedLLM(load_embedded(backend))


def one_thread_before_torch(model: str, backend: str | None) -> None:
    """`OMP_NUM_THREADS=1` (unless set) for the embedded model on the HF backend, before
    torch starts its thread pools; nothing once torch is imported. Not for vLLM, whose
    CPU build wants its threads."""
    if model not in ALIASES or "torch" in sys.modules:
        return
    if _on_hf(backend):
        os.environ.setdefault("OMP_NUM_THREADS", "1")


def _on_hf(backend: str | None) -> bool:
    """Whether `backend` resolves to the HF backend (None: vLLM where it is importable)."""
    from genlm.control.lm import vllm_importable

    return backend == "hf" or (backend is None and not vllm_importable())


@contextlib.contextmanager
def one_torch_thread(model: str, backend: str | None) -> Iterator[None]:
    """One intra-op torch thread while the embedded model runs on the HF backend
    (restored after). Not on vLLM: its CPU build binds its OpenMP threads when the engine
    starts, and its attention aborts the process when a step runs on another count."""
    if model not in ALIASES or not _on_hf(backend):
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def ran_embedded_forward(model: str, backend: str | None) -> bool:
    """Whether `load(model, backend)` runs `EmbeddedTransformer`."""
    if model not in ALIASES:
        return False
    from genlm.control.lm.embedded_lm import uses_embedded_forward

    return uses_embedded_forward(backend)


def end_process(code: int) -> NoReturn:
    """Exit with `code` once stdout, stderr and the log handlers are flushed, without
    the interpreter's teardown: freeing torch's and transformers' objects one by one
    costs about half a second of CPU after the result is out. For the end of a run of
    `EmbeddedTransformer` only, whose process holds no engine, subprocess or open file
    that needs an exit handler (the record is written and closed during the run)."""
    import logging

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: the reader has gone
            code = code or 1
    logging.shutdown()
    os._exit(code)


__all__ = ["end_process", "load", "one_thread_before_torch", "one_torch_thread", "ran_embedded_forward"]
