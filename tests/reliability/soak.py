"""The soak workload shared by tests/reliability/test_soak.py and benchmarks/soak.py:
SMC on the embedded model under a regex constraint, run after run, with default
settings (no cache is resized), resident memory and every bounded cache inspected
along the way."""

from __future__ import annotations

import asyncio
import gc
import os
import time
from dataclasses import dataclass

import psutil

from genlm.control import AWRS, BoolFSA, PromptedLLM
from genlm.control._state_cache import PrefixStateCache, RowCache

os.environ.setdefault("HF_HUB_OFFLINE", "1")

PATTERN = r" [a-z]{1,8}( [a-z]{1,8}){0,3}\."
RUN = dict(n_particles=4, ess_threshold=0.5, max_tokens=6)


@dataclass
class Workload:
    llm: PromptedLLM
    sampler: AWRS

    async def run(self, seed: int):
        return await self.sampler.smc(seed=seed, **RUN)

    async def gathered(self, seeds):
        return await asyncio.gather(*(self.run(s) for s in seeds))


def workload() -> Workload:
    from genlm.control.embedded import EMBEDDED_MODEL

    llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
    llm.set_prompt_from_str("Here is a sentence:")
    fsa = BoolFSA.from_regex(PATTERN).coerce(llm, f=b"".join)
    return Workload(llm, AWRS(llm, fsa))


def rss_bytes() -> int:
    """Resident memory of this process after a full garbage collection."""
    gc.collect()
    return psutil.Process().memory_info().rss


@dataclass(frozen=True)
class CacheSize:
    where: str
    size: int
    bound: int | None  # None: the cache has no bound


def cache_sizes(root, depth: int = 4) -> list[CacheSize]:
    """Every cache reachable from `root` through attributes, with its size and bound."""
    out: list[CacheSize] = []
    seen: set[int] = set()

    def visit(obj, path: str, d: int) -> None:
        if id(obj) in seen or d < 0:
            return
        seen.add(id(obj))
        if isinstance(obj, (PrefixStateCache, RowCache)):
            out.append(CacheSize(path, len(obj), obj.size))
            return
        attrs = getattr(obj, "__dict__", None)
        if attrs is None:
            return
        if "max_bytes" in attrs and hasattr(obj, "nbytes"):
            out.append(CacheSize(f"{path} (bytes)", int(obj.nbytes), int(attrs["max_bytes"])))
        if "_caches" in attrs:  # genlm-backend's HF token trie: no eviction
            nodes = sum(_trie_nodes(t) for t in attrs["_caches"].values())
            out.append(CacheSize(f"{path}._caches (trie nodes)", nodes, None))
        for name, value in attrs.items():
            values = value.items() if isinstance(value, dict) else [(None, value)]
            for key, v in values:
                if hasattr(v, "__dict__") and not isinstance(v, type):
                    where = f"{path}.{name}" + ("" if key is None else f"[{key!r}]")
                    visit(v, where, d - 1)

    visit(root, type(root).__name__, depth)
    return out


def _trie_nodes(node) -> int:
    count, stack = -1, [node]  # the root holds no query
    while stack:
        n = stack.pop()
        count += 1
        stack.extend(getattr(n, "children", {}).values())
    return count


def all_caches(w: Workload) -> list[CacheSize]:
    """Every cache of the workload (the model's reached through both the LLM and the sampler)."""
    return cache_sizes(w.sampler) + cache_sizes(w.llm)


def filling(sizes: list[CacheSize], fraction: float = 0.9) -> list[CacheSize]:
    """The bounded caches holding less than `fraction` of their bound (still filling)."""
    return [c for c in sizes if c.bound and c.size < fraction * c.bound]


async def warm_up(w: Workload, max_runs: int, fraction: float = 0.9) -> int:
    """Run until every bounded cache the workload fills holds `fraction` of its bound
    (a cache that stops growing for 50 runs counts as full), or `max_runs` runs;
    returns the number of runs made."""
    last, still = {}, 0
    for run in range(max_runs):
        await w.run(run)
        sizes = {c.where: c.size for c in filling(all_caches(w), fraction)}
        if not sizes:
            return run + 1
        still = still + 1 if sizes == last else 0
        if still >= 50:
            return run + 1
        last = sizes
    return max_runs


def bounded_bytes(sizes: list[CacheSize]) -> int:
    """Bytes held by the caches whose size is counted in bytes."""
    return sum(c.size for c in sizes if c.where.endswith("(bytes)"))


async def timed_runs(w: Workload, seeds) -> list[float]:
    """Wall time of each consecutive run."""
    times = []
    for s in seeds:
        start = time.perf_counter()
        await w.run(s)
        times.append(time.perf_counter() - start)
    return times
