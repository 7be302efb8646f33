"""The benchmarked workloads, each paired with its floor.

A `Workload` runs one SMC job and returns how many tokens it generated; its
`floor(seed, draw)` runs plain batched ancestral sampling with the same model,
batch size and number of steps (see `floor.py`; `draw` is "inverse_cdf" or
"multinomial") and returns its token count.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import numpy as np
import torch
from floor import lm_floor, row_floor

REGEX = r"[A-Z][a-z ,]{0,80}\.( [A-Z][a-z ,]{0,80}\.){0,5}"
JSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
}
SQL_GRAMMAR = r"""
start: "select " columns " from " table where?
columns: "*" | column ("," " "? column)*
column: "name" | "value" | "id"
table: "users" | "items"
where: " where " column " " op " " /[0-9]{1,3}/
op: "=" | "<" | ">"
"""
SYNTHETIC_REGEX = r"[a-z ,.]+"  # lowercase text: most words of `synthetic_vocab` are allowed
MAX_TOKENS = 32


@dataclass
class Workload:
    """One benchmarked job.

    Attributes:
        name: row label.
        n: particles (the floor's batch size).
        steps: the floor's number of tokens per sequence.
        run: `await run(seed)` runs the job and returns the tokens it generated.
        floor: `floor(seed, draw)` runs the floor and returns its tokens.
        reset: called before each timed run (clears the LM's caches).
        per_step: report milliseconds per step as well.
    """

    name: str
    n: int
    steps: int
    run: Callable[[int], Awaitable[int]]
    floor: Callable[..., int]
    reset: Callable[[], None] = lambda: None
    per_step: bool = False


def generated_tokens(sequences) -> int:
    """Tokens in the returned contexts, EOS included."""
    return sum(len(ctx) for ctx in sequences.contexts)


def smc_job(sampler, n: int, max_tokens: int = MAX_TOKENS) -> Callable[[int], Awaitable[int]]:
    async def run(seed: int) -> int:
        seqs = await sampler.smc(n_particles=n, ess_threshold=0.5, max_tokens=max_tokens, seed=seed)
        return generated_tokens(seqs)

    return run


def gathered_job(sampler, n: int, runs: int) -> Callable[[int], Awaitable[int]]:
    async def run(seed: int) -> int:
        results = await asyncio.gather(
            *(
                sampler.smc(n_particles=n, ess_threshold=0.5, max_tokens=MAX_TOKENS, seed=seed * runs + i)
                for i in range(runs)
            )
        )
        return sum(generated_tokens(s) for s in results)

    return run


def embedded_workloads(names: set[str]) -> list[Workload]:
    """Workloads on the embedded model (`PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")`)."""
    from genlm.control import AWRS, BoolCFG, BoolFSA, JsonSchema, PromptedLLM, direct_token_sampler
    from genlm.control.embedded import EMBEDDED_MODEL

    base = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
    hf = base.model.model

    def reset() -> None:
        base.model.clear_cache()

    def floor_for(llm, n: int) -> Callable[..., int]:
        return lambda seed, draw="inverse_cdf": lm_floor(hf, list(llm._start), n, MAX_TOKENS, seed, draw)

    def prompted(text: str):
        llm = base.spawn()
        llm.set_prompt_from_str(text)
        return llm

    out: list[Workload] = []
    if "unconstrained" in names or "gathered" in names:
        llm = prompted("The function")
        sampler = direct_token_sampler(llm)
        if "unconstrained" in names:
            out.append(Workload("unconstrained (direct, N=16)", 16, MAX_TOKENS, smc_job(sampler, 16), floor_for(llm, 16), reset))
        if "gathered" in names:
            out.append(Workload("1 run (direct, N=16)", 16, MAX_TOKENS, smc_job(sampler, 16), floor_for(llm, 16), reset))
            out.append(Workload("4 runs gathered (direct, N=16 each)", 64, MAX_TOKENS, gathered_job(sampler, 16, 4), floor_for(llm, 64), reset))
    constrained: list[tuple[str, str, Any]] = []
    if "regex" in names:
        constrained.append(("regex (AWRS, N=10)", "Summary:", lambda: BoolFSA.from_regex(REGEX)))
    if "json" in names:
        constrained.append(("JSON schema (AWRS, N=10)", "Data:", lambda: JsonSchema(JSON_SCHEMA, spelling="canonical")))
    if "sql" in names:
        constrained.append(("SQL Lark grammar (AWRS, N=10)", "Query:", lambda: BoolCFG.from_lark(SQL_GRAMMAR)))
    for label, prompt, build in constrained:
        llm = prompted(prompt)
        sampler = AWRS(llm, build().coerce(llm, f=b"".join))
        out.append(Workload(label, 10, MAX_TOKENS, smc_job(sampler, 10), floor_for(llm, 10), reset))
    return out


def synthetic_vocab(size: int, seed: int = 0) -> list[bytes]:
    """`size` distinct BPE-like byte strings: every printable ASCII byte, then words of
    1–9 lowercase letters (half with a leading space, a tenth capitalized)."""
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"etaoinshrdlcumwfgypbvkjxqz", dtype=np.uint8)
    freq = 1.0 / np.arange(1, len(letters) + 1)
    freq /= freq.sum()
    words = dict.fromkeys(bytes([b]) for b in range(32, 127))
    while len(words) < size:
        word = rng.choice(letters, size=int(rng.integers(1, 10)), p=freq).tobytes()
        if rng.random() < 0.1:
            word = word.capitalize()
        words.setdefault(b" " + word if rng.random() < 0.5 else word)
    return list(words)


def synthetic_workloads(sizes: list[int]) -> list[Workload]:
    """Per-step cost of the constraint path on LMs of 4k–128k tokens whose rows cost nothing."""
    from genlm.control import AWRS, BoolFSA, direct_token_sampler
    from genlm.control.potential.base import Potential

    class FixedRowLM(Potential):
        """`logw_next(ctx)` is one fixed Zipf-like row after every context, in float32
        as a `PromptedLLM`'s rows on the CPU are (the model's own precision)."""

        def __init__(self, vocab: list[bytes], seed: int = 0):
            super().__init__(vocab)
            ranks = np.random.default_rng(seed).permutation(len(vocab) + 1) + 1.0
            row = -1.1 * np.log(ranks)
            self.row = (row - np.logaddexp.reduce(row)).astype(np.float32)

        async def logw_next(self, context):
            return self.make_lazy_weights(self.row.copy())

        async def batch_logw_next(self, contexts):
            return self.rows_to_weights(np.repeat(self.row[None, :], len(contexts), axis=0))

        async def batch_eos_entries(self, contexts):
            # as a PromptedLLM does (`fast_paths.EosEntries`): the end twist reads
            # the EOS entries without a second row per context
            return np.full(len(contexts), float(self.row[-1]))

        async def prefix(self, context):
            return float(sum(self.row[self.lookup[t]] for t in context))

        async def complete(self, context):
            return await self.prefix(context) + float(self.row[-1])

    out = []
    for size in sizes:
        lm = FixedRowLM(synthetic_vocab(size))
        logits = torch.from_numpy(lm.row.astype(np.float64))  # the floor as before (it draws in float32)
        floor = (lambda lg: lambda seed, draw="inverse_cdf": row_floor(lg, 10, MAX_TOKENS, seed, draw))(logits)
        label = f"{size // 1024}k"
        out.append(Workload(f"synthetic {label}: direct, N=10", 10, MAX_TOKENS, smc_job(direct_token_sampler(lm), 10), floor, per_step=True))
        condition = BoolFSA.from_regex(SYNTHETIC_REGEX).coerce(lm, f=b"".join)
        out.append(Workload(f"synthetic {label}: regex AWRS, N=10", 10, MAX_TOKENS, smc_job(AWRS(lm, condition), 10), floor, per_step=True))
    return out
