"""Checks on the tiny model that ships as package data (never retrained here).

Everything loads with ``local_files_only=True``: no network access is needed.
"""

import importlib.util
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _load_embedded():
    """Import genlm.control.embedded; fall back to its file if the package won't import."""
    try:
        from genlm.control import embedded

        return embedded
    except Exception:  # the surrounding package may be mid-development
        path = (
            Path(__file__).resolve().parent.parent
            / "genlm"
            / "control"
            / "embedded"
            / "__init__.py"
        )
        spec = importlib.util.spec_from_file_location("_genlm_control_embedded", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


embedded = _load_embedded()

VOCAB_SIZE = 4096
MAX_BYTES = 8 * 1024 * 1024


@pytest.fixture(scope="module")
def tokenizer():
    return transformers.AutoTokenizer.from_pretrained(embedded.model_path(), local_files_only=True)


@pytest.fixture(scope="module")
def model():
    m = transformers.AutoModelForCausalLM.from_pretrained(
        embedded.model_path(), local_files_only=True
    )
    m.eval()
    return m


def test_model_path_is_shipped_directory():
    path = Path(embedded.model_path())
    assert path.is_absolute()
    assert path.is_dir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (path / name).is_file(), name


def test_resolve():
    assert embedded.EMBEDDED_MODEL == "genlm-control/tiny-gpt2"
    assert embedded.resolve(embedded.EMBEDDED_MODEL) == embedded.model_path()
    assert embedded.resolve("embedded") == embedded.model_path()
    assert embedded.resolve("gpt2") == "gpt2"
    assert embedded.resolve("/some/local/dir") == "/some/local/dir"


def test_files_total_at_most_8mb():
    path = Path(embedded.model_path())
    total = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    assert 0 < total <= MAX_BYTES


def test_parameter_count(model):
    n = sum(p.numel() for p in model.parameters())
    assert 500_000 <= n <= 2_000_000


def test_weights_are_float32(model):
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_vocabulary(tokenizer, model):
    assert len(tokenizer) == VOCAB_SIZE
    assert model.config.vocab_size == VOCAB_SIZE
    assert model.get_output_embeddings().weight.shape[0] == VOCAB_SIZE


def test_special_tokens(tokenizer, model):
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert tokenizer.eos_token == "<|endoftext|>"
    assert tokenizer.bos_token == "<|endoftext|>"
    assert tokenizer.eos_token_id == eot
    assert tokenizer.bos_token_id == eot
    assert model.config.eos_token_id == eot
    assert model.config.bos_token_id == eot


def test_tokenizer_round_trip(tokenizer):
    text = "def f(x):\n    return x ** 2  # ’•¶∂ƒ 爨"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert all(0 <= i < VOCAB_SIZE for i in ids)
    assert tokenizer.decode(ids) == text


def test_next_token_distribution_is_far_from_uniform(tokenizer, model):
    ids = tokenizer("The return value", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = model(ids).logits[0, -1]
    logp = torch.log_softmax(logits.double(), dim=-1)
    entropy = -(logp.exp() * logp).sum().item()
    assert entropy < 0.8 * math.log(VOCAB_SIZE)


def test_genlm_backend_decodes_byte_vocabulary(tokenizer):
    tokenization = pytest.importorskip("genlm.backend.tokenization")
    byte_vocab, _ = tokenization.decode_vocab(tokenizer)
    assert len(byte_vocab) == VOCAB_SIZE
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert byte_vocab[eot].byte_string == b"<|endoftext|>"
    # Every single byte is a token of its own, so any byte string is reachable.
    singles = {t.byte_string for t in byte_vocab if len(t.byte_string) == 1}
    assert singles == {bytes([b]) for b in range(256)}
