"""gpt-oss's Harmony chat format: `HarmonyChat` reads it, `HarmonyPotential` constrains
the contents of chosen channels (0.4.1's API; a context outside the format has weight
zero instead of raising).

The assistant's output is a sequence of messages

    [<|start|>ROLE] <|channel|>HEADER <|message|>CONTENT CLOSER

with ROLE `assistant` (optionally ` to=RECIPIENT`), HEADER a channel name (`analysis`,
`commentary`, `final`) optionally followed by ` to=RECIPIENT` and a content type
(` json`, ` <|constrain|>json`), CONTENT free of special tokens, and CLOSER `<|end|>`
(analysis, commentary), `<|call|>` (a message with a recipient: a tool call) or
`<|return|>` (final; the model's EOS, so `EOS` in the potential's vocabulary), which
ends the output. Analysis and commentary messages may repeat (a preamble, then a tool
call; 0.4.1 allowed each channel once), each scored on its own. Special tokens are
read by id, the role and header by their text, whatever tokens spell it.
"""

from __future__ import annotations

from typing import Any, Sequence

import regex
from genlm.backend import decode_vocab
from genlm.backend.tokenization import Token

from genlm.control.constant import EOS
from genlm.control.lm.token_maps import build_token_maps
from genlm.control.potential.base import Potential
from genlm.control.reasoning.sections import SectionedPotential, Sections

VALID_CHANNELS = {"analysis", "final", "commentary"}
SPECIALS = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>")
OPTIONAL_SPECIALS = ("<|call|>", "<|constrain|>")
_ROLE = regex.compile(r"assistant(?: to=[^\s<]+)?")
# `final`, `commentary to=functions.f json`, `commentary to=functions.f <|constrain|>json`
_HEADER = regex.compile(
    r"(analysis|commentary|final)(?: to=[^\s<]+)?(?: ?<\|constrain\|>[\w.\-/]+| [\w.\-/]+)?"
)


def _single_id(tokenizer: Any, text: str) -> int | None:
    ids = tokenizer.encode(text, add_special_tokens=False)
    return ids[0] if len(ids) == 1 else None


