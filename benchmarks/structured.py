"""Structured workloads: per-step cost of the default coercion against the engine, and SMC.

For regex, JSON schema, the SQL-like Lark grammar and the OpenSMILES grammar
(`grammars/opensmiles.lark`), on the embedded model:

- `logw_next` of the default coercion (`coerce(llm, f=b"".join)`) and of the engine
  on the constraint as written (`engine=True`; for Lark and JSON also
  `GuidedConstraint.from_lark`/`from_json_schema`, the engine on the text or schema as
  written, which "default / engine" divides by), on the same contexts: the prefixes
  of one text per workload, tokenized by longest match; each context is timed right
  after its parent on a fresh copy (`spawn()`), so no row or state of it is cached;
  medians. A copy shares the compiled grammar, and with it the lexer states the
  engine builds lazily, as a run's later steps do; `--schemas --first-pass` also
  times constraints built anew for each pass (a run's first steps);
- AWRS SMC per run with the default coercion (N = 10, ESS 0.5, max_tokens = 32).

Runs unchanged under genlm-control 0.4.1 (then only the SMC column, with 0.4.1's own
coercion), so the two versions are timed on the same model:

    python benchmarks/structured.py --out a.json
    /work/venv-041/bin/python benchmarks/structured.py --model genlm/control/embedded/tiny --out b.json

`--smc-only` leaves out the per-step columns, and `--first-seed` sets the seed of the
first timed SMC run, so that processes of the two versions can be interleaved with a
different seed per round (docs/performance.md has the loop).

Times are CPU time of this process (`time.process_time`), so other jobs on a shared
machine inflate them less than wall time. `--schemas` times each schema of
`benchmarks/schemas/` that the default serves with the JSON grammar written from the
compiled schema (`engine/_write_json.py`): the generic path, the default, and the
engine on the schema as written (`GuidedConstraint` where the grammar is exact,
`CheckedConstraint` where grammars bound the language and tokens are checked).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from awrs_common import SEEDED, VERSION, load_llm, run_many  # noqa: E402
from workloads import JSON_SCHEMA, REGEX, SQL_GRAMMAR  # noqa: E402

from genlm.control import AWRS, BoolCFG, BoolFSA, JsonSchema  # noqa: E402

HERE = Path(__file__).resolve().parent
# name: (prompt, constraint, a text of the language whose prefixes are the timed contexts)
WORKLOADS = {
    "regex": ("Summary:", lambda: BoolFSA.from_regex(REGEX), "The cat sat, then it ran. Then, the end."),
    "JSON": ("Data:", lambda: JsonSchema(JSON_SCHEMA), '{"name": "Ann Lee", "age": 31}'),
    "SQL-like Lark": ("Query:", lambda: BoolCFG.from_lark(SQL_GRAMMAR), "select name, id from users where id < 12"),
    "SMILES Lark": (
        "SMILES:",
        lambda: BoolCFG.from_lark((HERE / "grammars" / "opensmiles.lark").read_text()),
        " CC(=O)Oc1ccc[nH]1C(=O)[O-]",
    ),
}


def tokenize(llm, text: str) -> list:
    """`text` as the model's tokens by longest match."""
    by_bytes = {bytes(t): t for t in llm.vocab}
    longest = max(map(len, by_bytes))
    data, out, i = text.encode(), [], 0
    while i < len(data):
        k = next(k for k in range(min(longest, len(data) - i), 0, -1) if data[i : i + k] in by_bytes)
        out.append(by_bytes[data[i : i + k]])
        i += k
    return out


async def step_ms(coerced, contexts: list, repeats: int, build=None) -> float:
    """Median ms of `logw_next(ctx)` right after `logw_next(ctx[:-1])`, on fresh copies
    (`coerced.spawn()`; with `build`, a constraint built anew by `build()` each pass)."""
    times = []
    for _ in range(repeats):
        p = coerced.spawn() if build is None else build()
        await p.logw_next([])
        for c in contexts:
            await p.logw_next(c[:-1])
            t0 = time.process_time()
            await p.logw_next(c)
            times.append(time.process_time() - t0)
    return 1e3 * statistics.median(times)


async def smc_s(llm, condition, repeats: int, first_seed: int = 1) -> float:
    """Median CPU seconds per AWRS SMC run, seeds `first_seed, ...` (after one warm-up run, seed 0)."""
    sampler = AWRS(llm, condition)
    await run_many(sampler, [0], n_particles=10, ess_threshold=0.5, max_tokens=32)
    times = []
    for seed in range(first_seed, first_seed + repeats):
        t0 = time.process_time()
        await run_many(sampler, [seed], n_particles=10, ess_threshold=0.5, max_tokens=32)
        times.append(time.process_time() - t0)
    return statistics.median(times)


