"""The planner's route from a byte-level constraint to the compiled engine
(`engine_coerce`), and the same decision for a user (`explain_coercion`). It lives
beside `guided` (not in it) because a schema served with exact checks
(`_json_checked`) builds on `GuidedConstraint`, so the route imports both and
neither imports the other."""

from __future__ import annotations

from typing import Any

from genlm.control.engine._guided_engine import TokenVocabulary
from genlm.control.engine._json_checked import checked_constraint
from genlm.control.engine._translate import engine_terms
from genlm.control.engine.decision import EngineDecision, Exactness
from genlm.control.engine.guided import GuidedCoerced, GuidedConstraint
from genlm.control.potential import fast_paths
from genlm.control.potential.base import Potential
from genlm.control.potential.coerce import is_join
from genlm.control.potential.planner import NO_ROUTE, generic_path


def engine_coerce(
    potential: Potential,
    other: Any,
    f: Any,
    engine: bool | None,
    form: Any,
) -> GuidedCoerced | None:
    """The engine-backed coercion of a byte-level constraint onto `other` through
    `b"".join`, or None for the generic path, as `decide` rules.

    Args:
        potential: the byte-level constraint being coerced.
        engine: None uses the engine only where its language is the constraint's
            (`EXACT` or `CHECKED`; else the generic path, logged at debug level with
            the decision's reason); True requires the engine (taking it even where
            `INEXACT`); False never uses it.
        form: the constraint's `EngineSource` (kind, raw source, known reasons).

    Raises:
        ValueError: `engine=True` and the engine cannot serve the constraint.
    """
    if engine is False:
        return None
    decision, served = decide(potential, other, f, engine, form)
    if served is None:
        generic_path(decision.kind, decision.reason, engine)
    return served


def decide(
    potential: Potential, other: Any, f: Any, engine: bool | None, form: Any
) -> tuple[EngineDecision, GuidedCoerced | None]:
    """The engine's decision for `potential.coerce(other, f, engine=engine)` (whose
    engine form is `form`), and the engine-backed coercion where it takes the engine
    (else None). A constraint the engine itself refuses to build is `UNWRITABLE`, with
    the engine's message as the reason."""
    unfit = _unfit(other, f)
    if unfit is not None:
        return EngineDecision(Exactness.UNWRITABLE, form.kind, None, unfit), None
    decision = engine_terms(form, exact=not engine)
    if not decision.takes_engine(True if engine else None):
        return decision, None
    try:
        if decision.kind == "json_checked":  # grammars bounding the language, and exact checks
            built = checked_constraint(other, decision.source, potential)
        else:
            built = GuidedConstraint(other, decision.kind, decision.source)
    except ValueError as e:
        return EngineDecision(Exactness.UNWRITABLE, decision.kind, None, str(e)), None
    return decision, GuidedCoerced(potential, f, built, exact=decision.exactness is Exactness.EXACT)


def explain_coercion(
    constraint: Potential, llm: Any, engine: bool | None = None, f: Any = b"".join
) -> EngineDecision:
    """Whether, and how exactly, `constraint.coerce(llm, f, engine=engine)` is served
    by the compiled engine, and why: the decision the coercion itself takes (it
    compiles the engine's grammar, as the coercion does).

    `decision.takes_engine(engine)` says whether the coercion uses the engine;
    `exactness` is `EXACT` (the engine's language is the constraint's), `CHECKED`
    (bounding grammars with exact run-time checks), `INEXACT` (the languages may
    differ: taken only with `engine=True`) or `UNWRITABLE` (no engine form), with the
    `reason` that the coercion logs on the `genlm.control.engine.guided` logger when it
    takes the generic path. `engine=False` reports what `engine=None` would decide.

    Args:
        constraint: a byte-level constraint (a `BoolFSA.from_regex`, `BoolCFG.from_lark`
            or `JsonSchema`; any other potential has no engine form).
        llm: the coercion target (a `PromptedLLM`).
        engine: the `engine=` of the coercion.
        f: the coercion's map from tokens to the constraint's sequences.
    """
    form = constraint.engine_source()
    if form is None:
        reason = f"the constraint has no engine form (the engine takes {constraint.engine_form})"
        return EngineDecision(Exactness.UNWRITABLE, type(constraint).__name__, None, reason)
    if fast_paths.compiled_coercion(llm) is None:
        return EngineDecision(Exactness.UNWRITABLE, form.kind, None, NO_ROUTE)
    return decide(constraint, getattr(llm, "token_maps", llm), f, engine or None, form)[0]


def _unfit(other: Any, f: Any) -> str | None:
    if not isinstance(getattr(other, "token_maps", other), TokenVocabulary):
        return NO_ROUTE
    if not is_join(f, (b"",)):
        return 'f is not b"".join'
    return None


__all__ = ["decide", "engine_coerce", "explain_coercion"]
