"""`format` as an assertion: on prefixes for the formats whose language is regular,
on the whole document for two that are not.

Each checked format is one ASCII regular expression `R` (full-match semantics) and,
for `hostname`, a length cap: a string has the format iff `re.fullmatch(R, s,
re.ASCII)` (and `len(s) ≤ 253` for a hostname). The recognizer reads `R` as a byte
automaton (`format_pattern`), intersected with the schema's `pattern` where both are
given; the whole-document check uses the same expressions (`format_checker`), so
the two agree by construction.

- `date`: RFC 3339 full-date with real calendar days (February 29 in leap years
  only; year 0000 is refused, as Python's `date` does); `time`: RFC 3339
  full-time, seconds 00..60, fraction optional, `Z` or a `±hh:mm` offset (`T`/`Z`
  either case); `date-time`: a date, `T`, a time.
- `ipv4`: four decimal octets 0..255 without leading zeros; `ipv6`: the RFC 3986
  `IPv6address` forms (no zone id); `uuid`: RFC 4122 hex groups 8-4-4-4-12.
- `hostname`: RFC 1123 labels of 1..63 letters, digits and inner hyphens, joined
  by dots, 253 characters at most; `email`: a dot-atom local part (RFC 5322
  `atext`), `@`, a hostname (no quoted local part, no address literal).
- `uri`: a scheme, `:`, then RFC 3986 characters (unreserved, reserved, `%HH`);
  `uri-reference`: RFC 3986 characters only. These check the characters, not the
  hierarchical grammar of RFC 3986.
- `json-pointer`: RFC 6901 (`/`-separated tokens, `~` only as `~0` or `~1`);
  `relative-json-pointer`: a non-negative integer without leading zeros, then `#`
  or a JSON pointer (draft-handrews-relative-json-pointer-01, as `jsonschema`
  reads it).

Two formats are not regular and are checked on the whole document only
(`DOCUMENT_FORMATS`; a schema that uses one is read as a superset on prefixes and
its complete documents go through `_json_residual`), with the checks `jsonschema`
uses:

- `idn-hostname`: IDNA 2008 (RFC 5890/5891: code points, contextual rules, bidi,
  label and name lengths), as the `idna` package encodes it;
- `regex`: a pattern Python's `re` compiles, the dialect `JsonSchema` reads
  `pattern` in (JSON Schema names ECMA-262; the two agree on the common syntax).

Every other format (`idn-email`, `iri`, `duration`, `uri-template`,
OpenAPI's `int32`, `binary`, ...) is an annotation and constrains nothing, as
JSON Schema 2020-12 specifies for a validator without the format-assertion
vocabulary.
"""

from __future__ import annotations

import re

_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}"
_H16 = r"[0-9A-Fa-f]{1,4}"
_LS32 = rf"({_H16}:{_H16}|{_IPV4})"


def _ipv6() -> str:
    forms = [rf"({_H16}:){{6}}{_LS32}", rf"::({_H16}:){{5}}{_LS32}",
             rf"({_H16})?::({_H16}:){{4}}{_LS32}"]
    for k, tail in ((1, rf"({_H16}:){{3}}{_LS32}"), (2, rf"({_H16}:){{2}}{_LS32}"),
                    (3, rf"{_H16}:{_LS32}"), (4, _LS32), (5, _H16), (6, "")):
        forms.append(rf"(({_H16}:){{0,{k}}}{_H16})?::{tail}")
    return "|".join(f"({f})" for f in forms)


_YEAR = r"([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
_DAYS = (r"(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)"
         r"|02-(0[1-9]|1[0-9]|2[0-8])")
_LEAP = r"([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)"
_DATE = rf"({_YEAR}-({_DAYS})|{_LEAP}-02-29)"
_TIME = (r"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?"
         r"([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])")
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = rf"{_LABEL}(\.{_LABEL})*"
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_URI_CHAR = r"([A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=-]|%[0-9A-Fa-f]{2})"

FORMATS: dict[str, str] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": rf"{_DATE}[Tt]{_TIME}",
    "ipv4": _IPV4,
    "ipv6": _ipv6(),
    "uuid": r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}",
    "hostname": _HOSTNAME,
    "email": rf"{_ATEXT}(\.{_ATEXT})*@{_HOSTNAME}",
    "uri": rf"[A-Za-z][A-Za-z0-9+.-]*:{_URI_CHAR}*",
    "uri-reference": rf"{_URI_CHAR}*",
    "json-pointer": r"(/([^~/]|~[01])*)*",
}
FORMATS["relative-json-pointer"] = rf"(0|[1-9][0-9]*)(#|{FORMATS['json-pointer']})"
MAX_LENGTH = {"hostname": 253}
_COMPILED = {name: re.compile(rx, re.ASCII) for name, rx in FORMATS.items()}
_PATTERNS: dict = {}


def _idn_hostname(text: str) -> bool:
    try:
        import idna
    except ImportError:  # pragma: no cover - `idna` comes with `requests`
        raise ValueError("format 'idn-hostname' is checked with the `idna` package, "
                         "which is not installed") from None
    try:
        idna.encode(text)
    except UnicodeError:  # idna.IDNAError and its subclasses
        return False
    return True


def _regex(text: str) -> bool:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FutureWarning on a set that may change meaning
        try:
            re.compile(text)
        except (re.error, RecursionError, OverflowError, ValueError):
            return False
    return True


DOCUMENT_FORMATS = {"idn-hostname": _idn_hostname, "regex": _regex}


def has_document_format(value: str) -> bool:
    """Whether `value` is a format checked on the whole document only."""
    return isinstance(value, str) and value in DOCUMENT_FORMATS


def has_format(value: str) -> str | None:
    """`value` when it is a format checked here (see the module docstring), else None."""
    return value if isinstance(value, str) and value in FORMATS else None


def format_ok(name: str, text: str) -> bool:
    """Whether the string `text` has the checked format `name`."""
    cap = MAX_LENGTH.get(name)
    return (cap is None or len(text) <= cap) and _COMPILED[name].fullmatch(text) is not None


def format_pattern(name: str):
    """The byte automaton of format `name` (a `Pattern`, full-match), built once."""
    from genlm.control.constraints.json_schema._json_string import Pattern

    hit = _PATTERNS.get(name)
    if hit is None:
        hit = _PATTERNS[name] = Pattern.exact(FORMATS[name], f"format {name!r}")
    return hit


def format_checker():
    """A `jsonschema.FormatChecker` that checks exactly the formats above (`FORMATS`
    and `DOCUMENT_FORMATS`)."""
    from jsonschema import FormatChecker

    checker = FormatChecker(formats=())
    for name in FORMATS:
        checker.checks(name)(_check(name, format_ok))
    for name, test in DOCUMENT_FORMATS.items():
        checker.checks(name)(_check(name, lambda _, text, test=test: test(text)))
    return checker


def _check(name: str, ok):
    def check(instance) -> bool:
        return not isinstance(instance, str) or ok(name, instance)

    return check


__all__ = ["FORMATS", "DOCUMENT_FORMATS", "MAX_LENGTH", "has_format", "has_document_format",
           "format_ok", "format_pattern", "format_checker"]
