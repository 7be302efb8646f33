"""`genlm.control.run`: an awaitable to its result, with no event loop or inside one."""

import asyncio
import threading

import pytest
from toys import ab_lm

import genlm.control
from genlm.control import SMC, direct_token_sampler, run


def _smc(seed):
    return SMC(direct_token_sampler(ab_lm()))(6, 0.5, 5, seed=seed)


def _same(a, b):
    return a.contexts == b.contexts and a.log_weights.tolist() == b.log_weights.tolist()


def test_without_a_loop_it_is_asyncio_run():
    assert _same(run(_smc(3)), asyncio.run(_smc(3)))
    assert genlm.control.run is run


def test_inside_a_running_loop_as_in_a_notebook_cell():
    # a Jupyter cell runs inside the kernel's loop, where asyncio.run raises
    threads = []

    async def where():
        threads.append(threading.current_thread())
        return await _smc(3)

    async def cell():
        with pytest.raises(RuntimeError, match="running event loop"):
            coroutine = _smc(3)
            try:
                asyncio.run(coroutine)
            finally:
                coroutine.close()
        return run(where()), run(where())

    first, second = asyncio.run(cell())
    assert _same(first, second) and _same(first, asyncio.run(_smc(3)))
    assert all(t is not threading.main_thread() for t in threads)


class Later:
    """An awaitable that is not a coroutine."""

    def __await__(self):
        yield from asyncio.sleep(0).__await__()
        return 42


@pytest.mark.parametrize("in_loop", [False, True])
def test_other_awaitables_and_errors(in_loop):
    async def fails():
        raise KeyError("inside")

    def call(f):
        if not in_loop:
            return f()

        async def cell():
            return f()

        return asyncio.run(cell())

    assert call(lambda: run(Later())) == 42
    with pytest.raises(KeyError, match="inside"):
        call(lambda: run(fails()))


def test_not_an_awaitable_is_a_clear_error():
    sampler = direct_token_sampler(ab_lm())
    with pytest.raises(TypeError, match=r"call it"):
        run(sampler.smc)
    with pytest.raises(TypeError, match="needs an awaitable"):
        run(3)


def test_an_interrupt_while_waiting_cancels_the_call_and_is_raised():
    # the notebook's stop button raises KeyboardInterrupt in the waiting thread
    import _thread

    cancelled = threading.Event()

    async def forever():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def cell():
        threading.Timer(0.3, _thread.interrupt_main).start()
        with pytest.raises(KeyboardInterrupt):
            run(forever())

    # a kernel's loop, as ipykernel runs it: SIGINT keeps its default handler, which
    # raises KeyboardInterrupt (asyncio.run would install its own, cancelling its task)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(cell())
    finally:
        loop.close()
    assert cancelled.is_set()
