"""The compiled token-mask engine (llguidance) over a `PromptedLLM`'s token ids.

Three pieces, kept apart from the potential that uses them:

- `EngineVocab`: the engine's tokenizer, built from the backend's byte tokens (so
  the engine sees exactly the bytes our tokens have, special tokens included) and
  the index arrays mapping engine ids to rows over `vocab_eos`; built once per
  `TokenMaps` and shared.
- `compile_grammar`: a regex, Lark grammar or JSON schema to the engine's grammar,
  validated against the tokenizer (engine errors become ValueError).
- `mask_rows`: a block of packed bitmasks to `0/-inf` rows over `vocab_eos`, in one
  vectorised pass.
"""

from __future__ import annotations

import json
import os
import time
import weakref
from dataclasses import dataclass
from typing import Any, Literal, Protocol, Sequence, runtime_checkable

import numpy as np

from genlm.control._device import id_runs, is_tensor
from genlm.control._lru import LRU
from genlm.control.engine._guided_regex import ascii_classes
from genlm.control.weights import NEG_INF

Kind = Literal["regex", "lark", "json_schema"]
KINDS = ("regex", "lark", "json_schema")


def _llguidance():
    try:
        import llguidance
        import llguidance.numpy  # noqa: F401
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise ImportError("the compiled constraint engine needs `pip install llguidance`") from e
    return llguidance


class _ByteTokens:
    """The `TokenizerWrapper` protocol over a list of token byte strings.

    `__call__` (text → ids) is only used by the engine for forced text, never for
    masks; it is a greedy longest match over the tokens.
    """

    def __init__(self, tokens: list[bytes], eos_id: int):
        self.tokens = tokens
        self.eos_token_id = eos_id
        self.bos_token_id = None
        self.special_token_ids: list[int] = []
        self._ids = {}
        for i, t in enumerate(tokens):
            if t and i != eos_id:
                self._ids.setdefault(t, i)
        self._longest = max(len(t) for t in self._ids)

    def __call__(self, text: bytes | str) -> list[int]:
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        out, i = [], 0
        while i < len(data):
            for n in range(min(self._longest, len(data) - i), 0, -1):
                tid = self._ids.get(data[i : i + n])
                if tid is not None:
                    out.append(tid)
                    i += n
                    break
            else:
                raise ValueError(f"byte {data[i]:#x} is not a token")
        return out


@dataclass(frozen=True, eq=False)
class EngineVocab:
    """The engine's tokenizer and the maps between its ids and our rows.

    Attributes:
        tokenizer: the `llguidance.LLTokenizer`.
        vocab_ids: the token id of each entry of `vocab` (row position → id).
        eos_ids: the ids that all map to `EOS`.
        n_words: 32-bit words per packed mask.
    """

    tokenizer: Any
    vocab_ids: np.ndarray
    eos_ids: tuple
    n_words: int


_VOCABS: "weakref.WeakKeyDictionary[Any, EngineVocab]" = weakref.WeakKeyDictionary()


@runtime_checkable
class TokenVocabulary(Protocol):
    """What the engine reads of a language model's tokens (`lm.token_maps.TokenMaps`
    has it): the bytes of each token id (`decode`), the ids that end a sequence
    (`eos_idxs`), the potential's index tables (`tables`), and a context's ids
    (`context_ids`). The model hands it over; the engine never imports `lm/`."""

    decode: Any
    eos_idxs: Any
    tables: Any

    def context_ids(self, context: Any) -> Any: ...


