"""`CFGBoundary`'s 0.4.1 form: units complete when their text parses under a Lark grammar."""

from __future__ import annotations

from typing import Any

from genlm.control.constant import EndOfSequence

PARSERS = ("earley", "lalr")


class LarkUnits:
    """Whether a list of byte subunits is a complete unit of a Lark grammar.

    A unit of at least `min_length` subunits is complete when its bytes (EOS left out),
    decoded with `encoding`/`decode_errors` to at least `min_length` characters, parse
    from `start_rule`; with `complete_rules`, the parse tree's root rule must be one
    of them. A Lark error means "not complete"; any other exception propagates.

    Raises:
        ValueError: a grammar (or parser type) that Lark cannot build a parser from.
    """

    def __init__(
        self,
        grammar_text: str,
        start_rule: str = "start",
        complete_rules: Any = None,
        min_length: int = 2,
        parser_type: str = "earley",
        ambiguity: str = "explicit",
        encoding: str = "utf-8",
        decode_errors: str = "ignore",
    ):
        from lark import Lark

        self.grammar_text = grammar_text
        self.start_rule = start_rule
        self.complete_rules = set(complete_rules) if complete_rules else None
        self.min_length = min_length
        self.encoding = encoding
        self.decode_errors = decode_errors
        options = {"ambiguity": ambiguity} if parser_type == "earley" else {}
        try:
            self.parser = Lark(grammar_text, start=start_rule, parser=parser_type, **options)
        except Exception as exc:  # Lark raises several unrelated types for a bad grammar
            raise ValueError(f"Failed to create Lark parser: {exc}") from exc

    def text(self, subunits: list) -> str:
        """The decoded text of the byte subunits (EOS and other non-bytes left out)."""
        data = b"".join(t for t in subunits if isinstance(t, bytes) and not isinstance(t, EndOfSequence))
        return data.decode(self.encoding, errors=self.decode_errors)

    def complete(self, subunits: list) -> bool:
        """Whether `subunits` form a complete unit."""
        from lark.exceptions import LarkError

        if len(subunits) < self.min_length:
            return False
        text = self.text(subunits)
        if not text or len(text) < self.min_length:
            return False
        try:
            tree = self.parser.parse(text)
        except LarkError:
            return False
        return self.complete_rules is None or tree.data in self.complete_rules

    def parse_tree(self, text: str) -> Any:
        """The parse tree of `text`, or None where it does not parse."""
        from lark.exceptions import LarkError

        try:
            return self.parser.parse(text)
        except LarkError:
            return None

    def __repr__(self) -> str:
        rules = f", complete_rules={self.complete_rules}" if self.complete_rules else ""
        return f"CFGBoundary(start={self.start_rule!r}{rules})"


__all__ = ["LarkUnits"]