async def measure(model: str | None, repeats: int, only: set | None = None, smc_only: bool = False,
                  first_seed: int = 1) -> dict:
    """name → {"default_ms", "engine_ms", "default_class", "smc_s"} (our version; Lark
    also "written_ms": the engine on the grammar text as written), or name → {"smc_s"}
    (0.4.1)."""
    out = {}
    for name, (prompt, build, text) in WORKLOADS.items():
        if only and name not in only:
            continue
        llm = load_llm(model, prompt)
        row: dict = {}
        default = build().coerce(llm, f=b"".join)
        if SEEDED and not smc_only:
            contexts = [tokenize(llm, text)[:k] for k in range(1, len(tokenize(llm, text)) + 1)]
            engine = build().coerce(llm, f=b"".join, engine=True)
            row["default_class"] = type(default).__name__
            row["default_ms"] = await step_ms(default, contexts, repeats)
            row["engine_ms"] = await step_ms(engine, contexts, repeats)
            from genlm.control import GuidedConstraint

            if isinstance(build(), BoolCFG):  # the engine on the text as written (its own lexer)
                written = GuidedConstraint.from_lark(llm, build().lark_grammar)
                row["written_ms"] = await step_ms(written, contexts, repeats)
            if isinstance(build(), JsonSchema):  # the engine on the schema as written (its JSON)
                written = GuidedConstraint.from_json_schema(llm, build().schema)
                row["written_ms"] = await step_ms(written, contexts, repeats)
        row["smc_s"] = await smc_s(llm, default, repeats, first_seed)
        out[name] = row
        print(name, row, flush=True)
    return out


def document(node, depth: int = 0) -> str:
    """A small valid document of a compiled schema (None where a string has a pattern)."""
    from genlm.control.constraints.json_schema._json_schema import Arr, Lit, Num, Obj, Str

    rank = (Obj, Arr, Str, Num, Lit) if depth < 3 else (Lit, Num, Str, Arr, Obj)
    a = min(node.alts, key=lambda a: rank.index(type(a)))
    if isinstance(a, Lit):
        return a.text.decode()
    if isinstance(a, Num):
        b = a.bounds
        x = b.lo + (0 if b.lo_incl else 1) if b.lo is not None else (b.hi if b.hi is not None else 7)
        return json.dumps(a.values[0] if a.values else (int(x) if a.integer else float(x)), default=str)
    if isinstance(a, Str):
        if a.values is not None:
            return json.dumps(min(a.values))
        if a.pattern is not None:
            from genlm.control.constraints.regex.syntax import parse_regex

            return None if a.pattern.regex is None else json.dumps(shortest(parse_regex(a.pattern.regex)))
        n = max(a.min_len, min(4, a.max_len if a.max_len is not None else 4))
        return json.dumps("ab c"[:n] + "x" * (n - 4))
    if isinstance(a, Arr):
        one = 1 if a.max_items != 0 and depth < 2 else 0
        n = max(a.min_items, one, len(a.fixed) if a.items is None else 0)
        items = [document(a.fixed[i] if i < len(a.fixed) else a.items, depth + 1) for i in range(n)]
        return None if None in items else "[" + ", ".join(items) + "]"
    optional = [k for k in a.props if k not in a.required and a.props[k].alts][: 2 if depth < 2 else 0]
    keys = [k for k in a.props if k in a.required or k in optional]  # declaration order
    keys += sorted(k for k in a.required if k not in a.props)
    vals = [document(a.props.get(k, a.additional), depth + 1) for k in keys]
    return None if None in vals else "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in zip(keys, vals)) + "}"


def shortest(tree) -> str:
    """A shortest string of a `regex.syntax` tree, letters and digits first."""
    kind = tree[0]
    if kind == "set":
        cps = [c for a, b in tree[1] for c in range(a, min(b, a + 200) + 1)]
        nice = [c for c in cps if chr(c).isascii() and chr(c).isalnum()]
        plain = [c for c in cps if 0x20 <= c < 0x7F and chr(c) not in '"\\']
        return chr((nice or plain or cps)[0])
    if kind == "cat":
        return "".join(shortest(x) for x in tree[1])
    if kind == "alt":
        return min((shortest(x) for x in tree[1]), key=len)
    return shortest(tree[3]) * tree[1]


