"""`engine_coerce`: the planner's route from a byte-level constraint to the compiled
engine, or None for the generic path. It lives beside `guided` (not in it) because a
schema served with exact checks (`_json_checked`) builds on `GuidedConstraint`, so
the route imports both and neither imports the other."""

from __future__ import annotations

import logging
from typing import Any

from genlm.control.engine._guided_engine import TokenVocabulary
from genlm.control.engine._json_checked import checked_constraint
from genlm.control.engine._translate import engine_terms
from genlm.control.engine.guided import GuidedCoerced, GuidedConstraint
from genlm.control.potential.base import Potential
from genlm.control.potential.coerce import is_join

# the logger docs/constraint-engines.md names for every engine decision
logger = logging.getLogger("genlm.control.engine.guided")


def engine_coerce(
    potential: Potential,
    other: Any,
    f: Any,
    engine: bool | None,
    form: Any,
) -> GuidedCoerced | None:
    """The engine-backed coercion of a byte-level constraint onto `other` through
    `b"".join`, or None for the generic path. `form` (the constraint's
    `EngineSource`) is translated into the engine's terms here (`engine_terms`),
    which also says whether the languages are equal.

    Args:
        potential: the byte-level constraint being coerced.
        engine: None uses the engine only where its language is the constraint's
            (else the generic path, logged at debug level); True requires the engine
            (taking it even where `inexact` says the languages may differ); False
            never uses it.
        form: the constraint's `EngineSource` (kind, raw source, known reasons).

    Raises:
        ValueError: `engine=True` and the engine cannot serve the constraint.
    """
    if engine is False:
        return None
    kind, source, inexact = form.kind, None, None
    reason = _unfit(other, f)
    if reason is None:
        source, inexact, as_kind = engine_terms(form, exact=not engine)
        kind = as_kind or kind
        if source is None:
            reason = "the engine does not express this constraint exactly"
            reason += f": {inexact}" if inexact is not None else ""
    if reason is None and inexact is not None and not engine:
        reason = f"the engine's language may differ: {inexact}"
    if reason is None:
        try:
            if kind == "json_checked":  # grammars bounding the language, and exact checks
                return GuidedCoerced(potential, f, checked_constraint(other, source, potential))
            return GuidedCoerced(potential, f, GuidedConstraint(other, kind, source))
        except ValueError as e:
            reason = str(e)
    if engine:
        raise ValueError(f"engine=True, but the compiled engine cannot serve this {kind}: {reason}")
    logger.debug("coerce: the %s constraint takes the generic path: %s", kind, reason)
    return None


def _unfit(other: Any, f: Any) -> str | None:
    if not isinstance(getattr(other, "token_maps", other), TokenVocabulary):
        return "the target is not a PromptedLLM token vocabulary"
    if not is_join(f, (b"",)):
        return 'f is not b"".join'
    return None



__all__ = ["engine_coerce"]
