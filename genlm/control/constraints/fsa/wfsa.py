"""Weighted and Boolean finite-state automata over bytes as potentials."""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple, Sequence

import numpy as np

from genlm.control._state_cache import PrefixStateCache
from genlm.control._warn import warn_user
from genlm.control.constraints.fsa._fsa_arrays import (
    N_BYTES,
    ByteAutomaton,
    compile_wfsa,
    dfa_automaton,
)
from genlm.control.constraints.recognizer import CachedRecognizer
from genlm.control.constraints.regex.compile import (
    MAX_STATES,
    ByteDFA,
    compile_regex,
    dfa_wfsa,
)
from genlm.control.potential.coerce import Coerced, is_join
from genlm.control.potential.planner import EngineSource
from genlm.control.weights import NEG_INF, LazyWeights

BYTE_VOCAB = list(range(N_BYTES))


class Forward(NamedTuple):
    """Forward weights after a context: `α = exp(log_scale) · alpha`, `max(alpha) = 1`."""

    alpha: np.ndarray
    log_scale: float


def _log(x):
    with np.errstate(divide="ignore"):
        return np.log(x)


def check_byte_context(context: Sequence[Any]) -> None:
    """Raise TypeError unless every token is a byte value (an int in 0..255)."""
    for t in context:
        if not (isinstance(t, (int, np.integer)) and 0 <= t < N_BYTES) or isinstance(t, bool):
            raise TypeError(
                f"token {t!r} is not a byte value 0..255; byte-level potentials read "
                "contexts like list(b'...') (coerce onto an LM with f=b''.join)"
            )