async def schemas(model: str | None, repeats: int, first_pass: bool = False) -> dict:
    """For each benchmark schema whose default now takes the JSON grammar: ms per step of
    the generic path (`engine=False`, the default before), of the default, and of the
    engine on the schema as written, over the prefixes of a small valid document; with
    `first_pass`, also the default and the engine as written on constraints built anew
    for each pass (the engine's lexer states not yet built: a run's first steps)."""
    from genlm.control import GuidedConstraint
    from genlm.control.engine.guided import GuidedCoerced

    out = {}
    llm = load_llm(model, "Data:")
    for path in sorted((HERE / "schemas").glob("*.json")):
        schema = json.loads(path.read_text())
        try:
            c = JsonSchema(schema)
        except ValueError:
            continue
        default = c.coerce(llm, f=b"".join)
        text = document(c.root)
        if not isinstance(default, GuidedCoerced) or default.guided.kind != "lark" or text is None:
            continue  # the whitelist (the engine as written) or the generic path
        if c.state(list(text.encode())) is None or not c.transitions.accepts(c.state(list(text.encode()))):
            continue  # not a document of the schema
        tokens = tokenize(llm, text)
        contexts = [tokens[:k] for k in range(1, len(tokens) + 1)]
        row = {"how": type(default.guided).__name__,
               "generic_ms": await step_ms(c.coerce(llm, f=b"".join, engine=False), contexts, repeats),
               "default_ms": await step_ms(default, contexts, repeats)}
        if row["how"] != "GuidedConstraint":  # the superset grammar alone, without the checks
            sup = GuidedConstraint(llm, "lark", default.guided.checked.sup)
            row["grammar_ms"] = await step_ms(sup, contexts, repeats)
        try:  # the engine's own JSON may refuse the document (it reads some keywords otherwise)
            row["written_ms"] = await step_ms(GuidedConstraint.from_json_schema(llm, schema), contexts, repeats)
        except ValueError:
            row["written_ms"] = None
        if first_pass:
            row["default_first_ms"] = await step_ms(
                None, contexts, repeats, build=lambda s=schema: JsonSchema(s).coerce(llm, f=b"".join))
            if row["written_ms"] is not None:
                row["written_first_ms"] = await step_ms(
                    None, contexts, repeats, build=lambda s=schema: GuidedConstraint.from_json_schema(llm, s))
        out[path.stem] = row
        print(path.stem, row, flush=True)
    return out


def table(ours: dict, ref: dict | None) -> str:
    """The markdown table of `measure`'s results (ref: 0.4.1's, for the last columns)."""
    lines = [
        "| workload | default coercion | default ms/step | engine=True ms/step | "
        "engine on the text as written | default / engine | "
        "SMC s/run | 0.4.1 SMC s/run | speed-up vs 0.4.1 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in ours.items():
        old = (ref or {}).get(name, {}).get("smc_s")
        engine = r.get("written_ms", r["engine_ms"])
        written = f"{r['written_ms']:.3f}" if "written_ms" in r else "—"
        lines.append(
            f"| {name} | {r['default_class']} | {r['default_ms']:.3f} | {r['engine_ms']:.3f} | "
            f"{written} | {r['default_ms'] / engine:.2f}× | {r['smc_s']:.3f} | "
            + (f"{old:.3f} | **{old / r['smc_s']:.1f}×** |" if old else "— | — |")
        )
    return "\n".join(lines)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="HF directory (default: the embedded model)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ref", default=None, help="this script's --out JSON from genlm-control 0.4.1")
    ap.add_argument("--only", default="", help=f"comma-separated subset of {','.join(WORKLOADS)}")
    ap.add_argument("--out", default=None)
    ap.add_argument("--smc-only", action="store_true", help="only the SMC column (no per-step timing)")
    ap.add_argument("--first-seed", type=int, default=1, help="seed of the first timed SMC run")
    ap.add_argument("--schemas", action="store_true",
                    help="per-step ms of each benchmarks/schemas/ schema the JSON grammar serves")
    ap.add_argument("--first-pass", action="store_true",
                    help="with --schemas: also time constraints built anew for each pass")
    args = ap.parse_args()
    if args.schemas:
        rows = await schemas(args.model, args.repeats, args.first_pass)
        if args.out:
            Path(args.out).write_text(json.dumps({"version": VERSION, "schemas": rows}, indent=1))
        first = " first pass: default / engine ms/step | first pass ratio |" if args.first_pass else ""
        print("| schema | default serves it with | generic ms/step | default ms/step | "
              "engine as written ms/step | default / engine | sup grammar alone ms/step |" + first + "\n"
              "|---|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if args.first_pass else ""))
        for k, r in rows.items():
            how = "grammar" if r["how"] == "GuidedConstraint" else "grammar + checks"
            w, g = r["written_ms"], r.get("grammar_ms")
            line = (f"| `{k}` | {how} | {r['generic_ms']:.2f} | {r['default_ms']:.3f} | "
                    + (f"{w:.3f} | {r['default_ms'] / w:.2f}× |" if w else "refuses the document | — |")
                    + (f" {g:.3f} |" if g else " — |"))
            if args.first_pass:
                d1, w1 = r["default_first_ms"], r.get("written_first_ms")
                line += f" {d1:.3f} / {w1:.3f} | {d1 / w1:.2f}× |" if w1 else f" {d1:.3f} / — | — |"
            print(line)
        return
    only = set(filter(None, args.only.split(","))) or None
    result = {"version": VERSION, "rows": await measure(args.model, args.repeats, only, args.smc_only, args.first_seed)}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    if SEEDED and not args.smc_only:
        ref = json.loads(Path(args.ref).read_text())["rows"] if args.ref else None
        print(table(result["rows"], ref))


if __name__ == "__main__":
    asyncio.run(main())
