"""What `HarmonyPotential` adds to its base potential, per call.

A stand-in for gpt-oss (the embedded model's tokenizer and weights with Harmony's
special tokens added; nothing downloaded) and a regex base coerced onto the model (the
compiled engine's route when it serves the regex). Measured, interleaved, each the
median of `--reps` calls on warm caches:

- `logw_next` inside the final channel: the base on the channel's tokens alone, and
  `HarmonyPotential` on the whole output (thinking + final); the difference is the
  Harmony overhead (reader lookup, special tokens scored, the row mapped);
- `prefix` on an output growing one token per call (as SMC extends a particle), at
  short and long lengths: the reader's state is carried, so the cost per token should
  not grow with the output's length (beyond hashing the context);
- the first `logw_next` in a header (its row of viable tokens built once per header text).

Usage:
    python benchmarks/reasoning_overhead.py [--reps 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from toys.reasoning import save_reasoning_model  # noqa: E402

from genlm.control import BoolFSA, HarmonyPotential, PromptedLLM  # noqa: E402


def stand_in() -> str:
    """The suite's reasoning stand-in (the embedded model with Harmony's and the think
    tags' special tokens added), saved to a temporary folder."""
    return str(save_reasoning_model(Path(tempfile.mkdtemp())))


async def timed(fn, *args) -> float:
    t = time.perf_counter()
    await fn(*args)
    return time.perf_counter() - t


async def main(reps: int) -> None:
    llm = PromptedLLM.from_name(stand_in(), backend="hf")
    tok = llm.model.tokenizer
    base = BoolFSA.from_regex(r"[a-z ]+").coerce(llm, f=b"".join)
    harmony = HarmonyPotential(base, tok, ["final"])
    chat = harmony.harmony_chat

    def tokens(text):
        return chat.decode_tokens(tok.encode(text, add_special_tokens=False))

    thinking = "<|channel|>analysis<|message|>" + "let me think about this " * 20 + "<|end|>"
    content = tokens("the answer is a short phrase")
    head = tokens(thinking + "<|start|>assistant<|channel|>final<|message|>")
    whole = head + content
    await base.logw_next(content)
    await harmony.logw_next(whole)
    b, h = [], []
    for _ in range(reps):
        b.append(await timed(base.logw_next, content))
        h.append(await timed(harmony.logw_next, whole))
    print(
        f"logw_next in final ({len(content)} content tokens, {len(whole)} in all): "
        f"base {statistics.median(b) * 1e6:.0f} µs, harmony {statistics.median(h) * 1e6:.0f} µs"
    )

    words = tokens("word " * 2000)[:2000]
    for n in (100, 1900):
        hs, bs = [], []
        for k in range(n, n + min(reps, 100)):
            hs.append(await timed(harmony.prefix, head + words[:k]))
            bs.append(await timed(base.prefix, words[:k]))
        print(
            f"prefix, one new token per call, {n} tokens into the final channel: harmony "
            f"{statistics.median(hs) * 1e6:.0f} µs, of which the base on the channel "
            f"{statistics.median(bs) * 1e6:.0f} µs alone"
        )

    fresh = HarmonyPotential(base, tok, ["final"])
    t = await timed(fresh.logw_next, tokens("<|channel|>fin"))
    t2 = await timed(fresh.logw_next, tokens("<|channel|>fin"))
    print(f"logw_next in a header: first {t * 1e3:.1f} ms (row built), then {t2 * 1e6:.0f} µs")
    print(f"load: {os.getloadavg()}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    asyncio.run(main(ap.parse_args().reps))
