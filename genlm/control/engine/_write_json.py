"""A compiled JSON schema as a Lark grammar whose language is `JsonSchema`'s.

`schema_grammar(root)` writes the graph of `_json_schema` nodes as a grammar for
`BoolCFG.from_lark` (scannerless, `%ignore` whitespace between terminals), or says
which shape it cannot write. The grammar then goes through the Lark translation
(`_lark_exact.engine_lark`), whose lexing rule proves the engine's language equal to
the grammar's; so the engine serves exactly `JsonSchema`'s documents.

The grammar is `JsonSchema`'s reading of a document, rule for rule
(`_json_machine`):

- whitespace is `[ \\t\\n\\r]+` between any two tokens and around the document, and
  nowhere inside a token (`%ignore`), in the JSON spelling "any"; in "compact" and
  "canonical" (`JsonSchema(spelling=...)`), there is none;
- a string is `"` then characters then `"`: a character is a code point of at least
  U+0020 other than `"` and `\\` written raw, or an escape `\\" \\\\ \\/ \\b \\f \\n \\r
  \\t`, or `\\uXXXX` (hex digits of either case) naming a code point outside the
  surrogates, or a surrogate pair `\\uD8XX\\uDCXX`; one character counts one toward
  `minLength`/`maxLength`; `enum`/`const` strings are every spelling of their text;
  in the spelling "canonical", each character has its one canonical spelling
  (`_json_spelling.CANONICAL_ESCAPES` for `"`, `\\` and the control characters, raw
  otherwise), so strings and keys have one spelling each;
- numbers: `-?(0|[1-9][0-9]*)`, then for `number` an optional fraction and exponent;
  an `integer` in any range (its spellings as a regex, `-0` being 0), a `number`
  without bounds or with the lower bound 0 alone (`-0`, `0.0e5` are 0); a `number`
  with other bounds is not regular (`NeedsCheck`): it is written as the subset of
  its spellings without exponent (`Spelling.SUB`) or the superset of those plus
  every spelling with an exponent (`Spelling.SUP`), and the engine coercion checks the
  tokens between the two exactly (`_json_checked`); where the bounds decide by sign
  alone which mantissas an exponent brings within them (`exponent_mantissas`: a
  range holding 0, or a decade wide), the superset is `Spelling.GATED`, exact on
  every spelling without an exponent (the spellings without exponent within the
  bounds, plus those mantissas with any exponent);
- a string with a `pattern` or a checked `format`: the JSON spellings of the
  strings of its regex (`_write_json_strings`);
- `true`, `false`, `null` as written;
- an object: members in any order; a key is compared by its decoded text; a name
  declared in `properties` or `required` appears at most once (its value is its
  property's, or `additionalProperties`'), every required name appears, and any other
  key appears any number of times with a value of `additionalProperties` (none when
  that is false). The grammar has one rule per set of declared names already written
  (so objects with at most `MAX_NAMES` such names, `MAX_NAMES_OPEN` where other keys
  are allowed), and the keys as terminals: each
  declared name as all its spellings, the other keys as the strings whose text is
  none of the names;
- an array: items `fixed[0], fixed[1], ...` then `items`, between `minItems` and
  `maxItems` of them;
- a node with several alternatives is their union.

What it does not write (a `pattern` beside a length bound or a format, a hostname
format, allowed values on numbers): `Written.UNWRITABLE`, and the schema keeps the generic
path. A schema `JsonSchema` reads as a superset on prefixes (`Compiled.inexact`) is
written all the same: its grammar is exactly the recognizer's prefix language, and
the engine coercion checks the whole document at EOS as `JsonSchema.complete` does.
"""

from __future__ import annotations

from enum import Enum
from itertools import combinations
from typing import NamedTuple

from genlm.control.constraints.json_schema import (
    SIMPLE_ESCAPES,
    Arr,
    Lit,
    Node,
    Num,
    Obj,
    Str,
)
from genlm.control.engine._write_json_numbers import (
    NeedsCheck,
    Spelling,
    Unwritable,
    number_regex,
)
from genlm.control.engine._write_json_strings import (
    SURROGATES,
    canonical_set,
    complement,
    pattern_regex,
)

MAX_NAMES = 6  # declared names of one object: 2**MAX_NAMES rules
MAX_NAMES_OPEN = 4  # ... of one that takes other keys too (its lexing check costs seconds beyond)
MAX_RULES = 3000
MAX_COUNT = 256  # minItems, maxItems, minLength, maxLength written as repeats
# Longest declared key name written: the other keys' regex nests one group per
# character of a name, which neither `other_key_regex` nor the engine's parser
# should recurse through without bound (a longer name: the generic path serves it)
MAX_KEY_CHARS = 256
WS = r"/[ \t\n\r]+/"
_ESCAPE_OF = {v: k for k, v in SIMPLE_ESCAPES.items()}


