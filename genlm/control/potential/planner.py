"""The one place that decides which `Coerced` serves `potential.coerce(other, f)`.

`coerce` always means `Coerced(p, other, f).prefix(xs) = p.prefix(f(xs))`. Two
engines compute it:

- the compiled token-mask engine (`GuidedCoerced`), for a Boolean constraint with
  an engine form (`Potential.engine_source`: a `BoolFSA.from_regex`, a
  `BoolCFG.from_lark`, a `JsonSchema`) coerced onto a `PromptedLLM` through
  `b"".join`, where the engine's language is the constraint's. The constraint
  states its raw source; the coercion target offers the route
  (`fast_paths.compiled_coercion`: `PromptedLLM.compiled_coercion`, which hands its
  token maps to `genlm.control.engine`); the engine translates the source into its
  terms and decides exactness (the rules are in docs/constraint-engines.md);
- the generic path otherwise (`Potential.generic_coercion`: `Coerced`, or a
  subclass that computes the same values faster, such as `CoercedDFA`).

`engine=None` takes the engine only where it is exact, `True` requires it (even
where the languages may differ), `False` never takes it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from genlm.control.potential import fast_paths

if TYPE_CHECKING:  # pragma: no cover
    from genlm.control.potential.base import Potential
    from genlm.control.potential.coerce import Coerced


class EngineSource(NamedTuple):
    """A constraint's compiled-engine form, as the constraint states it: the raw
    source, which the engine translates into its own terms (deciding there whether
    its language is the constraint's).

    Attributes:
        kind: "regex", "lark" or "json_schema".
        source: the pattern (read as `BoolFSA.from_regex` reads it), the Lark grammar
            text, or the schema (None: the constraint has no engine form).
        inexact: why the engine's language may differ from the constraint's, where
            the constraint knows of a reason (None: none known; the engine adds
            what it finds).
        parsed: for "lark", the grammar as `read_lark` parsed it (None: the engine
            reads the text itself).
        spelling: for "json_schema", how documents are spelled outside the schema's
            strings ("any", "compact" or "canonical"; None: "any").
    """

    kind: str
    source: Any
    inexact: Any = None
    parsed: Any = None
    spelling: Any = None


def compile_for(
    potential: "Potential",
    other: Any,
    f: Callable[[list], Any],
    *,
    prune: bool = True,
    homomorphic: bool | None = None,
    trie: Any = None,
    engine: bool | None = None,
) -> "Coerced":
    """`potential.coerce(other, f, ...)`: the engine-backed coercion where the rules
    above take it, else `potential.generic_coercion(...)`.

    Raises:
        ValueError: `engine=True` for a potential without an engine form, or where
            the engine cannot serve the constraint (see `engine_coerce`).
    """
    if engine is not False:
        found = potential.engine_source()
        if found is not None:
            route = fast_paths.compiled_coercion(other)
            if route is not None:
                fast = route(potential, f, engine, found)
                if fast is not None:
                    return fast
            else:
                generic_path(found.kind, NO_ROUTE, engine)
        elif engine:
            raise ValueError(f"engine=True needs {potential.engine_form}")
    return potential.generic_coercion(other, f, prune, homomorphic, trie)


# the logger docs/constraint-engines.md names for every engine decision
logger = logging.getLogger("genlm.control.engine.guided")

# why a target without the compiled route (`fast_paths.compiled_coercion`) takes the generic path
NO_ROUTE = "the target is not a PromptedLLM token vocabulary"


def generic_path(kind: str, reason: str, engine: bool | None) -> None:
    """The one statement of a decision against the engine (the engine's
    `EngineDecision`, or `NO_ROUTE` here): a ValueError where `engine=True` requires
    the engine, else a debug line on the engine's logger.

    Raises:
        ValueError: `engine=True`.
    """
    if engine:
        raise ValueError(f"engine=True, but the compiled engine cannot serve this {kind}: {reason}")
    logger.debug("coerce: the %s constraint takes the generic path: %s", kind, reason)


__all__ = ["EngineSource", "NO_ROUTE", "compile_for", "generic_path"]
