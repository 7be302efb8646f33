import asyncio
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest
from toys.core import random_tabular

from genlm.control.potential import MultiProcPotential
from genlm.control.potential.multi_proc import WorkerDied
from genlm.control.testing import check_potential


@pytest.fixture(scope="module")
def pair():
    p = random_tabular(["a", "b"], np.random.default_rng(7), p_zero=0.1)
    mp = p.to_multiprocess(num_workers=2)
    yield p, mp
    mp.cleanup()


async def test_values_equal_the_in_process_potential(pair):
    p, mp = pair
    assert isinstance(mp, MultiProcPotential)
    assert mp.vocab_eos == p.vocab_eos
    contexts = [[], ["a"], ["b", "a"], ["a", "b", "b"]]
    np.testing.assert_allclose(await mp.batch_prefix(contexts), await p.batch_prefix(contexts))
    np.testing.assert_allclose(
        await mp.batch_complete(contexts), await p.batch_complete(contexts)
    )
    for c in contexts:
        if await p.prefix(c) > -np.inf:
            np.testing.assert_allclose(
                (await mp.logw_next(c)).weights, (await p.logw_next(c)).weights
            )
    live = [c for c in contexts if await p.prefix(c) > -np.inf]
    await check_potential(mp, live)


def test_num_workers_must_be_positive():
    with pytest.raises(ValueError, match="num_workers"):
        MultiProcPotential(lambda: None, (), num_workers=0)


# Faults -------------------------------------------------------------------------

from toys.workers import Faulty  # noqa: E402


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def _wait_for_call(mp, task):
    # the call is in flight once its worker is busy
    while not mp._busy and not task.done():
        await asyncio.sleep(0.01)


async def test_a_cancelled_call_terminates_its_hung_worker_and_the_pool_recovers():
    mp = Faulty("hang").to_multiprocess(num_workers=1)
    try:
        (old,) = mp.worker_pids()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(mp.prefix([b"a"]), 0.5)
        assert _gone(old)
        assert mp.worker_pids() == []  # the slot is refilled on the next call
        assert await mp.complete([b"a", b"b"]) == -3.0
        (new,) = mp.worker_pids()
        assert new != old
    finally:
        mp.cleanup()
    assert _gone(new)


async def test_cleanup_stops_a_worker_stuck_in_a_call():
    mp = Faulty("hang").to_multiprocess(num_workers=2)
    pids = mp.worker_pids()
    task = asyncio.ensure_future(mp.prefix([]))
    await _wait_for_call(mp, task)
    mp.cleanup()
    assert all(_gone(pid) for pid in pids)
    with pytest.raises(WorkerDied, match="MultiProcPotential"):
        await task
    with pytest.raises(RuntimeError, match="cleaned up"):
        await mp.complete([])


async def test_a_method_error_is_the_workers_own_and_the_worker_stays():
    mp = Faulty("raise").to_multiprocess(num_workers=1)
    try:
        pids = mp.worker_pids()
        with pytest.raises(ValueError, match=r"prefix refuses \[b'a'\]") as info:
            await mp.prefix([b"a"])
        assert any("raised in worker process" in note for note in info.value.__notes__)
        assert mp.worker_pids() == pids
        assert await mp.complete([]) == -1.0
    finally:
        mp.cleanup()


async def test_a_crashed_worker_is_named_and_replaced():
    mp = Faulty("exit").to_multiprocess(num_workers=1)
    try:
        (old,) = mp.worker_pids()
        with pytest.raises(WorkerDied, match=r"MultiProcPotential.*died while computing prefix \(exit code 3\)"):
            await mp.prefix([])
        assert await mp.complete([b"b"]) == -2.0
        assert mp.worker_pids() != [old]
    finally:
        mp.cleanup()


async def test_calls_beyond_the_workers_wait_their_turn():
    mp = Faulty().to_multiprocess(num_workers=2)
    try:
        contexts = [[b"a"] * n for n in range(7)]
        got = await asyncio.gather(*(mp.prefix(c) for c in contexts), mp.batch_complete(contexts))
        assert got[:7] == [-float(n) for n in range(7)]
        np.testing.assert_array_equal(got[7], [-n - 1.0 for n in range(7)])
    finally:
        mp.cleanup()


EXIT_SCRIPT = """
import asyncio, sys
from toys.workers import Faulty

if __name__ == "__main__":
    mp = Faulty("hang").to_multiprocess(num_workers=2)
    print(*mp.worker_pids(), flush=True)
    loop = asyncio.new_event_loop()
    task = loop.create_task(mp.prefix([]))  # left running: no cancel, no cleanup
    loop.run_until_complete(asyncio.sleep(0.5))
    sys.exit(0)
"""