class WFSA(CachedRecognizer):
    """A weighted automaton over byte values (0..255) as a potential.

    With forward weights `α` after the context, backward weights `β` and stop
    weights `ρ` (see `_fsa_arrays`):

        prefix(ctx) = log(α · β),   complete(ctx) = log(α · ρ)

    `α` is carried per context in a bounded LRU cache and extended one byte at a
    time, so `logw_next(ctx)` after `logw_next(ctx[:-1])` costs one sparse product
    and one `α M` product, independent of the context length.

    Args:
        wfsa: a `genlm.grammar.WFSA` in the Float, Real, Log or Boolean semiring,
            with byte-value labels (character labels are converted with `to_bytes`),
            or a `ByteDFA` (see `from_dfa`).
        cache_size: the most forward vectors kept.

    Raises:
        ValueError: if the automaton accepts nothing, has negative weights, or its
            total weight diverges.
    """

    boolean = False
    stateful = True
    pattern: str | None = None  # the regex of `from_regex`

    def __init__(self, wfsa: Any, cache_size: int = 16384):
        self.cache_size = cache_size
        self._semiring = None  # the semiring `wfsa` is built in for a regex's DFA
        if isinstance(wfsa, ByteDFA):  # a regex's DFA: arrays built directly
            self._wfsa, self._dfa = None, wfsa
            self.automaton = dfa_automaton(wfsa.delta, wfsa.final, self.boolean)
        else:
            self.automaton = compile_wfsa(_check_semiring(wfsa, self.boolean), boolean=self.boolean)
            self._wfsa, self._dfa = _as_log(wfsa, self.boolean), None
        super().__init__(BYTE_VOCAB)
        self._init_cache()

    @classmethod
    def from_dfa(cls, dfa: ByteDFA, cache_size: int = 16384) -> "WFSA":
        """From a trimmed byte DFA (`regex.compile.ByteDFA`), each state splitting its
        mass evenly over its choices (see `from_regex`); arrays built directly."""
        return cls(dfa, cache_size)

    @property
    def wfsa(self) -> Any:
        """The `genlm.grammar.WFSA` this potential reads (built on first use for an
        automaton that came from a regex)."""
        if self._wfsa is None:
            from genlm.grammar import Boolean, Log

            if self._semiring is Log:
                semiring, weight = Log, (lambda k: Log(0.0 if self.boolean else -math.log(k)))
            elif self.boolean:
                semiring, weight = Boolean, (lambda k: Boolean.one)
            else:
                semiring, weight = Log, (lambda k: Log(-math.log(k)))
            self._wfsa = dfa_wfsa(self._dfa, semiring, weight)
        return self._wfsa

    def _init_cache(self) -> None:
        a = self.automaton
        root = _rescale(a.start, 0.0)
        self._cache: PrefixStateCache[Forward] = PrefixStateCache(
            root, functools.partial(_step, a), self.cache_size  # picklable, unlike a lambda
        )

    @classmethod
    def from_regex(
        cls,
        pattern: str,
        charset: Any = None,
        to_bytes: bool = True,
        cache_size: int = 16384,
        *,
        max_states: int = MAX_STATES,
    ) -> "WFSA":
        """The automaton of `re.fullmatch(pattern, text, flags=re.ASCII)` over UTF-8 bytes.

        `charset` and `to_bytes` are 0.4.1's arguments: only their defaults are
        served (negated classes and `.` range over every byte here, not over a
        character set; the automaton reads bytes), and anything else is a
        `ValueError`, never a silently different language.

        Weights: each state splits its mass evenly over the bytes that keep a match
        possible and stopping (when a match is complete), so the potential is a
        distribution over the matching strings; `BoolFSA.from_regex` gives 0/-inf.

        Args:
            max_states: the compile budget (default 32768): the most character
                positions after unrolling counted repeats, and the most DFA states.
                Checked before anything large is allocated.

        Raises:
            ValueError: naming the pattern and the problem (invalid syntax with its
                position; lookarounds, anchors, group references, possessive or atomic
                repeats, Unicode/locale flags with their position; groups nested
                deeper than 100; an empty language; a pattern over the budget).
        """
        _check_regex_options(charset, to_bytes)
        fsa = cls.from_dfa(compile_regex(pattern, max_states), cache_size)
        fsa.pattern = pattern
        return fsa

    # Forward vectors ------------------------------------------------------

    def forward(self, context: Sequence[int]) -> Forward | None:
        """The forward weights after `context` (None when no path reads it)."""
        return self._cache.get(context)

    def _weight(self, fwd: Forward | None, vec: np.ndarray) -> float:
        if fwd is None:
            return NEG_INF
        w = float(fwd.alpha @ vec)
        if self.boolean:
            return 0.0 if w > 0 else NEG_INF
        return float(_log(w)) + fwd.log_scale

    async def prefix(self, context: Sequence[int]) -> float:
        return self._weight(self.forward(context), self.automaton.beta)

    async def complete(self, context: Sequence[int]) -> float:
        return self._weight(self.forward(context), self.automaton.stop)

    def _rows(self, forwards: list[Forward | None], contexts) -> np.ndarray:
        for f, c in zip(forwards, contexts):
            if f is None or not (f.alpha @ self.automaton.beta > 0):
                # "Context ... has zero weight": 0.4.1's wording, which its users may match
                raise ValueError(
                    f"Context {list(c)!r} has zero weight: "
                    f"its prefix has weight zero under {self!r}"
                )
        alphas = np.stack([f.alpha for f in forwards])
        mass = alphas @ self.automaton.next_mass
        if self.boolean:
            return np.where(mass > 0, 0.0, NEG_INF)
        totals = alphas @ self.automaton.beta
        return _log(mass) - _log(totals)[:, None]

    async def logw_next(self, context: Sequence[int]) -> LazyWeights:
        """`log(α M) - log(α · β)`: every next byte and EOS in one product."""
        return self.make_lazy_weights(self._rows([self.forward(context)], [context])[0])

    async def batch_logw_next(self, contexts: Sequence[Sequence[int]]) -> list[LazyWeights]:
        if not contexts:
            return []
        rows = self._rows([self.forward(c) for c in contexts], contexts)
        return self.rows_to_weights(rows)

    # Carried states (see `Potential.state_of`): the forward weights -----------

    def state_of(self, context: Sequence[int]) -> Forward | None:
        """The forward weights `α` after `context` (None when no path reads it)."""
        check_byte_context(context)
        return self.forward(context)

    def advance(self, state: Forward | None, token: int) -> Forward | None:
        """`α T_b`, rescaled (one sparse product, or one table lookup when deterministic)."""
        return None if state is None else _step(self.automaton, state, token)

    def logw_next_of(self, state: Forward | None) -> np.ndarray:
        """`log(α M) - log(α · β)` for the state's `α`; when the automaton is
        deterministic `α` is one-hot at `q` (value 1), so the row is `log M[q] - log β[q]`."""
        a = self.automaton
        if state is None or not (state.alpha @ a.beta > 0):
            raise ValueError(f"a dead state has no next-token weights under {self!r}")
        if a.delta is None:
            return self._rows([state], [()])[0]
        q = q_prev(state)
        if self.boolean:
            return np.where(a.next_mass[q] > 0, 0.0, NEG_INF)
        return _log(a.next_mass[q]) - _log(a.beta[q])

    engine_form = "a BoolFSA built by from_regex"

    def engine_source(self) -> EngineSource | None:
        """A `BoolFSA.from_regex`'s pattern, which engine/ prints in the engine's
        syntax (or finds no exact form for); None for any other automaton."""
        if not self.boolean or self.pattern is None:
            return None
        return EngineSource("regex", self.pattern)

    def length_hint(self) -> str | None:
        """What shortens this pattern's texts (for the zero-weight warning); None for
        an automaton not read from a regex."""
        from genlm.control._length_hints import regex_hint

        return None if self.pattern is None else regex_hint(f"the regex {self.pattern!r}")

    def generic_coercion(self, other, f, prune, homomorphic, trie) -> Coerced:
        """A deterministic automaton through a homomorphic `f` gets `CoercedDFA`, whose
        `logw_next` reads a per-state table over the tokens; otherwise `Coerced`."""
        from genlm.control.constraints.fsa._fsa_coerce import CoercedDFA

        join = is_join(f) if homomorphic is None else homomorphic
        if self.automaton.delta is not None and join:
            return CoercedDFA(self, other, f, prune=prune, homomorphic=True, trie=trie)
        return super().generic_coercion(other, f, prune, homomorphic, trie)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.automaton.n_states} states)"

    def _repr_svg_(self) -> str:
        """The automaton drawn by Graphviz, for Jupyter (as in 0.4.1; needs the
        Graphviz `dot` program)."""
        return self.wfsa._repr_svg_()