class Written(Enum):
    """What `schema_grammar` wrote."""

    GRAMMAR = "grammar"  # the grammar of the documents (of the bounding set, for SUB/SUP/GATED)
    NEEDS_CHECK = "needs check"  # a bounded number: write it as SUB and SUP (or GATED)
    UNWRITABLE = "unwritable"  # a shape the writer does not write, or over its limits


class SchemaGrammar(NamedTuple):
    """The outcome of `schema_grammar`: the grammar text where `written` is
    `Written.GRAMMAR` (else None), and why it is not written otherwise."""

    written: Written
    grammar: str | None = None
    reason: str | None = None


def schema_grammar(root: Node, spelling: Spelling = Spelling.EXACT,
                   json_spelling: str = "any") -> SchemaGrammar:
    """The Lark grammar of the documents of `root` (see the module docstring); with
    `spelling` `SUB`, `SUP` or `GATED`, bounded numbers as the subset or supersets of
    their spellings that `_write_json_numbers.number_regex` writes for it; with
    `json_spelling` "compact" or "canonical", no whitespace (and for "canonical",
    the canonical spelling of every string and key).

    Returns `Written.NEEDS_CHECK` for a bounded number with `Spelling.EXACT` (write
    it as `SUB` and `SUP`, or `GATED`) and for a bound `GATED` cannot gate (`SUP`);
    `Written.UNWRITABLE` for a shape outside the ones above, or a grammar over the limits.
    """
    w = _Writer(spelling, json_spelling == "canonical")
    try:
        top = w.node(root)
    except NeedsCheck as e:
        return SchemaGrammar(Written.NEEDS_CHECK, None, str(e))
    except Unwritable as e:
        return SchemaGrammar(Written.UNWRITABLE, None, str(e))
    lines = [f"start: {top}"]
    lines += [f"{name}: {body}" for name, body in w.rules.items()]
    lines += [f"{name}: /{pattern}/" for pattern, name in w.terminals.items()]
    if json_spelling == "any":
        lines += [f"WS: {WS}", "%ignore WS"]
    return SchemaGrammar(Written.GRAMMAR, "\n".join(lines) + "\n")