def engine_vocab(token_maps: Any) -> EngineVocab:
    """The `EngineVocab` of a `PromptedLLM`'s `TokenMaps` (built once, then shared)."""
    hit = _VOCABS.get(token_maps)
    if hit is not None:
        return hit
    llg = _llguidance()
    tokens = [bytes(t) for t in token_maps.decode]
    eos_ids = tuple(int(i) for i in token_maps.eos_idxs)
    wrapper = llg.TokenizerWrapper(_ByteTokens(tokens, eos_ids[0]))
    tokenizer = llg.LLTokenizer(wrapper, eos_token=list(eos_ids))
    vocab_ids = np.array([t.token_id for t in token_maps.tables.vocab], dtype=np.int64)
    ev = EngineVocab(tokenizer, vocab_ids, eos_ids, (tokenizer.vocab_size + 31) // 32)
    _VOCABS[token_maps] = ev
    return ev


# The engine's "forcing" shortcut answers a state whose next bytes are forced with the
# one longest token that spells them (after " t" in " the.", only "he", not "h"), which
# drops every other tokenization of the same text from the mask; `prefix` accepts them.
# With forcing off the mask holds every token that extends the state.
NO_FORCING = '%llguidance {"no_forcing": true}\n'


def _without_forcing(lark: str) -> str:
    return NO_FORCING + lark


def grammar_text(kind: Kind, source: Any) -> str:
    """The engine's grammar for a regex (engine syntax), a Lark grammar or a JSON schema,
    with forcing off (`NO_FORCING`), so that its token masks hold every token the
    constraint allows.

    Raises:
        ValueError: unknown kind, or a schema that is not JSON.
        TypeError: a source of the wrong type.
    """
    llg = _llguidance()
    if kind not in KINDS:
        raise ValueError(f"unknown grammar kind {kind!r}: choose one of {list(KINDS)}")
    if kind == "json_schema":
        if not isinstance(source, (dict, bool, str)):
            raise TypeError(
                f"a JSON schema must be a dict, bool or str, got {type(source).__name__}"
            )
        try:
            schema = json.loads(source) if isinstance(source, str) else source
            _check_bounds(schema)
            return llg.LLMatcher.grammar_from_lark(_without_forcing(json_lark(schema)))
        except (ValueError, TypeError) as e:
            raise ValueError(f"invalid JSON schema: {e}") from None
    if not isinstance(source, str):
        raise TypeError(f"a {kind} grammar must be a str, got {type(source).__name__}")
    if kind == "regex":
        grammar = json.loads(llg.LLMatcher.grammar_from_regex(source))
        for g in grammar["grammars"]:
            g["lark_grammar"] = _without_forcing(g["lark_grammar"])
        return json.dumps(grammar)
    return llg.LLMatcher.grammar_from_lark(_without_forcing(ascii_classes(source)))


# Options that bring the engine's JSON closer to RFC 8259 (see docs/constraint-engines.md).
JSON_OPTIONS = {"whitespace_flexible": True, "json_allow_general_unicode_escapes": True}
# The engine's options for documents with no whitespace outside strings.
COMPACT_OPTIONS = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}


def spelling_options(spelling: str) -> dict:
    """The engine's JSON options nearest a JSON spelling (`JsonSchema(spelling=...)`):
    none for "any" (`JSON_OPTIONS`); compact separators and no whitespace for
    "compact"; and for "canonical" also no `\\uXXXX` escape of a printable character.
    The engine's own JSON is not exactly the spelling (see docs/constraint-engines.md)."""
    if spelling == "any":
        return {}
    options = dict(COMPACT_OPTIONS)
    if spelling == "canonical":
        options["json_allow_general_unicode_escapes"] = False
    return options


def with_spelling(schema: Any, spelling: str) -> Any:
    """`schema` (a dict, True or JSON text) with `spelling_options(spelling)` as its
    `x-guidance` options, the schema's own winning; unchanged for "any".

    Raises:
        ValueError: JSON text that is not JSON.
    """
    options = spelling_options(spelling)
    if not options:
        return schema
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as e:
            raise ValueError(f"invalid JSON schema: {e}") from None
    if schema is True:
        schema = {}
    if not isinstance(schema, dict):
        return schema
    return {**schema, "x-guidance": {**options, **schema.get("x-guidance", {})}}


_WIDE = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems",
         "minLength", "maxLength", "minProperties", "maxProperties")
_DATA = ("enum", "const", "default", "examples")  # values, not subschemas


