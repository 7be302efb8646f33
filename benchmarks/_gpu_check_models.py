"""Objects for `gpu_check.py`: a synthetic byte-level tokenizer, a randomly initialised
Llama-shaped model built on the device, the `PromptedLLM` over the pair, and the
batched-decode floor on the device.

The tokenizer is a `tokenizers` BPE model with no merges wrapped in a
`PreTrainedTokenizerFast` (ByteLevel pre-tokenizer and decoder): ids 0..255 are the
256 single bytes in the GPT-2 byte alphabet (so any text encodes, byte by byte, and
genlm-backend's byte-vocabulary check round-trips), then BPE-like words from
`workloads.synthetic_vocab`, then `<|endoftext|>` as the last id (EOS). Nothing is
downloaded; its size is the model's vocabulary size exactly.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass

import torch
from transformers import DynamicCache

EOS = "<|endoftext|>"


@dataclass(frozen=True)
class LlamaShape:
    """The shape of a randomly initialised Llama-style model."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int


#: About 1.2B parameters with a 128k vocabulary (Llama 3.2 1B's shape).
LLAMA_1B = LlamaShape(hidden=2048, layers=16, heads=32, kv_heads=8, intermediate=8192, vocab=128256)
#: The CPU smoke test's stand-in: same architecture, tiny.
LLAMA_TINY = LlamaShape(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=2048)


def byte_level_tokenizer(size: int, seed: int = 0):
    """A `PreTrainedTokenizerFast` with exactly `size` tokens (see the module docstring)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from workloads import synthetic_vocab

    if size < 258:
        raise ValueError(f"a byte-level tokenizer needs at least 258 tokens, got {size}")
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    to_char = _gpt2_bytes_to_unicode()
    vocab = {to_char[b]: b for b in range(256)}
    assert set(vocab) == set(alphabet)
    for word in synthetic_vocab(size + 256, seed):  # printable ASCII repeats are skipped
        if len(vocab) == size - 1:
            break
        vocab.setdefault("".join(to_char[b] for b in word), len(vocab))
    if len(vocab) != size - 1:
        raise RuntimeError(f"could not generate {size - 1} distinct tokens")
    vocab[EOS] = size - 1
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=EOS, bos_token=EOS)
    if len(tok) != size:
        raise RuntimeError(f"tokenizer has {len(tok)} tokens, wanted {size}")
    return tok


def _gpt2_bytes_to_unicode() -> dict[int, str]:
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def random_llama(shape: LlamaShape, device: str, dtype: torch.dtype, seed: int = 0):
    """A `LlamaForCausalLM` with random weights, built directly on `device` in `dtype`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=shape.hidden,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        intermediate_size=shape.intermediate,
        vocab_size=shape.vocab,
        max_position_embeddings=4096,
        bos_token_id=shape.vocab - 1,
        eos_token_id=shape.vocab - 1,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype)
    return model.eval()


def prompted_over(model, tokenizer):
    """A `PromptedLLM` over a (model, tokenizer) pair: `PromptedLLM(CachedTransformer(...))`,
    its rows kept as tensors on the model's device (the default on a GPU; on the CPU
    smoke run this takes the same tensor path)."""
    from genlm.control import PromptedLLM
    from genlm.control.lm._hf_batch import CachedTransformer

    return PromptedLLM(CachedTransformer(model, tokenizer), rows="device")


def synchronize(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _draw(probs: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Inverse-CDF draw of one token per row, on the rows' device (as `floor._draw`)."""
    cdf = probs.cumsum(dim=-1)
    u = torch.rand(probs.shape[0], 1, generator=gen, dtype=cdf.dtype, device=cdf.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).clamp_(max=probs.shape[1] - 1)


@torch.no_grad()
def device_floor(model, prompt_ids: list[int], n: int, steps: int, seed: int) -> float:
    """Seconds for plain batched decoding on the model's device: one prompt forward,
    then `steps - 1` forwards of `n` new tokens over a KV cache, a softmax and an
    inverse-CDF draw per row per step (`floor.lm_floor`, with the tensors and the
    generator on the device). Synchronised before and after."""
    device = model.device
    gen = torch.Generator(device=device).manual_seed(seed)
    cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    ids = torch.tensor([prompt_ids] * n, device=device)
    synchronize(device)
    t0 = time.perf_counter()
    out = model(ids, use_cache=True, **{cache_arg: DynamicCache()})
    for step in range(steps):
        tokens = _draw(torch.softmax(out.logits[:, -1].float(), dim=-1), gen)
        if step + 1 < steps:
            states = getattr(out, "cache", None)
            states = out.past_key_values if states is None else states
            out = model(tokens, use_cache=True, **{cache_arg: states})
    synchronize(device)
    return time.perf_counter() - t0