class _Writer:
    def __init__(self, spelling: Spelling = Spelling.EXACT, canonical: bool = False):
        self.spelling = spelling
        self.canonical = canonical
        self.rules: dict[str, str] = {}
        self.terminals: dict[str, str] = {}  # regex -> terminal name
        self.names: dict[int, str] = {}  # id(node) -> rule name

    def rule(self, body: str) -> str:
        name = f"r{len(self.rules)}"
        self.rules[name] = body
        if len(self.rules) > MAX_RULES:
            raise Unwritable(f"more than {MAX_RULES} rules")
        return name

    def terminal(self, pattern: str) -> str:
        if pattern not in self.terminals:
            self.terminals[pattern] = f"T{len(self.terminals)}"
        return self.terminals[pattern]

    def node(self, node: Node) -> str:
        if id(node) in self.names:
            return self.names[id(node)]
        if not node.alts:
            raise Unwritable("a value that no document has")
        name = self.rule("")
        self.names[id(node)] = name
        self.rules[name] = " | ".join(self.alt(a) for a in node.alts)
        return name

    def alt(self, a) -> str:
        if isinstance(a, Lit):
            return '"' + a.text.decode("ascii") + '"'
        if isinstance(a, Num):
            return self.terminal(number_regex(a, self.spelling))
        if isinstance(a, Str):
            return self.terminal(string_regex(a, self.canonical))
        if isinstance(a, Arr):
            return self.array(a)
        if isinstance(a, Obj):
            return self.object(a)
        raise Unwritable(f"an alternative {type(a).__name__}")

    def array(self, a: Arr) -> str:
        lo, hi = a.min_items, a.max_items
        if lo > MAX_COUNT or (hi is not None and hi > MAX_COUNT) or len(a.fixed) > MAX_COUNT:
            raise Unwritable(f"an array with more than {MAX_COUNT} counted items")

        def item(i):  # the rule of item i, None where there is none
            n = a.fixed[i] if i < len(a.fixed) else a.items
            if n is None or not n.alts or (hi is not None and i >= hi):
                return None
            return self.node(n)

        # tail(i): what follows item i-1 (i items written), up to the closing bracket
        loop_at = max(lo, len(a.fixed))
        tails: dict[int, str] = {}

        def tail(i):
            key = min(i, loop_at) if hi is None else i
            if key in tails:
                return tails[key]
            name = tails[key] = self.rule("")
            nxt = item(key)
            alts = ['"]"'] if key >= lo else []
            if nxt is not None:
                more = tail(key + 1)
                if more is not None:
                    alts.append(f'"," {nxt} {more}')
            if not alts:
                raise Unwritable("an array that no document has")
            self.rules[name] = " | ".join(alts)
            return name

        alts = ['"[" "]"'] if lo == 0 else []
        first = item(0)
        if first is not None:
            alts.append(f'"[" {first} {tail(1)}')
        if not alts:
            raise Unwritable("an array that no document has")
        return "(" + " | ".join(alts) + ")"

    def object(self, a: Obj) -> str:
        other = a.additional if a.additional is not None and a.additional.alts else None
        named = set(a.props) | set(a.required)
        values = {}
        for k in sorted(named):  # in sorted order, so the rule names do not hang on hash order
            v = a.props.get(k, a.additional)
            if v is not None and v.alts:
                values[k] = self.node(v)
        if not set(a.required) <= set(values):
            raise Unwritable("an object that no document has")
        limit = MAX_NAMES if other is None else MAX_NAMES_OPEN
        if len(values) > limit:
            raise Unwritable(f"an object with more than {limit} declared names")
        if any(len(k) > MAX_KEY_CHARS for k in named):
            raise Unwritable(f"a key name over {MAX_KEY_CHARS} characters")
        keys = {k: self.terminal(key_regex(k, self.canonical)) for k in sorted(values)}
        other_member = None
        if other is not None:
            other_key = self.terminal(other_key_regex(named, self.canonical))
            other_member = f'{other_key} ":" {self.node(other)}'
        order = sorted(values)
        live = _live_rests(a, order, other_member is not None)
        members = {}  # frozenset seen -> rule name of "the rest, from a member on"
        sets = [frozenset(c) for n in range(len(order), -1, -1) for c in combinations(order, n)]
        for seen in sets:  # supersets first: each rest refers to larger sets only (or itself)
            if seen not in live:
                continue
            name = members[seen] = self.rule("")
            alts = []
            for k in order:
                if k in seen:
                    continue
                after, member = seen | {k}, f'{keys[k]} ":" {values[k]}'
                if a.required <= after:
                    alts.append(f'{member} "}}"')
                if after in live:
                    alts.append(f'{member} "," {members[after]}')
            if other_member is not None:
                if a.required <= seen:
                    alts.append(f'{other_member} "}}"')
                alts.append(f'{other_member} "," {name}')
            self.rules[name] = " | ".join(alts)
        alts = ['"{" "}"'] if not a.required else []
        if frozenset() in live:
            alts.append(f'"{{" {members[frozenset()]}')
        return "(" + " | ".join(alts) + ")"


def _live_rests(a: Obj, order: list, other: bool) -> set:
    """The sets of written names from which some member list can still close the object."""
    live: set = set()
    for n in range(len(order), -1, -1):
        for c in combinations(order, n):
            seen = frozenset(c)
            can = other and a.required <= seen
            for k in order:
                if k not in seen and (a.required <= seen | {k} or (seen | {k}) in live):
                    can = True
            if can:
                live.add(seen)
    return live


# Strings, as regexes over code points (`/.../` in Lark; no raw `/` or `"` in them) ----


def _lit(cp: int) -> str:
    """Code point `cp` as a regex atom."""
    c = chr(cp)
    if c.isascii() and c.isalnum():
        return c
    if 0x20 <= cp < 0x7F:  # a regex escape: Lark reads \\xHH as the character itself
        return "\\" + c
    if cp < 0x100:
        return f"\\x{cp:02x}"
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def _hexcase(value: int) -> str:
    """The four hex digits of `value`, each letter in either case."""
    out = []
    for d in f"{value:04x}":
        out.append(d if d.isdigit() else f"[{d}{d.upper()}]")
    return "".join(out)


def _digits(ds: list[int]) -> str:
    chars = "".join(f"{d:x}" + (f"{d:x}".upper() if d > 9 else "") for d in ds)
    return f"[{chars}]" if len(chars) > 1 else chars