def _check_bounds(schema: Any) -> None:
    """Refuses (ValueError) a bound or count outside the 64-bit integers
    `[-2**63, 2**63)`: the engine reads these as 64-bit numbers, clamps them (its
    language is then not the schema's), and with both integer bounds below `-2**63`
    it crashes the interpreter (SIGSEGV). Walks the subschemas iteratively; the
    values of `enum`, `const`, `default` and `examples` are data, skipped."""
    stack, seen = [(schema, "#")], 0
    while stack:
        node, where = stack.pop()
        seen += 1
        if seen > 1_000_000:
            return  # the schema checks (JsonSchema) bound the size; the engine decides the rest
        if isinstance(node, list):
            stack.extend((v, f"{where}/{i}") for i, v in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            if key in _DATA:
                continue
            wide = (isinstance(value, (int, float)) and not isinstance(value, bool)
                    and not -(2**63) <= value < 2**63)
            if key in _WIDE and wide:
                raise ValueError(
                    f"{key!r} = {value!r} at {where} is outside the 64-bit integers, as which the "
                    "engine reads it (it clamps it, or crashes on integer bounds below -2**63); "
                    'JsonSchema(schema).coerce(llm, f=b"".join) (engine=None) serves it exactly')
            stack.append((value, f"{where}/{key}"))


def json_lark(schema: Any) -> str:
    """A Lark grammar for the documents of `schema`, with RFC 8259 whitespace around
    the value and `\\uXXXX` escapes allowed in unconstrained strings. A schema's own
    `x-guidance` options (llguidance's JSON options) override these; with
    `"whitespace_flexible": false` the document is compact, inside and around."""
    if schema is True:
        schema = {}
    if not isinstance(schema, dict):
        raise TypeError(f"a JSON schema must be a dict or True, got {schema!r}")
    options = {**JSON_OPTIONS, **schema.get("x-guidance", {})}
    body = json.dumps({**schema, "x-guidance": options})
    if not options.get("whitespace_flexible"):
        return f"start: %json {body}\n"
    return f"start: WS? %json {body} WS?\nWS: /[ \\t\\n\\r]+/\n"


def compile_grammar(vocab: EngineVocab, kind: Kind, source: Any) -> str:
    """`grammar_text(kind, source)`, checked by the engine against `vocab`'s tokenizer.

    Raises:
        ValueError: carrying the engine's message, for a grammar, regex or schema
            the engine rejects.
    """
    llg = _llguidance()
    grammar = grammar_text(kind, source)
    error, messages = llg.LLMatcher.validate_grammar_with_warnings(grammar, vocab.tokenizer)
    if error:
        raise ValueError(f"the constraint engine rejects this {kind}: {messages[0]}")
    return grammar


def new_matcher(vocab: EngineVocab, grammar: str) -> Any:
    """A fresh matcher at the start of the grammar.

    Raises:
        ValueError: the engine's message, if the matcher starts in an error state.
    """
    m = _llguidance().LLMatcher(vocab.tokenizer, grammar, log_level=0)
    if m.is_error():
        raise ValueError(f"the constraint engine rejects this grammar: {m.get_error()}")
    return m


_EXECUTOR: list = []


class FillPace:
    """Which of the engine's two ways to fill a batch of masks is faster here,
    measured as the masks are filled: one matcher after another on this thread
    (`fill_next_token_bitmask`), or the engine's thread pool
    (`fill_next_token_bitmask_par`). Both write the same bits.

    The pool's hand-off costs more than most batches' whole fill: on a 2-core
    machine, 10 matchers of a regex over a 4k vocabulary filled in 0.13 ms one by
    one and 0.21 ms through the pool, and a JSON schema over 131k tokens in 0.10 ms
    and 0.24 ms. Where masks are costly and cores many, the pool wins. So the
    cheaper of the two, by a moving average of seconds per matcher, fills each
    batch, and every `EXPLORE`-th batch is filled the other way to keep both
    averages current. The choice changes speed only, never a mask."""

    EXPLORE = 64
    #: weight of the newest timing in each moving average
    RATE = 0.2

    def __init__(self, cores: int | None = None):
        if cores is None:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        self.cores = cores
        self.cost: list[float | None] = [None, None]  # seconds per matcher: [one by one, pool]
        self.batches = 0

    def pool(self) -> bool:
        """Whether the next batch (of two or more matchers) goes to the pool."""
        self.batches += 1
        if self.cores < 2:
            return False
        alone, pooled = self.cost
        if alone is None:
            return False
        if pooled is None:
            return True
        best = pooled < alone
        return not best if self.batches % self.EXPLORE == 0 else best

    def record(self, pooled: bool, seconds: float, matchers: int) -> None:
        """Add a batch's fill time to the average of the way it was filled."""
        each = seconds / max(matchers, 1)
        old = self.cost[pooled]
        self.cost[pooled] = each if old is None else old + self.RATE * (each - old)


#: The pace every fill reads (one per process: a mixed workload gets the average).
PACE = FillPace()


def fill_masks(vocab: EngineVocab, matchers: Sequence[Any], pace: FillPace | None = None) -> np.ndarray:
    """Packed token masks, one row of `n_words` int32 per (distinct) matcher, filled
    one by one or on the engine's thread pool, whichever `pace` (default `PACE`)
    measured faster."""
    llg = _llguidance()
    block = np.zeros((len(matchers), vocab.n_words), dtype=np.int32)
    if len(matchers) == 1:
        llg.numpy.fill_next_token_bitmask(matchers[0], block, 0)
        return block
    pace = PACE if pace is None else pace
    pooled = pace.pool()
    start = time.perf_counter()
    if pooled:
        if not _EXECUTOR:
            _EXECUTOR.append(llg.LLExecutor())
        llg.numpy.fill_next_token_bitmask_par(_EXECUTOR[0], [(m, i) for i, m in enumerate(matchers)], block)
    else:
        for i, m in enumerate(matchers):
            llg.numpy.fill_next_token_bitmask(m, block, i)
    pace.record(pooled, time.perf_counter() - start, len(matchers))
    return block


def mask_rows(vocab: EngineVocab, masks: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    """Rows over `vocab_eos`: `0` where the token's bit is set (or, for EOS, where the
    matcher accepts), `-inf` elsewhere.

    Args:
        masks: `(n, n_words)` int32 packed masks (bit `i % 32` of word `i // 32` is id `i`).
        accepting: `(n,)` bools.
    """
    return np.where(mask_allowed(vocab, masks, accepting), 0.0, NEG_INF)


def mask_allowed(vocab: EngineVocab, masks: np.ndarray, accepting: np.ndarray, ref: Any = None) -> Any:
    """Bool blocks over `vocab_eos` (True where `mask_rows` has 0): NumPy on the host,
    or, when `ref` is a torch tensor, unpacked on `ref`'s device from the packed
    words (a copy of `n_words` int32 per row goes there, never a row of floats).

    On the device each byte of the masks looks up its 8 bits in a 256-entry table
    (one `index_select`), which gives the bits in token-id order; the vocabulary's
    ids are then copied out run by run (a vocabulary is the model's ids minus a few
    EOS ids, so a handful of contiguous runs), or gathered when they are scattered.
    """
    if not is_tensor(ref):
        # C order, written run by run: a gather over the columns (and the layout
        # `concatenate` kept from it) gave a column-major block, which made every
        # pass of the draw over it several times slower
        runs, ids = _runs(vocab)
        if runs is not None and masks.size * 32 >= _SHIFT_BITS and len(ids) < 64 * ((masks.shape[1] + 1) // 2):
            # the packed words put in the vocabulary's order first, so one unpacking
            # writes the block (no second copy of it, run by run)
            words = _in_vocab_order(vocab, np.ascontiguousarray(masks), runs)
            out = np.unpackbits(words.view(np.uint8), axis=1, bitorder="little").view(bool)[:, : len(ids) + 1]
            out[:, -1] = accepting
            return out
        bits = np.unpackbits(np.ascontiguousarray(masks).view(np.uint8), axis=1, bitorder="little").view(bool)
        out = np.empty((len(masks), len(ids) + 1), dtype=bool)
        if runs is None:
            out[:, :-1] = bits[:, ids]
        else:
            for start, stop, at in runs:
                out[:, at : at + stop - start] = bits[:, start:stop]
        out[:, -1] = accepting
        return out
    import torch

    device = ref.device
    table, runs, ids = _unpacking(vocab, device)
    n = len(masks)
    raw = torch.as_tensor(np.ascontiguousarray(masks).view(np.uint8), device=device)
    bits = table.index_select(0, raw.reshape(-1).long()).reshape(n, -1)
    out = torch.empty(n, len(vocab.vocab_ids) + 1, dtype=torch.bool, device=device)
    if runs is None:
        out[:, :-1] = bits.index_select(1, ids)
    else:
        for start, stop, at in runs:
            out[:, at : at + stop - start] = bits[:, start:stop]
    out[:, -1] = torch.as_tensor(accepting, device=device)
    return out


#: Host masks of at least this many bits are put in the vocabulary's order while packed
#: (`_in_vocab_order`); smaller ones are unpacked and then copied run by run, which
#: costs less there (measured: 0.16 against 0.4-1.5 ms for 10 x 131k, 0.013 against
#: 0.006 ms for 10 x 4k).
_SHIFT_BITS = 1 << 18
_ONES = (1 << 64) - 1


def _in_vocab_order(vocab: EngineVocab, masks: np.ndarray, runs: list) -> np.ndarray:
    """Packed masks (`(n, n_words)` int32) as `(n, w)` uint64 words whose bit `j` is bit
    `vocab_ids[j]` of `masks`, for ids given as contiguous runs `(first id, stop id,
    position)`; the bits past the vocabulary are 0.

    A run's bits move down by `first id - position` (never negative: the ids
    increase), which is a shift of the whole row by whole words and bits; each run
    keeps the bits of its own positions (`_run_masks`)."""
    n, w32 = masks.shape
    w = (w32 + 1) // 2
    shifts = _run_masks(vocab, runs, w)
    reach = max(q for q, _, _ in shifts) + 1  # the spare words a shift reads past the row
    src = np.zeros((n, w + reach), dtype=np.uint64)
    src.view(np.uint32)[:, :w32] = masks.view(np.uint32)
    out = np.zeros((n, w), dtype=np.uint64)
    for q, r, keep in shifts:
        moved = src[:, q : q + w]
        if r:
            moved = np.right_shift(moved, np.uint64(r)) | np.left_shift(src[:, q + 1 : q + 1 + w], np.uint64(64 - r))
        out |= moved & keep
    return out


def _run_masks(vocab: EngineVocab, runs: list, w: int) -> list:
    """Per run: the shift down as (words, bits), and the `w` words with the bits of
    the run's positions set; cached per vocabulary."""

    def make() -> list:
        shifts = []
        for start, stop, at in runs:
            q, r = divmod(start - at, 64)
            keep = np.zeros(w, dtype=np.uint64)
            lo, hi = at, at + stop - start
            if hi > lo:
                a, b = lo // 64, (hi - 1) // 64
                keep[a : b + 1] = np.uint64(_ONES)
                keep[a] &= np.uint64((_ONES << (lo % 64)) & _ONES)
                top = hi - 64 * b  # the bits of word b kept: [0, top)
                if top < 64:
                    keep[b] &= np.uint64((1 << top) - 1)
            shifts.append((q, r, keep))
        return shifts

    return _per_vocab(_SHIFTS, vocab, w, make)


#: Per vocabulary (and device): its runs of ids and the byte → bits table. Bounded, since
#: an entry holds its vocabulary; a process rarely serves more than a few at once.
_UNPACKING: LRU = LRU(8)
_RUNS: LRU = LRU(8)
_SHIFTS: LRU = LRU(8)
_MAX_RUNS = 16


def _unpacking(vocab: EngineVocab, device: Any) -> tuple:
    """The byte → bits table on `device`, and the vocabulary's ids as contiguous runs
    `(first id, stop id, position)` (None when there are more than `_MAX_RUNS`, then
    the ids as a tensor to gather with); cached per vocabulary and device."""
    import torch

    def make() -> tuple:
        byte_bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little")
        runs, ids = _runs(vocab)
        return torch.as_tensor(byte_bits.astype(bool), device=device), runs, torch.as_tensor(ids, device=device)

    return _per_vocab(_UNPACKING, vocab, str(device), make)


def _runs(vocab: EngineVocab) -> tuple[list | None, np.ndarray]:
    """The vocabulary's ids as contiguous runs `(first id, stop id, position)` (None
    when there are more than `_MAX_RUNS`), and the ids; cached per vocabulary."""
    def make() -> tuple:
        ids = np.asarray(vocab.vocab_ids)
        return id_runs(ids, _MAX_RUNS), ids

    return _per_vocab(_RUNS, vocab, None, make)


def _per_vocab(cache: LRU, vocab: EngineVocab, detail: Any, make: Any) -> Any:
    """`make()` kept in `cache` under the vocabulary (by identity, with `detail`): an
    entry holds its vocabulary, so an id reused by a later one never hits it."""
    key = (id(vocab), detail)
    got = cache.get(key)
    if got is None or got[0] is not vocab:
        got = (vocab, make())
        cache.put(key, got)
    return got[1]


__all__ = [
    "TokenVocabulary",
    "EngineVocab",
    "mask_allowed",
    "KINDS",
    "compile_grammar",
    "engine_vocab",
    "fill_masks",
    "grammar_text",
    "mask_rows",
    "new_matcher",
]
