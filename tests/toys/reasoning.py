"""Reasoning-model toys built at test time from the embedded model (nothing downloaded):
its tokenizer with Harmony's and think-tag special tokens added and a chat template,
and its weights with the embeddings resized (new rows drawn from a seeded generator),
saved into a folder that `PromptedLLM.from_name` loads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from genlm.control.embedded import model_path
from genlm.control.potential.base import Potential

HARMONY_SPECIALS = [
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|end|>",
    "<|return|>",
    "<|constrain|>",
    "<|call|>",
]
THINK_SPECIALS = ["<think>", "</think>"]

# A Harmony-like chat template: each message as `<|start|>role<|message|>content<|end|>`,
# the generation prompt `<|start|>assistant`.
HARMONY_TEMPLATE = (
    "{% for m in messages %}<|start|>{{ m['role'] }}<|message|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)
# A Qwen3-like template: the generation prompt opens the thinking unless `enable_thinking=False`.
THINK_TEMPLATE = (
    "{% for m in messages %}<|start|>{{ m['role'] }}\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


def reasoning_tokenizer(eos: str = "<|return|>"):
    """The embedded tokenizer plus every Harmony and think-tag special token, EOS `eos`."""
    tok = AutoTokenizer.from_pretrained(model_path())
    tok.add_special_tokens({"additional_special_tokens": HARMONY_SPECIALS + THINK_SPECIALS})
    tok.eos_token = eos
    tok.chat_template = HARMONY_TEMPLATE
    return tok


def save_reasoning_model(folder: Path, seed: int = 0, template: str = HARMONY_TEMPLATE) -> Path:
    """Save the embedded model with `reasoning_tokenizer()` (embeddings resized, the new
    rows drawn with `seed`) into `folder`; return it."""
    tok = reasoning_tokenizer()
    tok.chat_template = template
    model = AutoModelForCausalLM.from_pretrained(model_path())
    old = model.get_input_embeddings().weight.shape[0]
    model.resize_token_embeddings(len(tok), mean_resizing=False)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb[old:] = torch.randn(emb.shape[0] - old, emb.shape[1], generator=gen) * emb[:old].std()
    model.generation_config.eos_token_id = tok.eos_token_id
    model.config.eos_token_id = tok.eos_token_id
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def harmony_text(
    *messages: tuple[str, str], final_open: str | None = None, start: bool = True
) -> str:
    """An assistant output: each (channel header, content) as a closed message, then an
    open final message with `final_open` as its content (if given)."""
    parts = []
    for i, (header, content) in enumerate(messages):
        lead = "<|start|>assistant" if (i or start) else ""
        parts.append(f"{lead}<|channel|>{header}<|message|>{content}<|end|>")
    if final_open is not None:
        lead = "<|start|>assistant" if (messages or start) else ""
        parts.append(f"{lead}<|channel|>final<|message|>{final_open}")
    return "".join(parts)


class SupportLM(Potential):
    """A seeded bigram language model over a model's vocabulary that puts all its mass on
    `support` (a few tokens) and EOS: small enough to enumerate every sequence.

        logw_next(x)[t] = log_softmax(table[last token of x])[t]   (t ∈ support + [EOS])
    """

    def __init__(self, vocab, support, seed: int = 0):
        super().__init__(vocab)
        self.support = list(support)
        rng = np.random.default_rng(seed)
        idx = [self.lookup[t] for t in self.support] + [len(self.vocab)]
        self._rows = {}
        for prev in [None, *self.support]:
            row = np.full(len(self.vocab) + 1, float("-inf"))
            logits = rng.normal(size=len(idx))
            row[idx] = logits - np.logaddexp.reduce(logits)
            self._rows[None if prev is None else prev.token_id] = row

    def _row(self, context):
        return self._rows[context[-1].token_id if context else None]

    async def prefix(self, context):
        return float(sum(self._row(context[:i])[self.lookup[t]] for i, t in enumerate(context)))

    async def complete(self, context):
        return await self.prefix(context) + float(self._row(context)[-1])

    async def logw_next(self, context):
        return self.make_lazy_weights(self._row(list(context)).copy())
