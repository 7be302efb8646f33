"""Real vocabularies on the Hugging Face backend: the converted tokenizers encode like
the originals, byte pieces decode to their byte and stay distinct tokens by id, and text
round-trips through prompts and `tokenize` (leading spaces, newlines, non-ASCII)."""

import asyncio

import numpy as np
import pytest
from toys.real_tokenizers import reference_encoder
from toys.realtok_checks import TEXTS, random_texts

from genlm.control.lm._text_encoding import continuation_encoder


def test_converted_tokenizer_encodes_like_the_original(real_llm, kind):
    """The HF tokenizer the builder writes equals sentencepiece / mistral_common's
    tiktoken Tekkenizer on fixed and random texts."""
    tok, ref = real_llm.model.tokenizer, reference_encoder(kind)
    for text in TEXTS + random_texts(400, seed=1):
        assert tok.encode(text, add_special_tokens=False) == ref(text), repr(text)


def test_spm_byte_pieces_decode_to_their_byte_and_stay_distinct(spm_llm):
    """Ids 3-258 are `<0x00>`..`<0xFF>`: each is its one byte; where a piece has the
    same byte, both are vocabulary tokens, told apart by id, with their own weights."""
    decode = spm_llm.token_maps.decode
    tok = spm_llm.model.tokenizer
    assert [tok.convert_ids_to_tokens(i) for i in (3, 13, 258)] == ["<0x00>", "<0x0A>", "<0xFF>"]
    assert [bytes(decode[i]) for i in range(3, 259)] == [bytes([b]) for b in range(256)]
    assert bytes(decode[tok.convert_tokens_to_ids("▁the")]) == b" the"
    assert bytes(decode[tok.convert_tokens_to_ids("▁")]) == b" "
    a_piece = tok.convert_tokens_to_ids("a")
    a_byte = 3 + ord("a")
    assert a_piece != a_byte and bytes(decode[a_piece]) == bytes(decode[a_byte]) == b"a"
    vocab_ids = [t.token_id for t in spm_llm.vocab]
    assert a_piece in vocab_ids and a_byte in vocab_ids and len(set(vocab_ids)) == len(vocab_ids)
    assert spm_llm.encode_tokens([decode[a_piece], decode[a_byte]]) == [a_piece, a_byte]
    # each id conditions the model on itself: rows after the two differ
    rows = asyncio.run(spm_llm.batch_logw_next([[decode[a_piece]], [decode[a_byte]]]))
    assert not np.allclose(rows[0].weights, rows[1].weights)
    row = asyncio.run(spm_llm.logw_next([]))
    assert row.weights[vocab_ids.index(a_piece)] != row.weights[vocab_ids.index(a_byte)]


def test_tekken_vocabulary_layout(tekken_llm):
    """1,000 special tokens (their names as bytes), then the 256 single bytes, then
    130,072 - 256 merged pieces; EOS `</s>` is the one token left out of the vocabulary."""
    decode = tekken_llm.token_maps.decode
    assert len(decode) == 131072 and len(tekken_llm.vocab) == 131071
    assert [bytes(decode[i]) for i in (0, 1, 2, 3)] == [b"<unk>", b"<s>", b"</s>", b"[INST]"]
    assert [bytes(decode[1000 + b]) for b in range(256)] == [bytes([b]) for b in range(256)]
    assert tekken_llm.token_maps.eos_idxs == (2,)
    assert bytes(decode[tekken_llm.tokenize(" hello")[0].token_id]) == b" hello"


@pytest.mark.parametrize("text", TEXTS)
def test_tokenize_spells_the_text(real_llm, text):
    """`tokenize` is the continuation encoding: its tokens' bytes are the text's UTF-8
    (no SentencePiece dummy prefix), and it is the tokenizer's own encoding of the text
    where the tokenizer adds no prefix."""
    tokens = real_llm.tokenize(text)
    assert b"".join(bytes(t) for t in tokens) == text.encode()
    tok = real_llm.model.tokenizer
    if not continuation_encoder(tok).strips_prefix:
        assert [t.token_id for t in tokens] == tok.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("text", TEXTS)
def test_prompt_round_trips(real_llm, kind, text):
    """`set_prompt_from_str` is the tokenizer's encoding with BOS; the prompt's bytes
    after BOS are the text (after SentencePiece's dummy `▁`), and the tokenizer decodes
    the prompt back to the text."""
    llm = real_llm.spawn()
    llm.set_prompt_from_str(text)
    tok = llm.model.tokenizer
    assert llm.prompt_ids[0] == tok.bos_token_id
    body = b"".join(bytes(t) for t in llm.prompt[1:])
    assert body == (b" " if kind == "spm" else b"") + text.encode()
    assert tok.decode(llm.prompt_ids, skip_special_tokens=True) == text
    row = asyncio.run(llm.logw_next([]))
    assert np.logaddexp.reduce(row.weights) == pytest.approx(0.0, abs=1e-4)  # float32 rows


@pytest.mark.parametrize("layout", ["metaspace", "normalizer"])
def test_continuation_encoding_drops_only_the_prefix_space(layout):
    """Both layouts of SentencePiece tokenizers in `tokenizer.json` files (a Metaspace
    pre-tokenizer that prepends `▁`, or a `Prepend` normalizer) lose the dummy prefix
    and nothing else; a tokenizer without one is left as it is."""
    from tokenizers import normalizers
    from transformers import LlamaTokenizer

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "▁": 3, "h": 4, "i": 5, "▁h": 6, "hi": 7, "▁hi": 8}
    tok = LlamaTokenizer(vocab=vocab, merges=[("▁", "h"), ("h", "i"), ("▁h", "i")])
    if layout == "normalizer":
        backend = tok.backend_tokenizer
        backend.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        backend.pre_tokenizer = None
    assert tok.encode("hi", add_special_tokens=False) == [8]
    enc = continuation_encoder(tok)
    assert enc.strips_prefix
    assert enc.encode("hi") == [7] and enc.encode(" hi") == [8] and enc.encode("hi hi") == [7, 8]
    assert continuation_encoder(tok) is enc  # built once per tokenizer
