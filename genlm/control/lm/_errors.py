"""Errors the language-model backends share."""


class PromptTooLongError(ValueError, IndexError):
    """A prompt and context longer than the model's positions (the HF backend) or than
    the engine reads (vLLM's `max_model_len`). 0.4.1 let the model fail on it (an
    `IndexError` from the position embedding); ours names the lengths. It is both, so
    code catching either type keeps working."""


__all__ = ["PromptTooLongError"]
