"""Think-tag reasoning models (Qwen3, DeepSeek-R1, ...): `<think>…</think>` then the answer.

`ThinkTags` reads an output `[<think> THINKING </think>] ANSWER` (the tags are single
special tokens, read by id; with `starts_thinking=True` the prompt has already opened
the thinking, so the output is `THINKING </think> ANSWER`). `ThinkPotential` scores
the answer by a base potential and leaves the thinking free (or scores it by an
optional second potential, e.g. a length budget).
"""

from __future__ import annotations

from typing import Any

from genlm.backend import decode_vocab

from genlm.control.lm.token_maps import build_token_maps
from genlm.control.potential.base import Potential
from genlm.control.reasoning.sections import SectionedPotential, Sections

OPEN, CLOSE = "open", "close"


class ThinkTags:
    """The think-tag format over a tokenizer's tokens.

    Args:
        tokenizer: the model's tokenizer.
        think_open: the tag that opens the thinking (one token of the tokenizer).
        think_close: the tag that closes it.
        starts_thinking: the prompt ends inside the thinking (its template wrote the
            open tag), so the output starts with thinking.

    Raises:
        ValueError: a tag that is not a single token of the tokenizer, or the two tags equal.
    """

    def __init__(
        self,
        tokenizer: Any,
        think_open: str = "<think>",
        think_close: str = "</think>",
        starts_thinking: bool = False,
    ) -> None:
        ids = {}
        for role, tag in ((OPEN, think_open), (CLOSE, think_close)):
            found = tokenizer.encode(tag, add_special_tokens=False)
            if len(found) != 1:
                raise ValueError(
                    f"the think tag {tag!r} must be one token of the tokenizer (add it as a "
                    f"special token); it encodes to {len(found)} tokens {found}"
                )
            ids[found[0]] = role
        if len(ids) != 2:
            raise ValueError(f"the open and close tags must differ, got {think_open!r} twice")
        self.tokenizer = tokenizer
        self.think_open, self.think_close = think_open, think_close
        self.starts_thinking = bool(starts_thinking)
        self.special_ids = ids
        byte_vocab, _ = decode_vocab(tokenizer)
        self.token_maps = build_token_maps(byte_vocab, [byte_vocab[tokenizer.eos_token_id]])
        self.potential_vocab = self.token_maps.potential_vocab
        self._by_bytes = {bytes(byte_vocab[i]): role for i, role in ids.items()}

    def kind(self, token: Any) -> str | None:
        tid = getattr(token, "token_id", None)
        if tid is not None:
            return self.special_ids.get(tid)
        return self._by_bytes.get(bytes(token)) if isinstance(token, bytes) else None

    def root(self) -> Sections:
        if self.starts_thinking:
            return Sections(mode="thinking", open=("thinking", 0))
        # Before the first token the output may still open the thinking; until it does,
        # it is read as an answer (a model may answer without thinking).
        return Sections(mode="start", open=("answer", 0), can_end=True)

    def advance(self, s: Sections, kind: str | None, data: bytes) -> Sections | None:
        if kind is None:
            return s.moved(mode="answer" if s.mode == "start" else s.mode)
        if s.mode == "start" and kind == OPEN:
            return s.moved(mode="thinking", open=("thinking", 1), can_end=False)
        if s.mode == "thinking" and kind == CLOSE:
            name, start = s.open
            return s.moved(
                mode="answer",
                closed=((name, start, s.pos),),
                open=("answer", s.pos + 1),
                can_end=True,
            )
        return None

    def split(self, context: list) -> tuple[list, list] | None:
        """(thinking, answer) tokens of `context`, or None when it leaves the format."""
        s = self.root()
        for tok in context:
            s = self.advance(s, self.kind(tok), bytes(tok))
            if s is None:
                return None
        thinking = [list(context[a:b]) for name, a, b in s.closed if name == "thinking"]
        name, a = s.open
        if name == "thinking":
            return list(context[a:]), []
        return (thinking[0] if thinking else []), list(context[a:])


class ThinkPotential(SectionedPotential):
    """A base potential on the answer of a think-tag model; the thinking left free.

        prefix(x)   = base.prefix(answer)    while answering; 0 while thinking
        complete(x) = base.complete(answer)  (-inf while still thinking)

    times, when `thinking_potential` is given, its `prefix(thinking)` while thinking and
    `complete(thinking)` once `</think>` closed it. A context outside the format (a tag
    twice, `</think>` before `<think>`) has weight zero.

    Args:
        base_potential: scores the answer's tokens (its vocabulary a subset of the model's).
        llm_tokenizer: the model's tokenizer, with the think tags as single tokens.
        think_open: the tag that opens the thinking.
        think_close: the tag that closes it.
        thinking_potential: optional; scores the thinking's tokens.
        starts_thinking: the prompt ends inside the thinking (DeepSeek-R1's template,
            Qwen3's prompts that end with `<think>`).

    Raises:
        ValueError: a tag that is not a single token.
    """

    def __init__(
        self,
        base_potential: Potential,
        llm_tokenizer: Any,
        think_open: str = "<think>",
        think_close: str = "</think>",
        thinking_potential: Potential | None = None,
        starts_thinking: bool = False,
    ) -> None:
        self.base_potential = base_potential
        self.thinking_potential = thinking_potential
        self.answer_sections = ("answer",)
        self.tags = ThinkTags(llm_tokenizer, think_open, think_close, starts_thinking)
        scorers = {"answer": base_potential}
        if thinking_potential is not None:
            scorers["thinking"] = thinking_potential
        super().__init__(self.tags, scorers)

    def __repr__(self) -> str:
        return f"ThinkPotential({self.base_potential!r}, thinking_potential={self.thinking_potential!r})"
