"""Small Llama-shaped models over real tokenizers, built from `mistral_common`'s data files.

Two kinds, each a Hugging Face model directory (`config.json`, weights, `tokenizer.json`)
with random weights and a tiny hidden size (32; four heads of 32 dimensions, the smallest
head size vLLM's CPU kernels take), so that a forward costs little on a CPU, on the Hugging
Face backend and on vLLM's:

- `"spm"`: Mistral 7B's SentencePiece vocabulary (`tokenizer.model.v1`, 32,000 pieces,
  byte fallback: ids 3-258 are `<0x00>`..`<0xFF>`, `▁` for spaces), converted with
  transformers' SentencePiece extractor into a `LlamaTokenizer`;
- `"tekken"`: Mistral NeMo's byte-level BPE (`tekken_240911.json`, 131,072 tokens: 1,000
  special tokens, then 130,072 byte-level pieces), converted with transformers' own
  tekken converter.

`model_dir(kind)` builds a model once per machine and version of the inputs (under the
system's temporary directory, written to a scratch directory and renamed into place, so
concurrent test workers never see half a model) and returns its path; the weights come
from `torch.manual_seed(seed)`. Nothing is downloaded: the tokenizers are files of the
`mistral_common` package. `reference_encoder(kind)` is the original tokenizer
(sentencepiece or mistral_common's tiktoken `Tekkenizer`) as `text -> ids`, against which
the converted tokenizer is checked.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Callable

KINDS = ("spm", "tekken")
SPM_FILE = "tokenizer.model.v1"
TEKKEN_FILE = "tekken_240911.json"
# The builder's own version: bump it when what it writes changes.
BUILDER_VERSION = 5



def data_file(name: str) -> Path:
    """A data file of the installed `mistral_common` package."""
    import mistral_common

    path = Path(mistral_common.__file__).parent / "data" / name
    if not path.is_file():
        raise FileNotFoundError(f"mistral_common ships no {name} (looked in {path.parent})")
    return path


def _cache_key(kind: str, seed: int, hidden: int) -> str:
    import mistral_common
    import transformers

    parts = (BUILDER_VERSION, kind, seed, hidden, mistral_common.__version__, transformers.__version__)
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:12]


def model_dir(kind: str, seed: int = 0, hidden: int = 32, root: str | os.PathLike | None = None) -> Path:
    """The directory of the `kind` model, built on first use and reused afterwards.

    Args:
        kind: "spm" or "tekken".
        seed: seeds the random weights.
        hidden: the model's hidden size.
        root: where models are cached (default: `genlm-realtok` under the system's
            temporary directory).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown tokenizer kind {kind!r}: choose one of {list(KINDS)}")
    base = Path(root) if root is not None else Path(tempfile.gettempdir()) / "genlm-realtok"
    target = base / f"{kind}-{_cache_key(kind, seed, hidden)}"
    if (target / "DONE").is_file():
        return target
    base.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{kind}-", dir=base))
    try:
        build_model(kind, scratch, seed=seed, hidden=hidden)
        (scratch / "DONE").write_text("ok\n")
        try:
            scratch.rename(target)
        except OSError:  # another process renamed its copy first
            if not (target / "DONE").is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def hf_tokenizer(kind: str):
    """The Hugging Face tokenizer converted from the `kind` data file."""
    if kind == "spm":
        return _spm_tokenizer()
    if kind == "tekken":
        from transformers.integrations.mistral.tokenizer import convert_tekken_tokenizer

        return convert_tekken_tokenizer(str(data_file(TEKKEN_FILE)), chat_template=None)
    raise ValueError(f"unknown tokenizer kind {kind!r}: choose one of {list(KINDS)}")


def _spm_tokenizer():
    """SentencePiece's pieces and merges as a `LlamaTokenizer`, in the layout of Mistral 7B's
    `tokenizer.json`: a normalizer that adds `▁` before the text (SentencePiece's dummy
    prefix, added even when the text starts with a space) and turns spaces into `▁`, no
    pre-tokenizer. Merges are ranked by the pieces' scores, as SentencePiece merges (the
    whitespace pieces `▁▁`, `▁▁▁`, ... have the lowest scores, though not the highest ids)."""
    from tokenizers import normalizers
    from transformers import LlamaTokenizer
    from transformers.convert_slow_tokenizer import SentencePieceExtractor
    from transformers.tokenization_utils_base import generate_merges

    proto = SentencePieceExtractor(str(data_file(SPM_FILE))).proto
    scores = [(p.piece, p.score) for p in proto.pieces]
    vocab = {piece: i for i, (piece, _) in enumerate(scores)}
    tok = LlamaTokenizer(vocab=vocab, merges=generate_merges(vocab, scores))
    backend = tok.backend_tokenizer
    backend.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    backend.pre_tokenizer = None
    return tok


def build_model(kind: str, out: str | os.PathLike, seed: int = 0, hidden: int = 32) -> Path:
    """Write the `kind` model (random weights from `seed`) and its tokenizer to `out`."""
    import torch
    from tokenizers import processors
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(out)
    tok = hf_tokenizer(kind)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        # vLLM's CPU attention kernels take head sizes of 32 and more (not hidden // heads = 8)
        head_dim=32,
        max_position_embeddings=1024,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=True,
        initializer_range=0.2,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(out)
    # BOS before the text, as both models' released tokenizers add it.
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{tok.bos_token} $A", special_tokens=[(tok.bos_token, tok.bos_token_id)]
    )
    # Saved as a plain fast tokenizer, so that loading it keeps the converted pipeline
    # as written (a `LlamaTokenizer` rebuilds its own pre-tokenizer on load).
    plain = PreTrainedTokenizerFast(
        tokenizer_object=tok.backend_tokenizer,
        bos_token=tok.bos_token,
        eos_token=tok.eos_token,
        unk_token=tok.unk_token,
    )
    plain.save_pretrained(out)
    return out


@lru_cache(maxsize=None)
def reference_encoder(kind: str) -> Callable[[str], list[int]]:
    """The original tokenizer of `kind` as `text -> ids` (no BOS/EOS)."""
    if kind == "spm":
        import sentencepiece

        sp = sentencepiece.SentencePieceProcessor(model_file=str(data_file(SPM_FILE)))
        return lambda text: list(sp.encode(text))
    if kind == "tekken":
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer

        tk = Tekkenizer.from_file(data_file(TEKKEN_FILE))
        return lambda text: list(tk.encode(text, bos=False, eos=False))
    raise ValueError(f"unknown tokenizer kind {kind!r}: choose one of {list(KINDS)}")


__all__ = ["KINDS", "build_model", "data_file", "hf_tokenizer", "model_dir", "reference_encoder"]
