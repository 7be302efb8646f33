"""A tiny language model shipped with genlm-control.

The package data in ``genlm/control/embedded/tiny/`` is a small GPT-2 style
causal language model (about one million parameters, a 4096-token byte-level
BPE vocabulary whose single special token ``<|endoftext|>`` is both BOS and EOS).
It was trained for a few minutes on the documentation topics that ship with
CPython, by ``scripts/train_embedded_model.py``. Its text is barely fluent; it
exists so that tests, examples and the command-line interface run offline,
without downloading any weights.

Load it by name through genlm-control:

    from genlm.control import PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    llm = PromptedLLM.from_name(EMBEDDED_MODEL)

or with plain transformers, from its directory:

    from transformers import AutoModelForCausalLM, AutoTokenizer
    from genlm.control.embedded import model_path

    tokenizer = AutoTokenizer.from_pretrained(model_path())
    model = AutoModelForCausalLM.from_pretrained(model_path())

Attributes:
    EMBEDDED_MODEL (str): The name that stands for the shipped model wherever a
        model name is accepted (for example ``PromptedLLM.from_name``).
    ALIASES (frozenset[str]): All the names that `resolve` maps to `model_path()`.
"""

import os

EMBEDDED_MODEL = "genlm-control/tiny-gpt2"
ALIASES = frozenset({EMBEDDED_MODEL, "embedded"})

__all__ = ["EMBEDDED_MODEL", "ALIASES", "model_path", "resolve"]


def model_path() -> str:
    """The absolute path of the shipped model directory.

    Returns:
        (str): The directory holding the model's ``config.json``, weights and
            tokenizer files, loadable with ``from_pretrained``.
    """
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny")


def resolve(name: str) -> str:
    """Map the embedded model's name to its directory; leave other names alone.

    Args:
        name (str): A model name or path, as given to ``from_name``.

    Returns:
        (str): `model_path()` if `name` is `EMBEDDED_MODEL` or ``"embedded"``,
            otherwise `name` unchanged.
    """
    return model_path() if name in ALIASES else name
