"""Train the tiny GPT-2 model that genlm-control ships as package data.

The model lives in ``genlm/control/embedded/tiny/`` and is what
``genlm.control.embedded.EMBEDDED_MODEL`` resolves to. It exists so that the
tests, the examples and the command-line interface run offline, without
downloading any weights. It is a toy: about one million parameters, a
4096-token byte-level BPE vocabulary, trained for a few minutes on the
documentation topics that ship with CPython (``pydoc_data.topics``).

Run it from the repository root::

    python scripts/train_embedded_model.py            # writes genlm/control/embedded/tiny/
    python scripts/train_embedded_model.py --out /tmp/tiny --steps 50   # quick trial

The run is seeded and deterministic on a given machine and library version
(CPU only, two threads, deterministic algorithms); it takes about five
minutes on two idle cores. The tests never retrain: they load the committed files.
Rerun this script only to change the shipped model, and commit its output.
"""

import argparse
import json
import math
import os
import random
import time
from pathlib import Path

# Pin every source of parallelism before the numerical libraries load.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pydoc_data.topics import topics  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from tokenizers import (  # noqa: E402
    Tokenizer,
    decoders,
    models,
    pre_tokenizers,
    processors,
    trainers,
)
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer  # noqa: E402

EOT = "<|endoftext|>"
VOCAB_SIZE = 4096
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "genlm" / "control" / "embedded" / "tiny"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=600, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--block-size", type=int, default=256, help="training context")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    return p.parse_args()


def seed_everything(seed, threads):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)


def corpus():
    """The pydoc topics in a fixed order (sorted by topic name)."""
    return [topics[name] for name in sorted(topics)]


def train_tokenizer(docs):
    """A GPT-2 style byte-level BPE with a single special token, ``<|endoftext|>``."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=[EOT],
        # All 256 byte symbols are in the vocabulary, so any text can be encoded.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer)
    assert tok.get_vocab_size() == VOCAB_SIZE, tok.get_vocab_size()
    assert tok.token_to_id(EOT) == 0
    return tok


def wrap_tokenizer(tok, block_size):
    """Wrap the raw tokenizer as a transformers GPT-2 tokenizer."""
    # The vocabulary and the merges (in rank order) of the trained BPE model.
    state = json.loads(tok.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in state["merges"]]
    hf_tok = GPT2Tokenizer(
        vocab=state["vocab"],
        merges=merges,
        unk_token=EOT,
        bos_token=EOT,
        eos_token=EOT,
        add_prefix_space=False,
        model_max_length=block_size,
    )
    return hf_tok


def encode_stream(tok, docs):
    """Token ids of the documents joined by ``<|endoftext|>`` (also one at each end)."""
    eot = tok.token_to_id(EOT)
    ids = [eot]
    for doc in docs:
        ids.extend(tok.encode(doc).ids)
        ids.append(eot)
    return torch.tensor(ids, dtype=torch.long)


def split_stream(ids, block_size, val_every=20):
    """Cut the stream into blocks; every ``val_every``-th block is held out."""
    n_blocks = len(ids) // block_size
    train, val = [], []
    for b in range(n_blocks):
        chunk = ids[b * block_size : (b + 1) * block_size]
        (val if b % val_every == val_every // 2 else train).append(chunk)
    train.append(ids[n_blocks * block_size :])
    return torch.cat(train), torch.stack(val)


def build_model(block_size):
    config = GPT2Config(
        vocab_size=VOCAB_SIZE,
        n_positions=block_size,
        n_embd=128,
        n_layer=2,
        n_head=4,
        n_inner=None,  # 4 * n_embd
        resid_pdrop=0.1,
        embd_pdrop=0.1,
        attn_pdrop=0.1,
        bos_token_id=0,
        eos_token_id=0,
        tie_word_embeddings=True,
    )
    return GPT2LMHeadModel(config)


@torch.no_grad()
def evaluate(model, val_blocks, batch_size):
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(val_blocks), batch_size):
        x = val_blocks[i : i + batch_size]
        logits = model(x).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1), reduction="sum"
        )
        total += loss.item()
        count += x[:, 1:].numel()
    model.train()
    return total / count


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def main():
    args = parse_args()
    t0 = time.time()
    seed_everything(args.seed, args.threads)

    docs = corpus()
    tok = train_tokenizer(docs)
    hf_tok = wrap_tokenizer(tok, args.block_size)
    ids = encode_stream(tok, docs)
    train_ids, val_blocks = split_stream(ids, args.block_size)
    print(
        f"corpus: {len(docs)} documents, {sum(map(len, docs))} characters, "
        f"{len(ids)} tokens ({len(train_ids)} train, {val_blocks.numel()} validation)"
    )

    model = build_model(args.block_size)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params} ({n_params / 1e6:.3f}M)")
    print(f"uniform loss: {math.log(VOCAB_SIZE):.3f} nats/token")

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": args.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=args.lr,
        betas=(0.9, 0.95),
    )
    gen = torch.Generator().manual_seed(args.seed)
    n_windows = len(train_ids) - args.block_size
    print(f"setup: {time.time() - t0:.1f}s")

    model.train()
    t_train = time.time()
    running = None
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args)
        starts = torch.randint(0, n_windows, (args.batch_size,), generator=gen)
        x = torch.stack([train_ids[s : s + args.block_size] for s in starts.tolist()])
        loss = model(x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        running = loss.item() if running is None else 0.95 * running + 0.05 * loss.item()
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            val = evaluate(model, val_blocks, args.batch_size)
            print(
                f"step {step + 1:5d}  train {running:.4f}  val {val:.4f}  "
                f"lr {lr_at(step, args):.2e}  {time.time() - t_train:.0f}s"
            )

    train_loss = running
    val_loss = evaluate(model, val_blocks, args.batch_size)
    print(f"final: train loss {train_loss:.4f}, validation loss {val_loss:.4f} nats/token")
    print(f"training time: {time.time() - t_train:.1f}s")

    model.eval()
    torch.manual_seed(args.seed)
    for prompt in ["The return value", "A class definition"]:
        x = hf_tok(prompt, return_tensors="pt")["input_ids"]
        out = model.generate(
            x,
            attention_mask=torch.ones_like(x),
            do_sample=True,
            top_k=0,
            temperature=1.0,
            max_new_tokens=40,
            pad_token_id=hf_tok.eos_token_id,
        )
        print(f"sample: {hf_tok.decode(out[0])!r}")

    args.out.mkdir(parents=True, exist_ok=True)
    model = model.to(torch.float32)
    model.save_pretrained(args.out)
    hf_tok.save_pretrained(args.out)
    # Recent transformers keep the special tokens in tokenizer_config.json only;
    # write the map too, for older loaders.
    special = {"bos_token": EOT, "eos_token": EOT, "unk_token": EOT}
    (args.out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    size = sum(f.stat().st_size for f in args.out.iterdir() if f.is_file())
    print(f"wrote {args.out} ({size / 1e6:.2f} MB)")
    print(f"total wall time: {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
