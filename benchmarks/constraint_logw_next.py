"""Time `logw_next` of coerced constraint potentials over the embedded model's vocabulary.

For each constraint, a context of 50 tokens is drawn (seeded) from the coerced
potential itself, then `logw_next(ctx[:L])` is timed for L in 1, 10, 50:

- warm: right after `logw_next(ctx[:L-1])`, as in SMC, where each particle
  extends its context by one token per step;
- hot: the same call again (a state already seen: cached tables/charts);
- cold: on a fresh copy (`spawn()`), with no cached state.

Run:  python benchmarks/constraint_logw_next.py [--repeats 5] [--synthetic]

`--synthetic` uses a 4096-token vocabulary of random ASCII strings instead of the
embedded model's (for machines without the model files).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

REGEX = r"[A-Z][a-z ,]{0,80}\.( [A-Z][a-z ,]{0,80}\.){0,5}"
DATE_LIST = r"\[(\"\d{4}-\d{2}-\d{2}\"(, )?)*\]"
LARK = r"""
start: expr
expr: term (("+" | "-") term)*
term: factor (("*" | "/") factor)*
factor: NUMBER | "(" expr ")"
NUMBER: /[0-9]+/
%ignore " "
"""
JSON_SMALL = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
}
JSON_RICH = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 0, "maximum": 99999},
            "tag": {"enum": ["red", "green", "blue"]},
            "note": {"type": "string", "maxLength": 40},
            "score": {"anyOf": [{"type": "number", "minimum": 0, "maximum": 1}, {"type": "null"}]},
        },
        "required": ["id", "tag"],
        "additionalProperties": False,
    },
}
LENGTHS = (1, 10, 50)


def embedded_vocab() -> list:
    from genlm.backend.tokenization import decode_vocab
    from transformers import AutoTokenizer

    from genlm.control.embedded import model_path

    tok = AutoTokenizer.from_pretrained(model_path())
    vocab, _ = decode_vocab(tok)
    return [t for t in vocab if t.token_id != tok.eos_token_id]


def synthetic_vocab(rng: np.random.Generator, n: int = 4096) -> list:
    alphabet = np.array(list(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789 ,.-+*/()[]\"{}:"))
    words = {bytes([b]) for b in alphabet.tolist()}
    while len(words) < n:
        words.add(bytes(rng.choice(alphabet, size=int(rng.integers(2, 7))).tolist()))
    return sorted(words)


async def draw_context(potential, rng: np.random.Generator, length: int) -> list:
    """A context drawn token by token among the tokens `potential` allows (uniformly)."""
    ctx: list = []
    for _ in range(length):
        row = await potential.logw_next(ctx)
        live = np.flatnonzero(np.isfinite(row.weights[:-1]))
        if len(live) == 0:
            break
        ctx.append(potential.vocab[int(rng.choice(live))])
    return ctx


async def time_call(potential, ctx) -> float:
    t0 = time.perf_counter()
    await potential.logw_next(ctx)
    return (time.perf_counter() - t0) * 1e6


async def bench(name: str, potential, rng, repeats: int) -> None:
    ctx = await draw_context(potential, rng, max(LENGTHS))
    for length in LENGTHS:
        if length > len(ctx):
            print(f"{name:<12} L={length:<3} (context ended after {len(ctx)} tokens)")
            continue
        warm, cold, hot = [], [], []
        for _ in range(repeats):
            fresh = potential.spawn()
            await fresh.logw_next(ctx[: length - 1])
            warm.append(await time_call(fresh, ctx[:length]))
            hot.append(await time_call(fresh, ctx[:length]))
            cold.append(await time_call(potential.spawn(), ctx[:length]))
        print(
            f"{name:<12} L={length:<3} warm {statistics.median(warm):>9.0f} µs  "
            f"hot {statistics.median(hot):>9.0f} µs  cold {statistics.median(cold):>9.0f} µs"
        )


def constraints():
    from genlm.control import WFSA, BoolCFG, BoolFSA, JsonSchema

    yield "regex-bool", BoolFSA.from_regex(REGEX)
    yield "regex-float", WFSA.from_regex(REGEX)
    yield "dates-bool", BoolFSA.from_regex(DATE_LIST)
    yield "lark-bool", BoolCFG.from_lark(LARK)
    yield "json", JsonSchema(JSON_SMALL)
    yield "json-rich", JsonSchema(JSON_RICH)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--synthetic", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    vocab = synthetic_vocab(rng) if args.synthetic else embedded_vocab()
    print(f"vocabulary: {len(vocab)} tokens ({'synthetic' if args.synthetic else 'embedded model'})")
    for name, byte_potential in constraints():
        coerced = byte_potential.coerce(vocab, f=b"".join)
        await bench(name, coerced, np.random.default_rng(args.seed), args.repeats)


if __name__ == "__main__":
    asyncio.run(main())
