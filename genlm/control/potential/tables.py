"""Index tables of a vocabulary, built once and shared by every potential over it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from genlm.control.constant import EOS, EndOfSequence
from genlm.control.typing import Atomic, TokenType, infer_vocabulary_type


@dataclass(frozen=True, eq=False)
class VocabTables:
    """A vocabulary with EOS and its index maps.

    Attributes:
        vocab: the tokens, in order.
        eos: the end marker.
        vocab_eos: `vocab + [eos]`; weight arrays are indexed by it.
        lookup: token → index into `vocab_eos`.
        token_type: the inferred type of the tokens.
        fallback: plain-bytes → index of the first token with those bytes, for
            vocabularies of id-carrying byte tokens (several ids may share bytes).
    """

    holds_no_models = True  # token tables only: a run's walk for its models skips them (_held)

    vocab: list
    eos: EndOfSequence
    vocab_eos: list
    lookup: dict
    token_type: TokenType
    fallback: dict | None = field(default=None)

    def __len__(self) -> int:
        return len(self.vocab_eos)


def build_tables(
    vocabulary: Sequence[Any],
    token_type: TokenType | None = None,
    eos: EndOfSequence | None = None,
) -> VocabTables:
    """Validate a vocabulary and build its tables.

    Raises:
        ValueError: empty vocabulary, duplicate tokens, a `token_type` that is not a
            `TokenType`, an `eos` that is not an `EndOfSequence`.
        TypeError: tokens of mixed types, a token that does not match `token_type`.
    """
    # The wordings that open these messages are 0.4.1's, which its users may match.
    eos = EOS if eos is None else eos
    if not isinstance(eos, EndOfSequence):
        raise ValueError(f"EOS must be an instance of EndOfSequence, got {eos!r}")
    if token_type is not None and not isinstance(token_type, TokenType):
        raise ValueError(f"token_type must be a TokenType (e.g. Atomic(bytes)), got {token_type!r}")
    if isinstance(vocabulary, (str, bytes, bytearray)) or not hasattr(vocabulary, "__iter__"):
        raise TypeError(
            f"vocabulary must be a sequence of tokens (e.g. a list), got {type(vocabulary).__name__}"
        )
    vocab = list(vocabulary)
    if not vocab:
        raise ValueError(
            "vocabulary is empty: a potential needs at least one token "
            "(the vocabulary cannot be empty)"
        )
    inferred = infer_vocabulary_type(vocab)
    if token_type is None:
        token_type = inferred
    else:
        bad = next((t for t in vocab if not token_type.check(t)), None)
        if bad is not None:
            raise TypeError(
                f"Tokens in vocabulary must be of type {token_type!r}: "
                f"token {bad!r} is not of the declared type"
            )
    vocab_eos = vocab + [eos]
    lookup = {t: i for i, t in enumerate(vocab_eos)}
    if len(lookup) != len(vocab_eos):
        seen: set = set()
        dups = [t for t in vocab_eos if t in seen or seen.add(t)]
        raise ValueError(
            f"Duplicate token {dups[0]!r} found in vocabulary "
            f"(the vocabulary has duplicate tokens: {dups[:5]!r})"
        )
    fallback = None
    if isinstance(vocab[0], bytes) and type(vocab[0]) is not bytes:
        fallback = {}
        for i, t in enumerate(vocab):
            fallback.setdefault(bytes(t), i)
    elif token_type == Atomic(int) and all(0 <= t < 256 for t in vocab):
        # Byte values: a one-byte string names its value too (`w[b"a"]` is `w[97]`).
        fallback = {bytes([t]): i for i, t in enumerate(vocab)}
    return VocabTables(vocab, eos, vocab_eos, lookup, token_type, fallback)