class HarmonyChat:
    """Reads the assistant part of a Harmony chat, over a tokenizer's tokens.

    Attributes:
        tokenizer: the tokenizer.
        token_maps: the model's tokens (`decode[id]` is a `Token`), EOS the tokenizer's.
        potential_vocab: the vocabulary of potentials over this model (EOS tokens left out).
        end_token, message_token, channel_token: the `Token`s of `<|end|>`,
            `<|message|>`, `<|channel|>`.
        analysis_tokens, final_tokens, commentary_tokens: the tokenizer's tokens for
            the channel names (any tokens spelling a name are read as it).
        special_ids: token id → special token text.

    Raises:
        AssertionError: the tokenizer lacks `encode`/`decode`/`apply_chat_template`, or
            a Harmony special token is not one of its tokens (as in 0.4.1).
    """

    def __init__(self, tokenizer: Any) -> None:
        for method in ("encode", "decode", "apply_chat_template"):
            assert hasattr(tokenizer, method), f"Tokenizer is missing the {method!r} method."
        self.tokenizer = tokenizer
        self.special_ids: dict[int, str] = {}
        for text in SPECIALS + OPTIONAL_SPECIALS:
            tid = _single_id(tokenizer, text)
            assert tid is not None or text in OPTIONAL_SPECIALS, (
                f"Token {text!r} is not encoded as a single token. "
                "The tokenizer does not appear to support the harmony chat format."
            )
            if tid is not None:
                self.special_ids[tid] = text
        byte_vocab, _ = decode_vocab(tokenizer)
        eos = byte_vocab[tokenizer.eos_token_id]
        self.token_maps = build_token_maps(byte_vocab, [eos])
        self.potential_vocab = self.token_maps.potential_vocab
        self.special_bytes = {bytes(byte_vocab[i]): t for i, t in self.special_ids.items()}
        eos_text = self.special_ids.get(tokenizer.eos_token_id)
        self._eos_kind = eos_text  # the special that the potential's EOS stands for
        self.end_token = self._special("<|end|>")
        self.message_token = self._special("<|message|>")
        self.channel_token = self._special("<|channel|>")
        self.analysis_tokens = self.decode_tokens(
            tokenizer.encode("analysis", add_special_tokens=False)
        )
        self.final_tokens = self.decode_tokens(tokenizer.encode("final", add_special_tokens=False))
        self.commentary_tokens = self.decode_tokens(
            tokenizer.encode("commentary", add_special_tokens=False)
        )

    def _special(self, text: str) -> Token:
        return self.token_maps.decode[_single_id(self.tokenizer, text)]

    # Token ids and bytes ---------------------------------------------------------

    def encode_tokens(self, tokens: Sequence[Any]) -> list[int]:
        """Token ids: a `Token` by its id, plain bytes as the first id with those bytes.

        Raises:
            ValueError: bytes that no token has.
            TypeError: neither a `Token` nor bytes.
        """
        ids = []
        for tok in tokens:
            if isinstance(tok, Token):
                ids.append(tok.token_id)
            elif isinstance(tok, bytes):
                first = self.token_maps.encode.first_id(tok)
                if first is None:
                    raise ValueError(f"Token {tok!r} not in vocabulary")
                ids.append(first)
            else:
                raise TypeError(f"Expected Token or bytes, got {type(tok).__name__}")
        return ids

    def decode_tokens(self, ids: Sequence[int]) -> list[Token]:
        """The `Token` of each id."""
        assert all(isinstance(i, int) for i in ids), "Token IDs must be integers"
        return [self.token_maps.decode[i] for i in ids]

    # The format ------------------------------------------------------------------

    def kind(self, token: Any) -> str | None:
        """The special token `token` is (by id; plain bytes by their text), else None."""
        tid = getattr(token, "token_id", None)
        if tid is not None:
            return self.special_ids.get(tid)
        return self.special_bytes.get(bytes(token)) if isinstance(token, bytes) else None

    def root(self) -> Sections:
        return Sections(mode="between")

    def advance(self, s: Sections, kind: str | None, data: bytes) -> Sections | None:
        """The reader one token later (None: the token leaves the format)."""
        if kind is not None and kind == self._eos_kind:
            kind = "<|return|>"
        if s.mode == "between":
            if kind == "<|start|>":
                return s.moved(mode="role", text=b"")
            if kind == "<|channel|>":
                return s.moved(mode="header", text=b"", flag=False)
            return None
        if s.mode == "role":
            if kind is None:
                return _viable(s, _ROLE, s.text + data)
            if kind == "<|channel|>" and _ROLE.fullmatch(s.text.decode("latin-1")):
                return s.moved(mode="header", text=b"", flag=b"to=" in s.text)
            return None
        if s.mode == "header":
            return self._header(s, kind, data)
        if s.mode == "content":
            return self._content(s, kind)
        return None  # "done": nothing follows <|return|>

    def _header(self, s: Sections, kind: str | None, data: bytes) -> Sections | None:
        if kind is None or kind == "<|constrain|>":
            return _viable(s, _HEADER, s.text + (data if kind is None else b"<|constrain|>"))
        if kind != "<|message|>":
            return None
        match = _HEADER.fullmatch(s.text.decode("latin-1"))
        if match is None:
            return None
        name = match.group(1)
        return s.moved(
            mode="content",
            text=b"",
            open=(name, s.pos + 1),
            flag=s.flag or b"to=" in s.text,
            can_end=name == "final",
        )

    def _content(self, s: Sections, kind: str | None) -> Sections | None:
        name, start = s.open
        if kind is None:
            return s.moved()
        closes = {
            "<|end|>": name != "final",
            "<|call|>": s.flag,
            "<|return|>": name == "final",
        }
        if not closes.get(kind, False):
            return None
        done = kind == "<|return|>"
        return s.moved(
            mode="done" if done else "between",
            closed=s.closed + ((name, start, s.pos),),
            open=None,
            can_end=done,
            flag=False,
        )

    def read(self, context: Sequence[Any]) -> Sections | None:
        """The reader's record after `context` (None: not a Harmony output prefix)."""
        s = self.root()
        for tok in context:
            s = self.advance(s, self.kind(tok), bytes(tok))
            if s is None:
                return None
        return s

    # 0.4.1's API -----------------------------------------------------------------

    def validate_harmony_format(self, context: str | list) -> bool:
        """Whether `context` (a string, or a list of tokens) is a prefix of a Harmony output."""
        if isinstance(context, str):
            context = self.decode_tokens(self.tokenizer.encode(context, add_special_tokens=False))
        elif not isinstance(context, list):
            raise ValueError(
                f"Context must be a string or a list of bytes tokens, got {type(context)}"
            )
        if context and context[-1] is EOS:
            context = context[:-1] + [self.token_maps.decode[self.tokenizer.eos_token_id]]
        return self.read(context) is not None

    def extract_harmony_channels_from_tokens(self, token_bytes: list) -> dict[str, dict | None]:
        """The content of each channel: `{"content": tokens, "is_prefix": still open}`,
        or None for a channel not in the output (a channel written twice: its last
        message). A trailing `EOS` stays in the final channel's content (which it closes).

        Raises:
            AssertionError: the tokens are not a prefix of a Harmony output (as in 0.4.1).
        """
        tokens = list(token_bytes)
        ends = bool(tokens) and tokens[-1] is EOS
        s = self.read(tokens[:-1] if ends else tokens)
        assert s is not None, f"The context is not a valid harmony chat: {token_bytes}"
        out: dict[str, dict | None] = {"analysis": None, "final": None, "commentary": None}
        for name, a, b in s.closed:
            out[name] = {"content": tokens[a:b], "is_prefix": False}
        if s.open is not None:
            name, a = s.open
            out[name] = {"content": tokens[a:], "is_prefix": True}
        return out

    def extract_harmony_channels_from_string(
        self, string: str, add_special_tokens: bool = False
    ) -> dict[str, dict | None]:
        """`extract_harmony_channels_from_tokens` of the tokenizer's encoding of `string`."""
        ids = self.tokenizer.encode(string, add_special_tokens=add_special_tokens)
        return self.extract_harmony_channels_from_tokens(self.decode_tokens(ids))


