"""How a JSON document is spelled outside the schema's own strings: the `spelling`
option of `JsonSchema` (and of `llm.constrain(json_schema=...)` and the CLI).

Every spelling accepts the same documents (the same values); they differ in which
byte strings spell them:

- `"any"`: RFC 8259 text. Whitespace (space, tab, LF, CR), any amount, before and
  after the document and between any two of its tokens; in strings, every escape
  JSON allows (`\\/`, `\\u0061` for `a`, hex digits of either case, surrogate pairs).
  This is genlm-control 0.4.1's language and the default: `JsonSchema(schema)`
  accepts exactly the JSON documents valid under the schema, as SPEC defines it.
- `"compact"`: no whitespace at all outside strings (separators `,` and `:` alone);
  strings as in `"any"`.
- `"canonical"` (what generation wants; the command line's default): compact, and every string (keys and values) spelled
  as a JSON writer spells it, `json.dumps(s, ensure_ascii=False)`: a character is
  written raw unless it must be escaped; `"` and `\\` as `\\"` and `\\\\`; U+0008,
  U+0009, U+000A, U+000C, U+000D as `\\b \\t \\n \\f \\r`; the other code points
  below U+0020 as `\\u00XX` with lowercase hex digits. No other escape (`\\/`,
  `\\u0061`, `\\u00E9`, a surrogate pair) is in the language. Each string then has
  exactly one spelling; numbers keep JSON's spellings (`1.0`, `1e2`), and object
  members their order.
"""

from __future__ import annotations

from typing import Literal

Spelling = Literal["any", "compact", "canonical"]
SPELLINGS: tuple[str, ...] = ("any", "compact", "canonical")
DEFAULT_SPELLING: Spelling = "any"

# The escapes of the canonical spelling, and the character each one spells.
_SHORT = {"\b": "b", "\t": "t", "\n": "n", "\f": "f", "\r": "r", '"': '"', "\\": "\\"}
CANONICAL_ESCAPES: dict[str, str] = {
    "\\" + _SHORT[chr(cp)] if chr(cp) in _SHORT else f"\\u{cp:04x}": chr(cp)
    for cp in list(range(0x20)) + [0x22, 0x5C]
}
_PREFIXES: dict[str, tuple] = {}
for _esc in CANONICAL_ESCAPES:
    for _n in range(1, len(_esc)):
        _PREFIXES.setdefault(_esc[:_n], ())
for _p in _PREFIXES:
    _cps = sorted(ord(c) for e, c in CANONICAL_ESCAPES.items() if e.startswith(_p))
    _PREFIXES[_p] = tuple((cp, cp) for cp in _cps)


def check_spelling(spelling: object) -> Spelling:
    """`spelling` itself, checked.

    Raises:
        ValueError: naming the spellings, for any other value.
    """
    if not isinstance(spelling, str) or spelling not in SPELLINGS:
        raise ValueError(
            f"unknown JSON spelling {spelling!r}: choose one of {list(SPELLINGS)} "
            "(any: RFC 8259 whitespace and escapes; compact: no whitespace outside strings; "
            "canonical: compact, and strings as json.dumps writes them)"
        )
    return spelling  # type: ignore[return-value]


def canonical_escape(esc: str) -> tuple[str | None, tuple]:
    """For an escape being read in the canonical spelling (`esc` starts with `\\`):
    `(char, ())` when it is complete, else `(None, ranges)` of the code points it can
    still become (empty: it is no prefix of a canonical escape)."""
    if esc in CANONICAL_ESCAPES:
        return CANONICAL_ESCAPES[esc], ()
    return None, _PREFIXES.get(esc, ())


def whitespace_allowed(spelling: str) -> bool:
    """Whether the spelling allows whitespace between tokens."""
    return spelling == "any"


__all__ = [
    "Spelling",
    "SPELLINGS",
    "DEFAULT_SPELLING",
    "CANONICAL_ESCAPES",
    "check_spelling",
    "canonical_escape",
    "whitespace_allowed",
]