class BoolFSA(WFSA):
    """A Boolean automaton over byte values: log weight 0 on its language, -inf off it.

    `prefix(ctx) = 0` iff some accepted string starts with `ctx`;
    `complete(ctx) = 0` iff `ctx` is accepted. Accepts a genlm-grammar WFSA in any
    real-valued semiring and keeps only the support of its weights.
    """

    boolean = True

    @classmethod
    def from_regex(
        cls,
        pattern: str,
        charset: Any = None,
        to_bytes: bool = True,
        semiring: str = "boolean",
        cache_size: int = 16384,
        *,
        max_states: int = MAX_STATES,
    ) -> "BoolFSA":
        """`WFSA.from_regex`'s automaton with weights 0/-inf.

        `semiring` is 0.4.1's: `"boolean"` (the default), or `"log"` (deprecated, with
        a `DeprecationWarning`), which only changes the semiring of `self.wfsa`;
        the weights are the same.

        Raises:
            ValueError: `semiring` is neither, and as `WFSA.from_regex`.
        """
        if semiring not in ("boolean", "log"):
            raise ValueError(f"semiring must be 'boolean' or 'log', got {semiring!r}")
        if semiring == "log":
            warn_user(
                "BoolFSA.from_regex(semiring='log') is deprecated: the automaton is Boolean "
                "whatever the semiring; only .wfsa is built in the Log semiring",
                DeprecationWarning,
            )
        fsa = super().from_regex(pattern, charset, to_bytes, cache_size, max_states=max_states)
        if semiring == "log":
            from genlm.grammar import Log

            fsa._semiring = Log
        return fsa


def _check_regex_options(charset: Any, to_bytes: Any) -> None:
    if charset is not None:
        raise ValueError(
            "from_regex(charset=...) is not supported: negated classes and '.' range over "
            "every byte; write the allowed characters into the pattern instead"
        )
    if to_bytes is not True:
        raise ValueError("from_regex(to_bytes=False) is not supported: the automata read bytes")


def _check_semiring(wfsa: Any, boolean: bool) -> Any:
    """`wfsa`, when `WFSA` (Float, Real or Log weights) or `BoolFSA` (any real-valued
    semiring, Boolean included) can read it.

    Raises:
        ValueError: "Unsupported semiring" otherwise (MaxPlus, say; Boolean for `WFSA`).
    """
    from genlm.grammar import Boolean, Float, Log
    from genlm.grammar.semiring import Real

    R = getattr(wfsa, "R", None)
    allowed = (Float, Log, Real) + ((Boolean,) if boolean else ())
    if R is not None and R not in allowed:
        names = ", ".join(r.__name__ for r in allowed)
        hint = " (a Boolean automaton is BoolFSA's)" if R is Boolean else ""
        raise ValueError(f"Unsupported semiring: {R.__name__}; {type_name(boolean)} takes {names}{hint}")
    return wfsa


def type_name(boolean: bool) -> str:
    return "BoolFSA" if boolean else "WFSA"


def _as_log(wfsa: Any, boolean: bool) -> Any:
    """A Float automaton as a Log-semiring copy (0.4.1's `WFSA.wfsa`); others unchanged."""
    from genlm.grammar import Float, Log

    if boolean or getattr(wfsa, "R", None) is not Float:
        return wfsa

    def log(w: Any) -> Any:
        return Log(math.log(w)) if w > 0 else Log.zero

    out = type(wfsa)(Log)
    for i, w in wfsa.I:
        out.add_I(i, log(w))
    for i, w in wfsa.F:
        out.add_F(i, log(w))
    for i, a, j, w in wfsa.arcs():
        out.add_arc(i, a, j, log(w))
    return out


def _rescale(alpha: np.ndarray, log_scale: float) -> Forward | None:
    top = float(alpha.max()) if len(alpha) else 0.0
    if not top > 0:
        return None
    return Forward(alpha / top, log_scale + float(np.log(top)))


def q_prev(fwd: Forward) -> int:
    return int(np.argmax(fwd.alpha))


def _step(a: ByteAutomaton, fwd: Forward, byte: int) -> Forward | None:
    check_byte_context((byte,))
    if a.delta is not None:  # deterministic: alpha is one-hot
        q = int(a.delta[int(np.argmax(fwd.alpha)), byte])
        if q < 0:
            return None
        alpha = np.zeros(a.n_states)
        alpha[q] = 1.0
        return Forward(alpha, 0.0 if a.boolean else fwd.log_scale + a.log_arc[q_prev(fwd), byte])
    t = a.trans[byte]
    if t is None:
        return None
    alpha = t.T @ fwd.alpha
    if a.boolean:
        alpha = (alpha > 0) * 1.0
        return Forward(alpha, 0.0) if alpha.any() else None
    return _rescale(alpha, fwd.log_scale)


__all__ = ["WFSA", "BoolFSA"]
