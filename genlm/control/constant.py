"""End markers shared by every potential and sampler."""

from __future__ import annotations


class EndOfSequence:
    """A marker that ends a sequence; it compares equal only to markers of its kind.

    `EOS` ends a whole sequence. `EOT` ends a turn (a unit of a multi-token sampler).
    """

    __slots__ = ("kind",)

    def __init__(self, kind: str = "EOS"):
        self.kind = kind

    def __repr__(self) -> str:
        return self.kind

    def __str__(self) -> str:
        return self.kind

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EndOfSequence) and other.kind == self.kind

    def __hash__(self) -> int:
        return hash(("genlm.control.EndOfSequence", self.kind))

    def __reduce__(self):
        return (EndOfSequence, (self.kind,))

    @property
    def type_(self) -> str:
        """The marker's kind, by its genlm-control 0.4.1 name."""
        return self.kind

    def __radd__(self, other: object) -> list | tuple:
        """`context + EOS`: the context with the marker appended (0.4.1's spelling).

        A list or tuple keeps its type; a `bytes`/`str` context becomes the list of
        its items (byte values or characters) followed by the marker.

        Raises:
            TypeError: any other left operand ("Cannot concatenate <type> with <type>",
                as in 0.4.1; Python asks `__radd__` only after the left operand's
                `__add__` declined, so no other method is skipped).
        """
        if isinstance(other, (list, tuple)):
            return type(other)([*other, self])
        if isinstance(other, (bytes, str)):
            return [*other, self]
        raise TypeError(f"Cannot concatenate {type(other)} with {type(self)}")


EOS = EndOfSequence("EOS")
EOT = EndOfSequence("EOT")

__all__ = ["EOS", "EOT", "EndOfSequence"]
