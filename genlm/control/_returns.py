"""Checks of the values a user's potential returns, where they enter the framework.

A potential class defined outside genlm-control has its `prefix`, `complete`,
`score`, `logw_next` and `batch_*` methods wrapped once, when the class is created
(`Potential.__init_subclass__`). The wrapper awaits the method and checks the type
of what it returns, so a forgotten `return` (None), a forgotten `await` (a
coroutine), a dict of weights or a row of the wrong length is a `TypeError` naming
the class and the method at the call that produced it, instead of a weight that the
framework later reads as `-inf` (NaN) or a failure far from its cause.

The checks cost one type test per call (one per context for batch methods), never a
pass over the vocabulary. The built-in potentials are not wrapped. The token samplers' own
methods (`sample`, `logw_eos`) are checked the same way (`SAMPLER_CHECKS`), which is
why this module sits below both `potential/` and `sampler/`.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import numpy as np

from genlm.control.weights import LazyWeights

_TRUSTED = "genlm.control."


def _describe(value: Any) -> str:
    if value is None:
        return "None (a missing `return`?)"
    if inspect.isawaitable(value):
        return f"an awaitable {type(value).__name__} (a missing `await`?)"
    return f"a {type(value).__name__}"


def _fail(owner: Any, name: str, value: Any, expected: str) -> TypeError:
    if inspect.iscoroutine(value):
        value.close()  # never awaited: close it so no warning outlives the error
    return TypeError(f"{type(owner).__name__}.{name} returned {_describe(value)}; expected {expected}")


def _is_scalar(value: Any) -> bool:
    """A log weight: anything `float()` reads as a number (floats, NumPy and torch scalars)."""
    if type(value) is float:
        return True
    if value is None or isinstance(value, (str, bytes, bytearray)) or inspect.isawaitable(value):
        return False
    return hasattr(type(value), "__float__")


def _n_contexts(args: tuple, kwargs: dict) -> int | None:
    contexts = args[0] if args else kwargs.get("contexts")
    try:
        return len(contexts)
    except TypeError:
        return None


def _check_scalar(owner: Any, name: str, value: Any, args: tuple, kwargs: dict) -> None:
    if not _is_scalar(value):
        raise _fail(owner, name, value, "a float log weight")


def _check_scalars(owner: Any, name: str, value: Any, args: tuple, kwargs: dict) -> None:
    expected = "one float log weight per context (a list or an array)"
    if value is None or isinstance(value, (dict, str, bytes)) or not hasattr(value, "__len__"):
        raise _fail(owner, name, value, expected)
    _check_count(owner, name, len(value), _n_contexts(args, kwargs))
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "fiub" or value.ndim != 1:
            raise TypeError(
                f"{type(owner).__name__}.{name} returned an array of dtype {value.dtype} and "
                f"shape {value.shape}; expected {expected}"
            )
        return
    if isinstance(value, (list, tuple)):
        bad = next((v for v in value if not _is_scalar(v)), 0.0)
        if not _is_scalar(bad):
            raise _fail(owner, f"{name} (one of its values)", bad, "a float log weight")


def _check_row(owner: Any, name: str, value: Any, args: tuple = (), kwargs: dict | None = None) -> None:
    tables = owner.__dict__.get("_tables")
    size = None if tables is None else len(tables.vocab_eos)
    expected = "LazyWeights over vocab + [EOS]" + ("" if size is None else f" ({size} entries)")
    if not isinstance(value, LazyWeights):
        hint = " (build them with self.make_lazy_weights(array))" if isinstance(value, dict) else ""
        raise _fail(owner, name, value, expected + hint)
    if size is not None and len(value) != size:
        raise TypeError(
            f"{type(owner).__name__}.{name} returned LazyWeights with {len(value)} entries; "
            f"expected {expected}"
        )


def _check_rows(owner: Any, name: str, value: Any, args: tuple, kwargs: dict) -> None:
    if value is None or isinstance(value, (dict, LazyWeights)) or not hasattr(value, "__len__"):
        raise _fail(owner, name, value, "a list of LazyWeights, one per context")
    _check_count(owner, name, len(value), _n_contexts(args, kwargs))
    for row in value:
        _check_row(owner, f"{name} (one of its rows)", row)


def _check_count(owner: Any, name: str, got: int, want: int | None) -> None:
    if want is not None and got != want:
        raise TypeError(
            f"{type(owner).__name__}.{name} returned {got} values for {want} contexts; "
            "expected one per context"
        )


CHECKS: dict[str, Callable] = {
    "prefix": _check_scalar,
    "complete": _check_scalar,
    "score": _check_scalar,
    "logw_next": _check_row,
    "batch_prefix": _check_scalars,
    "batch_complete": _check_scalars,
    "batch_score": _check_scalars,
    "batch_logw_next": _check_rows,
}


def _checked(method: Callable, name: str, check: Callable) -> Callable:
    fast = float if check is _check_scalar else LazyWeights if check is _check_row else None

    @functools.wraps(method)
    async def checked(self, *args, **kwargs):
        out = method(self, *args, **kwargs)
        try:
            value = await out
        except TypeError:
            if inspect.isawaitable(out):
                raise  # raised inside the method itself
            raise TypeError(
                f"{type(self).__name__}.{name} must be a coroutine function (`async def`); "
                f"it returned {_describe(out)}"
            ) from None
        if type(value) is not fast or fast is LazyWeights:
            check(self, name, value, args, kwargs)
        return value

    checked.__genlm_checked__ = True
    return checked


def _check_sample(owner: Any, name: str, value: Any, args: tuple, kwargs: dict) -> None:
    ok = isinstance(value, (tuple, list)) and len(value) == 3
    if not (ok and _is_scalar(value[1]) and _is_scalar(value[2])):
        raise _fail(owner, name, value, "a tuple (token, logw, logp) with float logw and logp")


#: The checks of a token sampler's methods (`TokenSampler.__init_subclass__`).
SAMPLER_CHECKS: dict[str, Callable] = {"sample": _check_sample, "logw_eos": _check_scalar}


def check_returns(cls: type, checks: dict[str, Callable] = CHECKS) -> None:
    """Wrap the methods of `checks` that `cls` defines so that what they return is
    checked (see the module docstring); classes of genlm-control itself are left alone."""
    if cls.__module__.startswith(_TRUSTED):
        return
    for name, check in checks.items():
        method = cls.__dict__.get(name)
        if inspect.isfunction(method) and not getattr(method, "__genlm_checked__", False):
            setattr(cls, name, _checked(method, name, check))


__all__ = ["CHECKS", "SAMPLER_CHECKS", "check_returns"]
