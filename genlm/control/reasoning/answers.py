"""The posterior over answers, the thinking marginalized out.

SMC's particles carry whole generations (thinking and answer); a reasoning user reports
the answer. With `W_i` the normalized weight of particle `i` and `a(x_i)` its answer:

    P(answer = a) ≈ Σ_i W_i [a(x_i) = a] / Σ_i W_i [x_i finished]

over the finished particles (ending in `EOS`) whose answer decodes as UTF-8; particles
with different thinking and the same answer add up.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from genlm.control.constant import EndOfSequence


def answer_text(potential: Any, context: Sequence[Any]) -> str | None:
    """The answer of a finished generation `context` (ending in `EOS`) as text, read by
    a `HarmonyPotential` (the final channel) or a `ThinkPotential` (after the close
    tag); None when unfinished, outside the format, or not UTF-8."""
    tokens = list(context)
    if not tokens or not isinstance(tokens[-1], EndOfSequence):
        return None
    tokens.pop()
    state = potential.sections(tokens)
    if state is None or not state.can_end:
        return None
    pieces = [tokens[a:b] for name, a, b in state.closed if name in _answer_sections(potential)]
    if state.open is not None and state.open[0] in _answer_sections(potential):
        pieces.append(tokens[state.open[1] :])
    if not pieces:
        return None
    try:
        return b"".join(bytes(t) for t in pieces[-1]).decode("utf-8")
    except UnicodeDecodeError:
        return None


def _answer_sections(potential: Any) -> tuple[str, ...]:
    return getattr(potential, "answer_sections", ("answer",))


def answer_posterior(
    sequences: Any, answer: Any | Callable[[list], str | None]
) -> dict[str, float]:
    """`P(answer = a)` over the finished particles of an SMC result, heaviest first.

    Args:
        sequences: SMC's `Sequences` (its `contexts` and `normalized_weights`).
        answer: a `HarmonyPotential` or `ThinkPotential` (the answer is the final
            channel, or the text after the close tag), or a function from a finished
            context (tokens ending in `EOS`) to its answer (None: no answer).

    Returns:
        answer → probability, renormalized over the particles with an answer (empty
        when none has one or all weigh zero).
    """
    read = answer if callable(answer) and not hasattr(answer, "sections") else None
    totals: dict[str, float] = {}
    for ctx, w in zip(sequences.contexts, sequences.normalized_weights):
        if not w > 0:
            continue
        a = read(list(ctx)) if read is not None else answer_text(answer, ctx)
        if a is not None:
            totals[a] = totals.get(a, 0.0) + float(w)
    mass = sum(totals.values())
    if mass == 0:
        return {}
    return dict(sorted(((a, w / mass) for a, w in totals.items()), key=lambda kv: -kv[1]))
