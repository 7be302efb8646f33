"""The vLLM backend's row capture and token forcing (`lm/_vllm_capture.py`), on plain
tensors: which rows are stored, when a step is held, and that a forced row's only
finite logit is the token asked. The processor class itself is checked with both
of vLLM's interfaces where vllm is importable."""

from __future__ import annotations

import importlib.util
import types

import numpy as np
import pytest
import torch

from genlm.control.lm._vllm_capture import ROW_KEY, Capture


def logits(n: int = 4, v: int = 6) -> torch.Tensor:
    return torch.randn(n, v, generator=torch.Generator().manual_seed(0))


def test_rows_are_captured_and_nothing_held_while_rows_are_pending():
    held = []
    state = Capture(
        pending={"a", "b", "c"}, holdable={"a", "b", "c"}, hold=lambda rids: held.append(rids) or {}
    )
    x = logits()
    out = state.process(x.clone(), [0, 2], ["a", "b"])
    assert torch.equal(out, x) and not held and state.pending == {"c"}
    torch.testing.assert_close(state.sink["a"], torch.log_softmax(x[0], -1))
    torch.testing.assert_close(state.sink["b"], torch.log_softmax(x[2], -1))


def test_a_step_completing_the_pass_holds_and_forces_the_tokens_asked():
    state = Capture(
        pending={"a", "b"}, holdable={"a", "b"}, hold=lambda rids: {"a": 5, "b": 1, "gone": 0}
    )
    x = logits()
    want = x.clone()
    out = state.process(x, [3, 1], ["a", "b"])
    assert not state.pending
    for row, tok in ((3, 5), (1, 1)):  # one finite logit: the greedy pick is the token asked
        assert int(torch.argmax(out[row])) == tok and torch.isfinite(out[row]).sum() == 1
    for row in (0, 2):  # rows of other requests are untouched
        assert torch.equal(out[row], want[row])
    # the rows captured are those before forcing
    torch.testing.assert_close(state.sink["a"], torch.log_softmax(want[3], -1))


def test_no_hold_without_a_request_that_can_continue():
    calls = []
    state = Capture(pending={"a"}, holdable=set(), hold=lambda rids: calls.append(rids) or {})
    state.process(logits(), [0], ["a"])
    assert not calls and "a" in state.sink


needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vllm is not importable"
)


@needs_vllm
@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_the_processor_reads_its_rows_through_either_interface(runner):
    """V1: the row of a request is its batch index (moves and swaps followed). V2: row
    b holds the request in slot `ctx.idx_mapping_np[b]`. Unmarked requests are left."""
    from vllm import SamplingParams

    from genlm.control.lm._vllm_capture import capture_class

    state = Capture(pending={"r1", "r2"}, holdable={"r1", "r2"}, hold=lambda rids: {"r2": 4})
    proc = capture_class(state)(None, torch.device("cpu"), False)
    assert not proc.is_argmax_invariant()
    marked = {k: SamplingParams(extra_args={ROW_KEY: k}) for k in ("r1", "r2")}
    x = logits(3)
    if runner == "v1":
        from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

        added = [
            (0, marked["r1"], [1], []),
            (1, SamplingParams(), [1], []),
            (2, marked["r2"], [1], []),
        ]
        proc.update_state(BatchUpdate(3, removed=[], added=added, moved=[]))
        proc.update_state(
            BatchUpdate(3, removed=[], added=[], moved=[(0, 1, MoveDirectionality.SWAP)])
        )
        out = proc.apply(x.clone())  # r1 is now at row 1, r2 at row 2
        rows = {"r1": 1, "r2": 2}
    else:
        for slot, params in ((7, marked["r1"]), (3, SamplingParams()), (5, marked["r2"])):
            assert proc.add_request(slot, params) == (params.extra_args is not None)
        ctx = types.SimpleNamespace(idx_mapping_np=np.array([3, 7, 5]))
        out = proc.apply(x.clone(), ctx)
        rows = {"r1": 1, "r2": 2}
    for rid, row in rows.items():
        torch.testing.assert_close(state.sink[rid], torch.log_softmax(x[row], -1))
    assert int(torch.argmax(out[2])) == 4 and torch.isfinite(out[2]).sum() == 1
    assert torch.equal(out[:2], x[:2])
