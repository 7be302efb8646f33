"""Coverage of real-world JSON schemas: how many `JsonSchema` builds, beside llguidance.

Reads JSONSchemaBench (https://github.com/guidance-ai/jsonschemabench): a checkout,
or a bare git directory of it, whose `data/<subset>/*.json` are the schemas. Draws a
seeded sample of `--per-subset` schemas from each of the 10 subsets and, for each
schema, records whether `JsonSchema(schema)` builds (and whether its prefix check is
exact, or reads some keywords as a superset), and whether llguidance compiles it
(`LLMatcher.validate_grammar(LLMatcher.grammar_from_json_schema(schema))` returns no
error, with llguidance's default options). Prints one row per subset and the most
common reasons for a refusal.

    python benchmarks/json_coverage.py /path/to/jsonschemabench [--per-subset 60] [--seed 0]
        [--walks 2]

Each build runs in a worker process with a time limit (`--timeout`, seconds), so a
schema that takes too long counts as refused.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor, TimeoutError
from pathlib import Path

SUBSETS = ("Github_trivial", "Github_easy", "Github_medium", "Github_hard", "Github_ultra",
           "Glaiveai2K", "JsonSchemaStore", "Kubernetes", "Snowplow", "WashingtonPost")


class Snapshot:
    """The schema files of a checkout or of a bare git directory."""

    def __init__(self, path: Path):
        self.path = path
        self.bare = not (path / "data").is_dir()

    def _git(self, *args: str) -> str:
        return subprocess.run(["git", "--git-dir", str(self.path), *args], check=True,
                              capture_output=True, text=True).stdout

    def files(self, subset: str) -> list[str]:
        if self.bare:
            out = self._git("ls-tree", "--name-only", "HEAD", f"data/{subset}/")
            return sorted(n for n in out.splitlines() if n.endswith(".json"))
        return sorted(str(p.relative_to(self.path)) for p in (self.path / "data" / subset).glob("*.json"))

    def read(self, name: str) -> str:
        if self.bare:
            return self._git("show", f"HEAD:{name}")
        return (self.path / name).read_text(encoding="utf-8")


def sample(snapshot: Snapshot, per_subset: int, seed: int) -> list[tuple[str, str]]:
    """`(subset, file)` pairs: `per_subset` files of each subset, drawn with `seed`."""
    rng = random.Random(seed)
    out = []
    for subset in SUBSETS:
        names = snapshot.files(subset)
        out += [(subset, n) for n in rng.sample(names, min(per_subset, len(names)))]
    return out


def _schema_of(text: str):
    data = json.loads(text)
    return data["schema"] if isinstance(data, dict) and "schema" in data and "tests" in data else data


def build(text: str, walks: int = 0) -> tuple[str, str, int, int]:
    """`("exact" | "superset" | "refused", detail, documents, valid)` for `JsonSchema`:
    with `walks`, that many random byte walks through the potential (up to 400 bytes,
    stopping at the first complete document), and how many of the documents they
    end in `jsonschema` finds valid (the `jsonschema` check of `_json_residual`)."""
    import asyncio

    from genlm.control import JsonSchema

    schema = _schema_of(text)
    try:
        p = JsonSchema(schema)
    except (ValueError, TypeError) as e:
        return "refused", f"{type(e).__name__}: {e}", 0, 0
    docs, valid = asyncio.run(_walks(p, schema, walks)) if walks else (0, 0)
    if p.superset_keywords:
        return "superset", ",".join(sorted(p.superset_keywords)), docs, valid
    return "exact", "", docs, valid


async def _walks(p, schema, walks: int) -> tuple[int, int]:
    import numpy as np

    from genlm.control.constraints.json_schema._json_residual import DocumentCheck

    check, rng, docs, valid = DocumentCheck(schema), random.Random(0), 0, 0
    for _ in range(walks):
        ctx: list[int] = []
        for _ in range(400):
            row = (await p.logw_next(ctx)).weights
            if row[-1] == 0.0:
                docs += 1
                valid += check(bytes(ctx))
                break
            allowed = np.flatnonzero(row[:-1] == 0.0).tolist()
            if not allowed:
                break
            closers = [b for b in allowed if b in b'"}]0']
            ctx.append(rng.choice(closers) if closers and rng.random() < 0.5 else rng.choice(allowed))
    return docs, valid


def engine(text: str) -> tuple[bool, str]:
    """Whether llguidance compiles the schema (and its error)."""
    import llguidance

    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(_schema_of(text))
        error = llguidance.LLMatcher.validate_grammar(grammar)
    except Exception as e:  # the engine's own errors, as it reports them
        return False, f"{type(e).__name__}: {e}"
    return not error, error


def _reason(detail: str) -> str:
    """A short class of a refusal, for the summary."""
    for key in ("keyword '", "$ref ", "pattern ", "invalid JSON schema", "$id ", "id ",
                "more than", "draft 3", "accepts no document", "nested"):
        if key in detail:
            i = detail.index(key)
            return detail[i:i + 60]
    return detail[:60]


def measure(snapshot: Snapshot, picks: list[tuple[str, str]], timeout: float,
            walks: int = 0) -> list[dict]:
    rows = []
    with ProcessPoolExecutor(max_workers=1) as pool:
        for subset, name in picks:
            text = snapshot.read(name)
            future = pool.submit(build, text, walks)
            try:
                status, detail, docs, valid = future.result(timeout=timeout)
            except TimeoutError:
                status, detail, docs, valid = "refused", f"timeout after {timeout} s", 0, 0
                for proc in pool._processes.values():  # the worker is stuck: end it
                    proc.kill()
                pool.shutdown(wait=False)
                pool = ProcessPoolExecutor(max_workers=1)
            ok, error = engine(text)
            rows.append({"subset": subset, "file": name, "ours": status, "detail": detail,
                         "engine": ok, "engine_error": error, "docs": docs, "valid": valid})
    return rows


def report(rows: list[dict]) -> str:
    lines = ["| subset | n | JsonSchema builds | of them exact prefix | llguidance compiles "
             "| llguidance-compiled that JsonSchema refuses |", "|---|---|---|---|---|---|"]
    groups = collections.defaultdict(list)
    for r in rows:
        groups[r["subset"]].append(r)
    for subset in [*SUBSETS, "all"]:
        rs = rows if subset == "all" else groups[subset]
        n = len(rs)
        built = sum(r["ours"] != "refused" for r in rs)
        exact = sum(r["ours"] == "exact" for r in rs)
        eng = sum(r["engine"] for r in rs)
        missed = sum(r["engine"] and r["ours"] == "refused" for r in rs)
        lines.append(f"| {subset} | {n} | {built} ({100 * built / n:.0f}%) | {exact} | "
                     f"{eng} ({100 * eng / n:.0f}%) | {missed} |")
    refusals = collections.Counter(_reason(r["detail"]) for r in rows if r["ours"] == "refused")
    supersets = collections.Counter(k for r in rows if r["ours"] == "superset"
                                    for k in r["detail"].split(","))
    docs, valid = sum(r["docs"] for r in rows), sum(r["valid"] for r in rows)
    lines += ["", f"random walks: {docs} complete documents, {valid} valid under jsonschema",
              "", "refusals: " + "; ".join(f"{k} ×{v}" for k, v in refusals.most_common(12)),
              "read as a superset: " + ", ".join(f"{k} ×{v}" for k, v in supersets.most_common())]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("snapshot", type=Path, help="JSONSchemaBench checkout or bare git directory")
    parser.add_argument("--per-subset", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--walks", type=int, default=0,
                        help="random byte walks per schema, their documents checked by jsonschema")
    parser.add_argument("--json", type=Path, help="write every row here")
    args = parser.parse_args(argv)
    snapshot = Snapshot(args.snapshot)
    rows = measure(snapshot, sample(snapshot, args.per_subset, args.seed), args.timeout, args.walks)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(report(rows))


if __name__ == "__main__":
    sys.exit(main())