def _viable(s: Sections, pattern: regex.Pattern, text: bytes) -> Sections | None:
    """The reader with header text `text`, or None when no header starts so."""
    if not pattern.fullmatch(text.decode("latin-1"), partial=True):
        return None
    return s.moved(text=text)


class HarmonyPotential(SectionedPotential):
    """A base potential on chosen channels of a Harmony output; the others left free.

        prefix(x)   = Σ_{closed constrained c} base.complete(c) + base.prefix(open c)
        complete(x) = Σ_{constrained c} base.complete(c)         (x ends in `final`)

    and weight zero for a context outside the Harmony format (0.4.1 raised). So
    `logw_next` gives the base's end weight to `<|end|>` in analysis/commentary (and to
    `<|call|>` in a tool call) and to `EOS` (`<|return|>`) in final.

    Args:
        base_potential: scores a constrained channel's tokens (its vocabulary a subset
            of the model's, e.g. `constraint.coerce(llm, f=b"".join)`).
        llm_tokenizer: the model's tokenizer, with Harmony's special tokens.
        constrained_channels: a non-empty list of `"analysis"`, `"final"`, `"commentary"`.

    Raises:
        ValueError: `constrained_channels` empty or naming an unknown channel.
    """

    def __init__(
        self, base_potential: Potential, llm_tokenizer: Any, constrained_channels: list[str]
    ) -> None:
        if not constrained_channels:
            raise ValueError("constrained_channels must be a non-empty list.")
        invalid = set(constrained_channels) - VALID_CHANNELS
        if invalid:
            raise ValueError(f"Invalid channel names: {invalid}. Must be one of {VALID_CHANNELS}.")
        self.base_potential = base_potential
        self.harmony_chat = HarmonyChat(llm_tokenizer)
        self.constrained_channels = list(constrained_channels)
        self.answer_sections = ("final",)
        super().__init__(self.harmony_chat, {c: base_potential for c in self.constrained_channels})

    def __repr__(self) -> str:
        return f"HarmonyPotential({self.base_potential!r}, constrained_channels={self.constrained_channels!r})"