def test_the_interpreter_exits_with_a_worker_stuck_in_a_call(tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text(EXIT_SCRIPT)
    tests = str(Path(__file__).resolve().parent.parent)  # where the `toys` package lives
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 2 and all(_gone(pid) for pid in pids)


async def test_a_failing_chunk_leaves_the_other_workers_running():
    mp = Faulty("raise").to_multiprocess(num_workers=3)
    try:
        pids = mp.worker_pids()
        with pytest.raises(ValueError, match="prefix refuses"):
            await mp.batch_prefix([[b"a"], [b"b"], [b"a", b"b"]])
        assert mp.worker_pids() == pids
    finally:
        mp.cleanup()


# Every potential SPEC lists survives pickling and `to_multiprocess` (issue 34, finding 5)


def _spec_potentials():
    """(name, build): each built-in potential and its usual wrappings, built in this
    process (`build` is called per test so that the caches start empty)."""
    from genlm.control import (
        WCFG,
        WFSA,
        BoolCFG,
        BoolFSA,
        CanonicalTokenization,
        Ensemble,
        JsonSchema,
        PromptedLLM,
    )
    from genlm.control.embedded import EMBEDDED_MODEL

    def llm():
        out = PromptedLLM.from_name(EMBEDDED_MODEL, backend="mock")
        out.set_prompt_from_str("Hello")
        return out

    def hf():  # 0.4.1 pickles its PromptedLLM (with the model) for the workers' spawn
        out = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
        out.set_prompt_from_str("Hello")
        return out

    grammar = 'start: "a" start | "b"'
    return [
        ("WFSA", lambda: WFSA.from_regex(r"a(b|c)*")),
        ("BoolFSA", lambda: BoolFSA.from_regex(r"[a-z]+")),
        ("WCFG", lambda: WCFG.from_string("1: S -> a S\n1: S -> b")),
        ("BoolCFG", lambda: BoolCFG.from_lark(grammar)),
        ("JsonSchema", lambda: JsonSchema({"type": "array", "items": {"type": "integer"}})),
        ("BoolFSA-times-BoolCFG", lambda: BoolFSA.from_regex(r"[ab]+") * BoolCFG.from_lark(grammar)),
        ("WFSA-tempered", lambda: WFSA.from_regex(r"a(b|c)*") ** 0.5),
        ("BoolFSA-coerced", lambda: BoolFSA.from_regex(r"[a-z ]+").coerce(llm(), f=b"".join)),
        ("JsonSchema-coerced", lambda: JsonSchema({"type": "integer"}).coerce(llm(), f=b"".join)),
        ("JsonSchema-coerced-generic",
         lambda: JsonSchema({"type": "integer"}).coerce(llm(), f=b"".join, engine=False)),
        ("PromptedLLM", llm),
        ("PromptedLLM-hf", lambda: hf()),
        ("Ensemble", lambda: (lambda m: Ensemble(m, m.spawn(), "sum"))(hf())),
        ("BoolFSA-normalized", lambda: BoolFSA.from_regex(r"a+").normalize()),
        ("CanonicalTokenization", lambda: CanonicalTokenization.from_llm(llm())),
        ("PromptedLLM-times-BoolFSA",
         lambda: (lambda m: m * BoolFSA.from_regex(r"[a-z ]+").coerce(m, f=b"".join))(llm())),
    ]


SPEC_POTENTIALS = _spec_potentials()


async def _some_contexts(p, n: int = 3) -> list:
    """The empty context and a few live ones, each one token longer (by the row's best token)."""
    out, ctx = [[]], []
    for _ in range(n):
        w = np.asarray((await p.logw_next(ctx)).weights)[:-1]
        if not np.isfinite(w).any():
            break
        ctx = ctx + [p.vocab[int(np.argmax(w))]]
        out.append(ctx)
    return out


async def _same_weights(a, b, contexts) -> None:
    for ctx in contexts:
        np.testing.assert_allclose(await a.prefix(ctx), await b.prefix(ctx), rtol=1e-6)
        np.testing.assert_allclose(await a.complete(ctx), await b.complete(ctx), rtol=1e-6)
        np.testing.assert_allclose(
            np.asarray((await a.logw_next(ctx)).weights),
            np.asarray((await b.logw_next(ctx)).weights), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name, build", SPEC_POTENTIALS, ids=[n for n, _ in SPEC_POTENTIALS])
async def test_every_spec_potential_pickles(name, build):
    import pickle

    p = build()
    contexts = await _some_contexts(p)
    copy = pickle.loads(pickle.dumps(p))
    await _same_weights(copy, p, contexts)
    await _same_weights(pickle.loads(pickle.dumps(build())), p, contexts)  # before any call too


@pytest.mark.parametrize("name, build", SPEC_POTENTIALS, ids=[n for n, _ in SPEC_POTENTIALS])
async def test_every_spec_potential_runs_in_worker_processes(name, build):
    p = build()
    contexts = await _some_contexts(p)
    mp = p.to_multiprocess(num_workers=2 if name == "BoolFSA" else 1)
    try:
        await _same_weights(mp, p, contexts)
    finally:
        mp.cleanup()


async def test_the_041_multiprocessing_example_returns_the_weights():
    """0.4.1's docs/performance.md "Multiprocessing" example."""
    from genlm.control import BoolFSA

    p = BoolFSA.from_regex(r"[a-z]+")
    mp = p.to_multiprocess(num_workers=2)
    try:
        w = await mp.logw_next(list(b"ab"))
        assert np.array_equal(np.asarray(w.weights), np.asarray((await p.logw_next(list(b"ab"))).weights))
        assert w[b"c"[0]] == 0.0 and w[b"A"[0]] == float("-inf")
    finally:
        mp.cleanup()
