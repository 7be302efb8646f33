"""The checks of the real-tokenizer suite that read the model's rows, shared by the
Hugging Face suite (`tests/realtok`) and the vLLM one (`tests/vllm_backend/test_realtok_*.py`).

- texts: `TEXTS` (leading spaces, newlines, tabs, non-ASCII) and `random_texts`;
- exact enumeration: `enumerate_target` lists every live token sequence of the target
  `LM(x) · c(x)` with its weight, level by level (each level one batch of rows);
  `language()` is the byte strings of `PATTERN`;
- `smc_ratios` runs seeded SMC and returns `Ẑ/Z` per run, checking that no run puts
  weight off the language; `assert_unbiased` bounds their mean.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random

import numpy as np

ALPHABET = list("ab cXY  \n\t.,!?'07éü€日本🙂\u00a0-_<>") + ["  ", "\n\n", " the", "ing"]
TEXTS = [" leading space", "  two spaces", "line\nbreak\n", "\n starts with a newline",
         "héllo wörld 日本語 🙂", "\ttab and trailing  ", "a\n\nb  c", "   "]

PATTERN = r" (a|an)( (a|an)){0,1}\."
WORDS = (b"a", b"an")
MAX_TOKENS = 6


def random_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 16))) for _ in range(n)]


def language() -> list[bytes]:
    """The strings of `PATTERN`: one or two of `a`/`an`, each after a space, then `.`."""
    return [b"".join(b" " + w for w in ws) + b"." for n in (1, 2) for ws in itertools.product(WORDS, repeat=n)]


async def enumerate_target(llm, condition, max_tokens: int = MAX_TOKENS) -> dict:
    """Every live token sequence (ids, EOS left out) of at most `max_tokens - 1` tokens
    that ends in EOS, with its log weight `log LM(x·EOS) + log c(x·EOS)`."""
    vocab_eos, eos = llm.vocab_eos, len(llm.vocab_eos) - 1
    level, ends = [((), float(await llm.prefix([])))], {}
    while level:
        contexts = [[vocab_eos[i] for i in ids] for ids, _ in level]
        lm_rows, c_rows = await asyncio.gather(llm.batch_logw_next(contexts), condition.batch_logw_next(contexts))
        deeper = []
        for (ids, logw), lm_row, c_row in zip(level, lm_rows, c_rows):
            lm_w, c_w = np.asarray(lm_row.weights), np.asarray(c_row.weights)
            if lm_w[eos] + c_w[eos] > -math.inf:
                ends[ids] = float(logw + lm_w[eos] + c_w[eos])
            if len(ids) < max_tokens - 1:
                deeper += [(ids + (int(i),), logw + float(lm_w[i])) for i in np.flatnonzero(c_w[:eos] == 0)]
        level = deeper
    return ends


def log_z(target: dict) -> float:
    return float(np.logaddexp.reduce(list(target.values())))


def smc_ratios(sampler, target: dict, runs: int, group: int, n_particles: int = 6) -> np.ndarray:
    """`Ẑ/Z` of `runs` seeded SMC runs (no resampling), `group` of them gathered at a
    time; every run's live particles spell a string of the language."""

    async def all_runs():
        out = []
        for start in range(0, runs, group):
            out += await asyncio.gather(
                *(sampler.smc(n_particles=n_particles, ess_threshold=0.0, max_tokens=MAX_TOKENS, seed=s)
                  for s in range(start, min(runs, start + group)))
            )
        return out

    results = asyncio.run(all_runs())
    strings = set(language())
    for r in results:
        for ctx, w in zip(r.contexts, r.log_weights):
            if w > -math.inf:
                assert b"".join(bytes(t) for t in ctx[:-1]) in strings, ctx
    z = log_z(target)
    return np.array([math.exp(r.log_ml - z) for r in results])


def assert_unbiased(ratios: np.ndarray) -> None:
    """The mean of `Ẑ/Z` within `4σ + 0.05` of 1 (as `tests/sampler/test_exactness_llm.py`)."""
    sigma = ratios.std(ddof=1) / math.sqrt(len(ratios))
    assert abs(ratios.mean() - 1.0) < 4 * sigma + 0.05, (ratios.mean(), sigma)


__all__ = ["ALPHABET", "MAX_TOKENS", "PATTERN", "TEXTS", "assert_unbiased", "enumerate_target",
           "language", "log_z", "random_texts", "smc_ratios"]
