"""The HF backend's intra-op thread policy (`_threads.py`): a small CPU model evaluates
on one thread and the process's count comes back after each evaluation; a large or
non-CPU model keeps torch's setting; `threads=` chooses; and the count changes no row
or seeded run beyond float rounding."""

import asyncio
import random
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from genlm.control import AWRS, BoolFSA, PromptedLLM  # noqa: E402
from genlm.control.embedded import EMBEDDED_MODEL  # noqa: E402
from genlm.control.lm import _threads  # noqa: E402
from genlm.control.lm._llm_loading import load_model  # noqa: E402
from genlm.control.lm._threads import default_threads, intra_op_threads  # noqa: E402
from genlm.control.lm.embedded_lm import EmbeddedTransformer  # noqa: E402

ATOL = 1e-5  # float32 rounding of the embedded model's log probabilities (magnitude ≤ 30)


@pytest.fixture
def two_threads():
    """The process runs two intra-op threads during the test (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def counted(model):
    """Record `torch.get_num_threads()` at each forward of `model` (a CachedTransformer)."""
    seen = []
    inner = model.model.forward

    def forward(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return inner(*args, **kwargs)

    model.model.forward = forward
    return seen


def test_small_cpu_models_default_to_one_thread(monkeypatch):
    hf = load_model(EMBEDDED_MODEL, "hf")
    assert default_threads(hf.model) == 1 and hf.threads == 1
    assert EmbeddedTransformer.from_dir().threads == 1
    monkeypatch.setattr(_threads, "SMALL_MODEL_PARAMS", 1000)  # the embedded model is now "large"
    assert default_threads(hf.model) is None
    monkeypatch.undo()
    gpu = SimpleNamespace(device=torch.device("cuda", 0), parameters=lambda: [], buffers=lambda: [])
    assert default_threads(gpu) is None


def test_evaluations_run_on_the_chosen_threads_and_restore_the_process_count(two_threads):
    keys = [(1, 2, 3), (4, 5)]
    for threads, during in ((None, 1), (1, 1), (2, 2), (3, 3)):
        model = load_model(EMBEDDED_MODEL, "hf", threads=threads)
        seen = counted(model)
        model.batch_next_token_logprobs_sync(keys)
        assert seen == [during] and torch.get_num_threads() == 2
    with pytest.raises(RuntimeError, match="boom"):
        with intra_op_threads(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError("boom")
    assert torch.get_num_threads() == 2


def test_a_replaced_set_num_threads_is_not_called(two_threads, monkeypatch):
    """vLLM's CPU worker replaces `torch.set_num_threads` with a function that only
    logs a warning: evaluations then keep the process's count and call nothing."""
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", lambda n: calls.append(n))
    model = load_model(EMBEDDED_MODEL, "hf", threads=1)
    seen = counted(model)
    model.batch_next_token_logprobs_sync([(1, 2, 3)])
    assert calls == [] and seen == [2] and torch.get_num_threads() == 2


def test_threads_is_validated():
    for bad in (0, -1, True, 1.5, "1"):
        with pytest.raises(ValueError, match="threads must be a positive integer or None"):
            EmbeddedTransformer.from_dir(threads=bad)


def test_from_name_passes_threads_to_the_backend():
    assert PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf", threads=2).model.threads == 2
    assert PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf").model.threads == 1


def test_rows_and_seeded_runs_do_not_depend_on_the_thread_count(two_threads):
    rng = random.Random(0)
    keys = [tuple(rng.randrange(4096) for _ in range(rng.randint(1, 30))) for _ in range(8)]
    one = load_model(EMBEDDED_MODEL, "hf", threads=1)
    two = load_model(EMBEDDED_MODEL, "hf", threads=2)
    assert torch.allclose(
        one.batch_next_token_logprobs_sync(keys),
        two.batch_next_token_logprobs_sync(keys),
        atol=ATOL,
        rtol=0,
    )

    async def run(model, seed):
        llm = PromptedLLM(model)
        llm.set_prompt_from_str("The value is")
        number = BoolFSA.from_regex(r" [0-9]+\.").coerce(llm, f=b"".join)
        return await AWRS(llm, number).smc(
            n_particles=6, ess_threshold=0.5, max_tokens=8, seed=seed
        )

    for seed in (0, 1):
        a = asyncio.run(run(load_model(EMBEDDED_MODEL, "hf", threads=1), seed))
        b = asyncio.run(run(load_model(EMBEDDED_MODEL, "hf", threads=2), seed))
        assert a.contexts == b.contexts
        np.testing.assert_allclose(a.log_weights, b.log_weights, atol=1e-4, rtol=0)
