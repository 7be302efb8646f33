"""Checks that a potential keeps the `Potential` contract.

Each check is async and raises `AssertionError` with the context and token that
disagree. Run them on your own potential::

    await check_potential(my_potential, [[], [b"a"], [b"a", b"b"]])
"""

from __future__ import annotations

import asyncio
import math
from typing import Sequence

import numpy as np

from genlm.control.potential.base import Potential


def _close(a: float, b: float, rtol: float, atol: float) -> bool:
    if math.isinf(a) or math.isinf(b) or math.isnan(a) or math.isnan(b):
        return a == b
    return abs(a - b) <= atol + rtol * abs(b)


def _report(verbosity: int, line: str) -> None:
    if verbosity > 0:
        print(line)


def _fail(check: str, what: str, potential: Potential, context, token, got, want) -> None:
    # `check` opens the message with 0.4.1's name for the check that failed
    raise AssertionError(
        f"{check}: {what} of {potential!r} at context {list(context)!r}, token {token!r}: "
        f"got {got!r}, expected {want!r}"
    )


async def assert_logw_next_consistency(
    potential: Potential,
    context: list,
    top: int | None = None,
    rtol: float = 1e-3,
    atol: float = 1e-5,
    verbosity: int = 0,
) -> None:
    """`logw_next(ctx)[x] == prefix(ctx + [x]) - prefix(ctx)` and
    `logw_next(ctx)[EOS] == complete(ctx) - prefix(ctx)`, for the `top` heaviest tokens
    (all by default). `verbosity > 0` prints the check when it holds."""
    context = list(context)
    logws = await potential.logw_next(context)
    ctx_w = await potential.prefix(context)
    tokens = list(logws.materialize(top=top)) if top is not None else list(potential.vocab_eos)
    if potential.eos not in tokens:
        tokens.append(potential.eos)
    vocab = [t for t in tokens if t != potential.eos]
    prefixes = await potential.batch_prefix([context + [t] for t in vocab])
    want = dict(zip(vocab, (float(w) - ctx_w for w in prefixes)))
    want[potential.eos] = await potential.complete(context) - ctx_w
    for t in tokens:
        if not _close(logws[t], want[t], rtol, atol):
            check = "logw_next consistency not satisfied"
            _fail(check, "logw_next", potential, context, t, logws[t], want[t])
    _report(verbosity, f"logw_next of {potential!r} at {context!r}: {len(tokens)} tokens agree")


async def assert_autoreg_fact(
    potential: Potential, context: list, rtol: float = 1e-3, atol: float = 1e-5, verbosity: int = 0
) -> None:
    """`complete(ctx) == prefix([]) + Σ_i logw_next(ctx[:i])[ctx[i]] + logw_next(ctx)[EOS]`."""
    context = list(context)
    rows = await potential.batch_logw_next([context[:i] for i in range(len(context) + 1)])
    total = await potential.prefix([])
    for i, tok in enumerate(context + [potential.eos]):
        total += rows[i][tok]
    want = await potential.complete(context)
    if not _close(total, want, rtol, atol):
        raise AssertionError(
            f"Factorization not satisfied: the autoregressive factorization of {potential!r} "
            f"fails at context {context!r}: "
            f"prefix([]) + Σ logw_next = {total!r} but complete = {want!r}"
        )
    _report(verbosity, f"factorization of {potential!r} at {context!r}: {total!r} == {want!r}")


async def assert_batch_consistency(
    potential: Potential,
    contexts: Sequence[list],
    rtol: float = 1e-3,
    atol: float = 1e-5,
    verbosity: int = 0,
) -> None:
    """Every `batch_*` method equals its single-context method on each context.

    Raises:
        ValueError: no contexts (a check over nothing would prove nothing).
    """
    contexts = [list(c) for c in contexts]
    if not contexts:
        raise ValueError("assert_batch_consistency needs at least one context")
    await _compare_methods(potential, potential, contexts, "batch", rtol, atol, batch=True)
    _report(verbosity, f"batch methods of {potential!r} agree on {len(contexts)} contexts")


async def assert_autobatch_consistency(
    potential: Potential, contexts: Sequence[list], rtol: float = 1e-3, atol: float = 1e-5
) -> None:
    """Concurrent calls through `potential.to_autobatched()` equal plain calls."""
    contexts = [list(c) for c in contexts]
    await _compare_methods(potential.to_autobatched(), potential, contexts, "autobatched", rtol, atol)


async def _compare_methods(test, ref, contexts, label, rtol, atol, batch=False):
    pairs = [
        ("prefix", test.batch_prefix if batch else None, test.prefix, ref.prefix),
        ("complete", test.batch_complete if batch else None, test.complete, ref.complete),
        ("score", test.batch_score if batch else None, test.score, ref.score),
    ]
    for name, batched, single, reference in pairs:
        got = await batched(contexts) if batch else await asyncio.gather(*(single(c) for c in contexts))
        want = [await reference(c) for c in contexts]
        for c, g, w in zip(contexts, got, want):
            if not _close(float(g), float(w), rtol, atol):
                check = f"{label.capitalize()} {name} mismatch"
                _fail(check, f"{label} {name}", test, c, None, float(g), float(w))
    live = []
    for c in contexts:
        if c and c[-1] == ref.eos:
            continue
        if await ref.prefix(c) > float("-inf"):
            live.append(c)
    if batch:
        got_rows = await test.batch_logw_next(live)
    else:
        got_rows = await asyncio.gather(*(test.logw_next(c) for c in live))
    for c, row in zip(live, got_rows):
        want_row = await ref.logw_next(c)
        g, w = row.host(), want_row.host()
        bad = ~((g == w) | np.isclose(g, w, rtol=rtol, atol=atol))
        if bad.any():
            i = int(np.argmax(bad))
            check = f"{label.capitalize()} logw_next mismatch"
            _fail(check, f"{label} logw_next", test, c, ref.vocab_eos[i], float(g[i]), float(w[i]))


async def check_potential(
    potential: Potential,
    contexts: Sequence[list],
    top: int | None = None,
    rtol: float = 1e-3,
    atol: float = 1e-5,
) -> None:
    """Run every check of this module on `potential` at each of `contexts`.

    Contexts whose prefix weight is zero are used only for the batch checks.
    """
    contexts = [list(c) for c in contexts]
    for c in contexts:
        if await potential.prefix(c) == float("-inf"):
            continue
        await assert_logw_next_consistency(potential, c, top=top, rtol=rtol, atol=atol)
        await assert_autoreg_fact(potential, c, rtol=rtol, atol=atol)
    await assert_batch_consistency(potential, contexts, rtol=rtol, atol=atol)
    await assert_autobatch_consistency(potential, contexts, rtol=rtol, atol=atol)


__all__ = [
    "assert_logw_next_consistency",
    "assert_autoreg_fact",
    "assert_batch_consistency",
    "assert_autobatch_consistency",
    "check_potential",
]
