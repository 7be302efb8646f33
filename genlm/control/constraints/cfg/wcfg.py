"""Weighted and Boolean context-free grammars over bytes, parsed incrementally (Earley)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from genlm.grammar import CFG, Boolean, Earley, Float
from genlm.grammar.cfglm import EOS as GRAMMAR_EOS
from genlm.grammar.cfglm import add_EOS

from genlm.control._state_cache import PrefixStateCache
from genlm.control.constraints.cfg._cfg_lark import BYTE_SYMBOLS, lark_to_cfg, read_lark
from genlm.control.constraints.fsa.wfsa import BYTE_VOCAB, check_byte_context
from genlm.control.constraints.recognizer import CachedRecognizer
from genlm.control.constraints.regex.automaton import N_BYTES, weight_to_float
from genlm.control.potential.coerce import Coerced
from genlm.control.potential.planner import EngineSource
from genlm.control.weights import NEG_INF, LazyWeights

Chart = tuple  # Earley columns after a context, one per position
EARLEY_MAX_RULES = 2000  # default limit on byte-level rules for the Earley parser


def _log(w: float) -> float:
    return float(np.log(w)) if w > 0 else NEG_INF


def byte_symbol_cfg(cfg: CFG) -> CFG:
    """`cfg` with every terminal a one-byte `bytes`: strings become their UTF-8 bytes,
    byte values (ints) their one-byte strings.

    Raises:
        ValueError: for a terminal that is none of these.
    """
    if any(isinstance(v, str) for v in cfg.V):
        cfg = cfg.to_bytes()
    if all(isinstance(v, bytes) and len(v) == 1 for v in cfg.V):
        return cfg
    bad = [v for v in cfg.V if not (isinstance(v, int) and 0 <= v < N_BYTES)]
    if bad:
        raise ValueError(f"grammar terminals {bad[:5]!r} are not byte values or strings")
    new = cfg.spawn(V={BYTE_SYMBOLS[v] for v in cfg.V})
    for r in cfg:
        new.add(r.w, r.head, *(BYTE_SYMBOLS[y] if cfg.is_terminal(y) else y for y in r.body))
    return new


def _as_bytes(context: Sequence[Any]) -> list:
    """`context` with each `str` token replaced by its UTF-8 bytes."""
    out: list = []
    for token in context:
        out.extend(token.encode("utf-8") if isinstance(token, str) else (token,))
    return out


class WCFG(CachedRecognizer):
    """A weighted context-free grammar over byte values (0..255) as a potential.

    With `G(x)` the total weight of the derivations of string `x`:

        complete(ctx) = log G(ctx),   prefix(ctx) = log Σ_y G(ctx · y)

    Prefix weights come from Earley's algorithm on the grammar's prefix grammar
    (genlm-grammar). Earley charts are carried per context in a bounded LRU cache and
    extended by one column per byte; `logw_next` reads every next byte's prefix
    weight off the last column at once.

    A grammar over characters (or strings) is parsed over their UTF-8 bytes; its
    `cfg` attribute is the grammar as given, and a context may hold characters
    (each read as its bytes) as well as byte values, as 0.4.1's `WCFG` read them.

    Args:
        cfg: a `genlm.grammar.CFG` whose terminals are byte values, or single
            characters / strings (parsed as their UTF-8 bytes).
        cache_size: the most charts kept.
        max_rules: the most byte-level rules the Earley parser is built for (default
            `EARLEY_MAX_RULES`; its preprocessing costs about a millisecond per rule).
            The parser is built on first use, so a grammar served by the compiled
            engine (`coerce` onto a `PromptedLLM`) never pays for it.

    Raises:
        ValueError: a Boolean grammar given to `WCFG` (it is `BoolCFG`'s), as in 0.4.1;
            on first use, when the grammar has more than `max_rules` rules.
    """

    boolean = False
    stateful = True
    lark_grammar: str | None = None  # the text of `from_lark`
    lark_parsed: Any = None  # its parse

    def __init__(self, cfg: CFG, cache_size: int = 4096, *, max_rules: int = 0):
        if not isinstance(cfg, CFG):
            raise TypeError(f"expected a genlm.grammar.CFG, got {type(cfg).__name__}")
        if not self.boolean and cfg.R is Boolean:
            raise ValueError(
                "Unsupported semiring: Boolean; WCFG needs real weights (Float, Real or Log), "
                "a Boolean grammar is BoolCFG's"
            )
        if self.boolean and cfg.R is not Boolean:
            cfg = cfg.map_values(lambda w: Boolean(weight_to_float(w) > 0), Boolean)
        # A grammar over characters reads a context of characters too (as 0.4.1's
        # WCFG did), each as its UTF-8 bytes; `cfg` stays the grammar as given.
        self.characters = any(isinstance(v, str) for v in cfg.V)
        given, cfg = cfg, byte_symbol_cfg(cfg)
        if not isinstance(cache_size, int) or cache_size < 1:
            raise ValueError(f"cache size must be at least 1, got {cache_size}")
        self.byte_cfg = cfg
        self.cfg = given if self.characters else cfg
        # terminal bytes: a context with any other byte has weight zero
        self.alphabet = frozenset(v[0] for v in cfg.V)
        self.cache_size = cache_size
        self.max_rules = max_rules or EARLEY_MAX_RULES
        self._model: Earley | None = None
        super().__init__(BYTE_VOCAB)
        self._init_cache()

    @property
    def model(self) -> Earley:
        """The Earley parser of the grammar's prefix grammar (built on first use).

        Raises:
            ValueError: the grammar has more than `max_rules` rules.
        """
        if self._model is None:
            if len(self.byte_cfg) > self.max_rules:
                raise ValueError(
                    f"the grammar has {len(self.byte_cfg)} byte-level rules, more than the Earley "
                    f"parser's limit max_rules={self.max_rules} (raise it, or coerce a "
                    "BoolCFG.from_lark onto a PromptedLLM to use the compiled engine)"
                )
            self._model = Earley(add_EOS(self.byte_cfg, GRAMMAR_EOS).prefix_grammar)
        return self._model

    @property
    def cfg_eos(self) -> CFG:
        """`cfg` with the end marker appended to its language (`S' → S EOS`), as 0.4.1
        named it: `cfg_eos.prefix_grammar(x)` is the weight of the strings that start
        with `x`, the EOS-terminated ones included."""
        return add_EOS(self.cfg, GRAMMAR_EOS)

    def _init_cache(self) -> None:
        self._cache_obj: PrefixStateCache[Chart] | None = None

    @property
    def _cache(self) -> PrefixStateCache[Chart]:
        if self._cache_obj is None:
            self._cache_obj = PrefixStateCache(
                (self.model._initial_column,), self._extend, self.cache_size
            )
        return self._cache_obj

    def _extend(self, chart: Chart, token: Any) -> Chart | None:
        symbol = BYTE_SYMBOLS[token] if token is not GRAMMAR_EOS else token
        if not chart[-1].waiting_for.get(symbol):  # no item can scan `token`
            return None
        return chart + (self.model.next_column(chart, symbol),)

    @classmethod
    def from_string(
        cls, grammar: str, cache_size: int = 4096, *, max_rules: int = 0, **kwargs
    ) -> "WCFG":
        """From genlm-grammar's text format, one rule per line: `weight: HEAD -> body ...`.

        Terminals are the symbols starting with a lower-case letter (as in
        `genlm.grammar.CFG.from_string`, whose keyword arguments pass through);
        a terminal string is read as its UTF-8 bytes.

        Raises:
            ValueError: naming the line that does not parse.
        """
        semiring = Boolean if cls.boolean else Float
        if not isinstance(grammar, str):
            raise TypeError(f"a grammar must be a str, got {type(grammar).__name__}")
        try:
            cfg = CFG.from_string(grammar, semiring, **kwargs)
        except (ValueError, AssertionError) as e:
            raise ValueError(f"invalid grammar: {e}") from None
        if not cfg.rhs.get(cfg.S):
            raise ValueError(f"invalid grammar: no rule for the start symbol {cfg.S!r}")
        # a grammar over bytes, as 0.4.1's from_string(to_bytes=True) made it
        return cls(byte_symbol_cfg(cfg), cache_size, max_rules=max_rules)

    @classmethod
    def from_lark(
        cls,
        grammar: str,
        cache_size: int = 4096,
        *,
        base_dir: str | None = None,
        max_rules: int = 0,
    ) -> "WCFG":
        """From a Lark grammar (see `_cfg_lark` for the exact language accepted).

        Args:
            grammar: the grammar text.
            base_dir: the folder a relative `%import .name` reads `name.lark` from (the
                grammar file's folder, when the grammar came from a file). Without it a
                relative import is a ValueError. `%import common.WORD` (Lark's bundled
                grammars) always works; no other file is opened.
            max_rules: the Earley parser's rule limit (see `WCFG`).

        Raises:
            TypeError: if `grammar` is not a str.
            ValueError: naming the problem, for a grammar Lark rejects, one without a
                `start` rule, an `%import` that cannot be resolved, an empty language,
                or a grammar over the size limits (see `_cfg_lark`).
        """
        if not isinstance(grammar, str):
            raise TypeError(f"a Lark grammar must be a str, got {type(grammar).__name__}")
        parsed = read_lark(grammar, base_dir)
        cfg = cls(
            lark_to_cfg(parsed, Boolean if cls.boolean else Float), cache_size, max_rules=max_rules
        )
        cfg.lark_grammar, cfg.lark_parsed = grammar, parsed
        return cfg

    engine_form = "a BoolCFG built by from_lark"

    def engine_source(self) -> EngineSource | None:
        """A `BoolCFG.from_lark`'s grammar text and its parsed form, from which
        engine/ prints the engine's grammar and decides whether the languages are
        equal (the lexing rule, see docs/constraint-engines.md); None for any other
        grammar."""
        if not self.boolean or self.lark_parsed is None:
            return None
        return EngineSource("lark", self.lark_grammar, parsed=self.lark_parsed)

    def regular_form(self) -> Any:
        """A `BoolFSA` of exactly this grammar's language where it is regular (a
        `from_lark` grammar without recursion other than Lark's repeats and without
        `%ignore`: `_cfg_regular`), else None; kept after the first call. The engine
        coercion reads the budget (the fewest tokens to a complete document) off it,
        exactly, where the grammar's own bound is a weak lower bound."""
        if "_regular" not in self.__dict__:
            from genlm.control.constraints.cfg._cfg_regular import regular_pattern
            from genlm.control.constraints.fsa.wfsa import BoolFSA

            found = None
            if self.boolean and self.lark_parsed is not None:
                pattern = regular_pattern(self.lark_parsed)
                try:
                    found = None if pattern is None else BoolFSA.from_regex(pattern)
                except ValueError:  # over the automaton's limits
                    found = None
            self._regular = found
        return self._regular

    def length_hint(self) -> str | None:
        """What shortens this grammar's texts (for the zero-weight warning); None for
        a grammar not read from Lark."""
        from genlm.control._length_hints import lark_hint

        return None if self.lark_grammar is None else lark_hint(self.lark_grammar)

    def generic_coercion(self, other, f, prune, homomorphic, trie) -> Coerced:
        """`Coerced` by Earley over bytes, with a bound on the tokens left to a complete
        document (`CoercedCFG`); the parser is built now (or fails on size)."""
        from genlm.control.constraints.cfg._cfg_budget import CoercedCFG

        _ = self.model
        return CoercedCFG(self, other, f, prune=prune, homomorphic=homomorphic, trie=trie)

    # Weights -----------------------------------------------------------------

    def chart(self, context: Sequence[int]) -> Chart | None:
        """The Earley columns after `context` (None when no derivation reads it). A
        grammar over characters reads a character (a `str`) as its UTF-8 bytes."""
        if self.characters and any(isinstance(t, str) for t in context):
            context = _as_bytes(context)
        check_byte_context(context)
        return self._cache.get(context)

    def _value(self, w: Any) -> float:
        x = weight_to_float(w) if w is not None else 0.0
        if self.boolean:
            return 0.0 if x > 0 else NEG_INF
        return _log(x)

    def _prefix_of_chart(self, chart: Chart | None) -> float:
        if chart is None:
            return NEG_INF
        model = self.model
        if len(chart) == 1:
            rules = model.cfg.rhs.get(model.cfg.S, [])
            return self._value(sum((r.w for r in rules if r.body == ()), model.cfg.R.zero))
        return self._value(chart[-1].c_chart.get((0, model.cfg.S)))

    async def prefix(self, context: Sequence[int]) -> float:
        return self._prefix_of_chart(self.chart(context))

    async def complete(self, context: Sequence[int]) -> float:
        chart = self.chart(context)
        if chart is None:
            return NEG_INF
        return self._prefix_of_chart(self._extend(chart, GRAMMAR_EOS))

    def _row(self, context) -> np.ndarray:
        chart = self.chart(context)
        total = self._prefix_of_chart(chart)
        if total == NEG_INF:
            raise ValueError(f"context {list(context)!r} has weight zero under {self!r}")
        return self._chart_row(chart, total)

    def _chart_row(self, chart: Chart, total: float) -> np.ndarray:
        row = np.full(N_BYTES + 1, NEG_INF)
        for y, w in self.model.next_token_weights(chart).items():
            row[N_BYTES if y == GRAMMAR_EOS else y[0]] = self._value(w)
        return row if self.boolean else row - total

    async def logw_next(self, context: Sequence[int]) -> LazyWeights:
        """`log Σ_y G(ctx·x·y) - log Σ_y G(ctx·y)` for every byte `x`, and EOS."""
        return self.make_lazy_weights(self._row(context))

    async def batch_logw_next(self, contexts) -> list[LazyWeights]:
        if not contexts:
            return []
        return self.rows_to_weights(np.stack([self._row(c) for c in contexts]))

    # Carried states (see `Potential.state_of`): the Earley chart ---------------

    def state_of(self, context: Sequence[int]) -> Chart | None:
        """The Earley columns after `context` (None when no derivation reads it)."""
        return self.chart(context)

    def advance(self, state: Chart | None, token: int) -> Chart | None:
        """The chart with one more column, for byte `token` (a character of a grammar
        over characters: one column per UTF-8 byte)."""
        tokens = _as_bytes((token,)) if self.characters and isinstance(token, str) else (token,)
        check_byte_context(tokens)
        for byte in tokens:
            if state is None:
                return None
            state = self._extend(state, byte)
        return state

    def logw_next_of(self, state: Chart | None) -> np.ndarray:
        """`log Σ_y G(ctx·x·y) - log Σ_y G(ctx·y)` off the chart's last column."""
        total = self._prefix_of_chart(state)
        if total == NEG_INF:
            raise ValueError(f"a dead state has no next-token weights under {self!r}")
        return self._chart_row(state, total)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.byte_cfg)} rules)"

    def _repr_html_(self) -> str:
        """The grammar's rules as HTML, for Jupyter (as in 0.4.1)."""
        return self.cfg._repr_html_()


class BoolCFG(WCFG):
    """A Boolean context-free grammar over bytes: 0 on its language (and its
    prefixes, for `prefix`), -inf elsewhere. Rule weights only matter through
    their support."""

    boolean = True


__all__ = ["WCFG", "BoolCFG"]