def _hex_except(excluded: set, lo: int = 0, width: int = 4) -> str | None:
    """A regex of the `width` hex digits spelling a value in `[lo, lo + 16**width)`
    that is neither in `excluded` nor a surrogate; None: no such value."""
    size = 16 ** (width - 1)
    free, parts = [], []
    for d in range(16):
        a, b = lo + d * size, lo + (d + 1) * size
        if SURROGATES.start <= a and b <= SURROGATES.stop:
            continue
        blocked = any(a <= x < b for x in excluded) or (a < SURROGATES.stop and SURROGATES.start < b)
        if not blocked:
            free.append(d)
        elif width > 1:
            rest = _hex_except(excluded, a, width - 1)
            if rest is not None:
                parts.append(_digits([d]) + rest)
    if free:
        parts.insert(0, _digits(free) + ("[0-9a-fA-F]" + f"{{{width - 1}}}" if width > 1 else ""))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"


def char_except(excluded: set, canonical: bool = False) -> str:
    """One string character (raw or escaped; its canonical spelling alone where
    `canonical`) whose code point is not in `excluded`."""
    if canonical:
        return canonical_set(complement(excluded))
    if any(cp > 0xFFFF for cp in excluded):
        raise Unwritable("a key or value with a code point beyond U+FFFF")
    raw = "".join(_lit(cp) for cp in sorted(excluded) if cp >= 0x20 and cp not in (0x22, 0x5C))
    alts = [f"[^\\x00-\\x1f\\x22\\\\{raw}]"]
    simple = "".join(_lit(ord(k)) for k, v in SIMPLE_ESCAPES.items() if ord(v) not in excluded)
    if simple:
        alts.append(f"\\\\[{simple}]")
    hexes = _hex_except(excluded)
    if hexes is not None:
        alts.append("\\\\u" + hexes)
    alts.append("\\\\u[dD][89abAB][0-9a-fA-F]{2}\\\\u[dD][c-fC-F][0-9a-fA-F]{2}")
    return "(?:" + "|".join(alts) + ")"


def spell(c: str, canonical: bool = False) -> str:
    """Every spelling of the character `c` inside a JSON string (its canonical one
    alone where `canonical`)."""
    cp = ord(c)
    if cp in SURROGATES:
        raise Unwritable("a key or value holding a lone surrogate")
    if canonical:
        return canonical_set([(cp, cp)])
    alts = [_lit(cp)] if cp >= 0x20 and c not in "\"\\" else []
    if c in _ESCAPE_OF:
        alts.append("\\\\" + _lit(ord(_ESCAPE_OF[c])))
    if cp <= 0xFFFF:
        alts.append("\\\\u" + _hexcase(cp))
    else:
        hi, lo = 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)
        alts.append("\\\\u" + _hexcase(hi) + "\\\\u" + _hexcase(lo))
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


CHAR = None  # filled below: any string character


def string_regex(s: Str, canonical: bool = False) -> str:
    """The strings of `s` (quotes included; canonical spellings alone where `canonical`)."""
    if s.pattern is not None:
        if (s.min_len, s.max_len) != (0, None):
            raise Unwritable("a string with a pattern (or format) and a length bound")
        return f"\\x22{pattern_regex(s.pattern, canonical)}\\x22"
    if s.values is not None:
        spelled = ("".join(spell(c, canonical) for c in v) for v in sorted(s.values))
        return "\\x22(?:" + "|".join(spelled) + ")\\x22"
    lo, hi = s.min_len, s.max_len
    if lo > MAX_COUNT or (hi is not None and hi > MAX_COUNT):
        raise Unwritable(f"a string length bound over {MAX_COUNT}")
    rep = "*" if (lo, hi) == (0, None) else f"{{{lo},{'' if hi is None else hi}}}"
    return f"\\x22{_char(canonical)}{rep}\\x22"


def key_regex(name: str, canonical: bool = False) -> str:
    """Every spelling of the key `name` (its canonical one where `canonical`)."""
    return "\\x22" + "".join(spell(c, canonical) for c in name) + "\\x22"


def other_key_regex(names: set, canonical: bool = False) -> str:
    """The keys whose text is none of `names` (canonical spellings where `canonical`)."""
    char = _char(canonical)

    def rest(prefix: str) -> str:
        nxt = sorted({n[len(prefix)] for n in names if len(n) > len(prefix) and n.startswith(prefix)})
        alts = [] if prefix in names else ["\\x22"]
        alts += [spell(c, canonical) + rest(prefix + c) for c in nxt]
        alts.append(char_except({ord(c) for c in nxt}, canonical) + char + "*\\x22")
        return "(?:" + "|".join(alts) + ")"

    return "\\x22" + rest("")


CHAR = char_except(set())  # any string character, every spelling
CANONICAL_CHAR = char_except(set(), canonical=True)  # ... its canonical spelling


def _char(canonical: bool) -> str:
    return CANONICAL_CHAR if canonical else CHAR

__all__ = ["schema_grammar", "SchemaGrammar", "Spelling", "Written"]
