"""Text to token ids as a continuation: the encoding whose tokens spell the text's bytes.

A SentencePiece tokenizer (Llama 2, Mistral 7B) adds a `▁` before the text it encodes
(the "dummy prefix"), so `tokenizer.encode("hello")` is `[▁hello]`, whose bytes are
`b" hello"`. That is right for a document, wrong for text that continues one: the tokens
of a continuation must spell it exactly. `ContinuationEncoder` encodes with the prefix
step removed from the tokenizer's pipeline (a `Prepend` normalizer, a Metaspace
pre-tokenizer's prepend scheme, a ByteLevel pre-tokenizer's `add_prefix_space`);
everything else (the merges, the splits, the byte fallback) is the tokenizer's own.
"""

from __future__ import annotations

import json
from typing import Any, Sequence


def component_spec(component: Any) -> Any:
    """The JSON of one `tokenizers` component (a normalizer, a pre-tokenizer), None for none;
    read without serialising the whole tokenizer (its vocabulary)."""
    return None if component is None else json.loads(component.__getstate__())


def without_prefix_space(normalizer: Any, pre_tokenizer: Any) -> tuple[Any, Any, bool]:
    """A normalizer's and a pre-tokenizer's JSON with their prefix steps removed, and
    whether they had any."""
    changed = False

    def walk(node: Any) -> Any:
        nonlocal changed
        if isinstance(node, list):
            kept = [walk(n) for n in node if not _is_prepend(n)]
            changed |= len(kept) != len(node)
            return kept
        if not isinstance(node, dict):
            return node
        node = {k: walk(v) for k, v in node.items()}
        if node.get("type") == "Metaspace":
            if node.get("prepend_scheme", "never") != "never" or node.get("add_prefix_space"):
                changed = True
            node["prepend_scheme"] = "never"
            node.pop("add_prefix_space", None)
        if node.get("type") == "ByteLevel" and node.get("add_prefix_space"):
            changed = True
            node["add_prefix_space"] = False
        return node

    out = []
    for part in (normalizer, pre_tokenizer):
        if _is_prepend(part):
            out.append(None)
            changed = True
        else:
            out.append(None if part is None else walk(part))
    return out[0], out[1], changed


def _is_prepend(node: Any) -> bool:
    return isinstance(node, dict) and node.get("type") == "Prepend"


class ContinuationEncoder:
    """Batched `text → token ids` whose tokens spell the text (no special tokens added,
    no prefix space), with a Hugging Face tokenizer."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._backend, changed = None, False
        if backend is not None:
            norm, pre, changed = without_prefix_space(
                component_spec(backend.normalizer), component_spec(backend.pre_tokenizer)
            )
            if changed:
                from tokenizers import Tokenizer

                spec = json.loads(backend.to_str())
                spec["normalizer"], spec["pre_tokenizer"] = norm, pre
                backend = Tokenizer.from_str(json.dumps(spec))
            self._backend = backend
        self.strips_prefix = changed

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        if not texts:
            return []
        if self._backend is not None:
            batch = getattr(self._backend, "encode_batch_fast", None) or self._backend.encode_batch
            return [e.ids for e in batch(list(texts), add_special_tokens=False)]
        return [self.tokenizer.encode(t, add_special_tokens=False) for t in texts]

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]


def continuation_encoder(tokenizer: Any) -> ContinuationEncoder:
    """The tokenizer's `ContinuationEncoder`, built once per tokenizer object."""
    got = getattr(tokenizer, "_genlm_continuation", None)
    if got is None or got.tokenizer is not tokenizer:
        got = ContinuationEncoder(tokenizer)
        try:
            tokenizer._genlm_continuation = got
        except AttributeError:  # a tokenizer that takes no attributes: rebuilt per call
            pass
    return got


__all__ = ["ContinuationEncoder", "component_spec", "continuation_encoder", "without_prefix_space"]
