"""Chat prompts: a list of messages through the tokenizer's chat template, as token ids.

The template renders the messages with the model's own special tokens (`<|start|>`,
`<|im_start|>`, `<think>`, ...); tokenizing its output keeps each special token as its
single id, never spelled with ordinary tokens (what `tokenize=True` gives).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Sequence


def chat_prompt_ids(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    add_generation_prompt: bool = True,
    **template_kwargs: Any,
) -> list[int]:
    """The token ids of `messages` rendered by `tokenizer`'s chat template.

    Args:
        tokenizer: a Hugging Face tokenizer (the one of an HF or a vLLM model).
        messages: `[{"role": ..., "content": ...}, ...]`.
        add_generation_prompt: end with the template's opening of the assistant's turn.
        **template_kwargs: passed to the template (`reasoning_effort="low"` for gpt-oss,
            `enable_thinking=False` for Qwen3, `tools=[...]`, ...).

    Raises:
        TypeError: `messages` is not a list of mappings with a `role`.
        ValueError: the tokenizer has no chat template.
    """
    if isinstance(messages, (str, bytes)) or not all(
        isinstance(m, Mapping) and "role" in m for m in messages
    ):
        raise TypeError(
            "messages must be a list of dicts like {'role': 'user', 'content': '...'}; "
            "for a plain string prompt use set_prompt_from_str"
        )
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            f"the tokenizer {type(tokenizer).__name__} has no chat template; set "
            "tokenizer.chat_template or build the prompt with set_prompt_from_str"
        )
    ids = tokenizer.apply_chat_template(
        list(messages),
        tokenize=True,
        add_generation_prompt=add_generation_prompt,
        **template_kwargs,
    )
    if isinstance(ids, Mapping):  # a BatchEncoding (return_dict=True, newer transformers)
        ids = ids["input_ids"]
    return [int(i) for i in ids]
