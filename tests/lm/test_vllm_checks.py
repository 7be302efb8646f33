"""The vLLM backend's checks made before an engine starts, and its start-up module
hiding; these need no vllm package (the real-engine tests are in tests/vllm_backend)."""

from __future__ import annotations

import sys
import types

import pytest

from genlm.control.lm._vllm import (
    _hidden_from_kernel_scan,
    _unscannable,
    check_one_process,
    check_vocabulary,
)


def test_vocabulary_check():
    check_vocabulary(4096, 4096, "t", "m")
    check_vocabulary(4000, 4096, "t", "m")  # a model may have more logits than tokens
    check_vocabulary(10, None, "t", "m")  # unknown size: nothing to compare
    with pytest.raises(ValueError, match="tokenizer 't' has 4097 tokens but the model 'm' has a vocabulary of 4096"):
        check_vocabulary(4097, 4096, "t", "m")


def test_one_process_check():
    check_one_process({})
    check_one_process({"tensor_parallel_size": 1, "distributed_executor_backend": "uni"})
    with pytest.raises(ValueError, match="data_parallel_size=2"):
        check_one_process({"data_parallel_size": 2})
    with pytest.raises(ValueError, match="distributed_executor_backend='mp'"):
        check_one_process({"distributed_executor_backend": "mp"})


class _OddDict:
    """An object whose `__dict__` is not a dict (as llvmlite's `ffi.lib`)."""

    __slots__ = ()

    def __getattr__(self, name):
        return object()


def test_unscannable_modules_are_hidden_during_start_and_put_back():
    odd = types.ModuleType("genlm_test_odd_module")
    odd.lib = _OddDict()
    plain = types.ModuleType("genlm_test_plain_module")
    plain.value = types.SimpleNamespace(kernel=1)
    sys.modules[odd.__name__], sys.modules[plain.__name__] = odd, plain
    try:
        assert _unscannable(odd.__name__, odd) and not _unscannable(plain.__name__, plain)
        assert not _unscannable("vllm.fake", odd)  # vLLM's own modules are never hidden
        with _hidden_from_kernel_scan():
            assert odd.__name__ not in sys.modules and sys.modules[plain.__name__] is plain
        assert sys.modules[odd.__name__] is odd
        with pytest.raises(RuntimeError):
            with _hidden_from_kernel_scan():
                raise RuntimeError("engine failed to start")
        assert sys.modules[odd.__name__] is odd  # put back after a failed start too
    finally:
        sys.modules.pop(odd.__name__, None)
        sys.modules.pop(plain.__name__, None)
