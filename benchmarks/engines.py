"""Compiled constraint engines: token-mask speed, potentials, SMC and JSON-schema coverage.

Sections (all on CPU; the embedded model unless said otherwise):

- `masks`: llguidance and xgrammar (when installed) compute full token masks for the
  same regex, grammar and JSON schema over the embedded model's 4k tokenizer and a
  32k byte-level BPE tokenizer trained here on the Python standard library's source
  (no download). Reports compile time and µs per mask along a fixed text.
- `logw_next`: `GuidedConstraint` against the coerced potentials on the same contexts:
  the generic trie walk (`Potential.coerce`), and the coerce path without the engine
  (`engine=False`: `CoercedDFA`, Earley, `CoercedJson`).
- `smc`: SMC with N particles and the same `max_tokens`: unconstrained
  `direct_token_sampler(llm)` against AWRS with each constraint; medians of repeats.
- `coverage`: each schema in benchmarks/schemas/*.json: does `JsonSchema` accept it,
  does the engine compile it, and are all SMC samples valid (jsonschema)?

Run:  python benchmarks/engines.py [--sections masks logw_next smc coverage]
      [--repeats 3] [--particles 10] [--max-tokens 24]
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import statistics
import tempfile
import time

import numpy as np
from _steps import counted_steps
from constraint_logw_next import LARK, REGEX  # the same constraints, measured on both paths

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = os.path.dirname(os.path.abspath(__file__))
EBNF = r"""
root ::= expr
expr ::= term (ws ("+" | "-") ws term)*
term ::= factor (ws ("*" | "/") ws factor)*
factor ::= [0-9]+ | "(" ws expr ws ")"
ws ::= " "*
"""
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
}
COMPACT = {"whitespace_flexible": False}
TEXTS = {
    "regex": "The cat sat on the mat, quietly. It was warm.",
    "lark": "(12 + 3) * 45 - 6 / (7 + 8)",
    "json": '{"name": "Ada Lovelace", "age": 36}',
}


def timed(fn, n: int) -> float:
    """Median µs of `fn()` over `n` calls (after one warm call)."""
    fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out) * 1e6


# Tokenizers ----------------------------------------------------------------------


def embedded_hf():
    from transformers import AutoTokenizer

    from genlm.control.embedded import model_path

    return AutoTokenizer.from_pretrained(model_path())


def bpe_32k(cache=os.path.join(tempfile.gettempdir(), "genlm-engines-bpe32k")):
    """A 32768-token byte-level BPE trained on the standard library's .py files."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    path = os.path.join(cache, "tokenizer.json")
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        lib = os.path.dirname(os.__file__)
        files = [
            f
            for f in sorted(glob.glob(os.path.join(lib, "**", "*.py"), recursive=True))
            if _utf8(f)
        ]
        bpe = ByteLevelBPETokenizer()
        bpe.train(files, vocab_size=32768, special_tokens=["<|endoftext|>"], show_progress=False)
        bpe.save(path)
    return PreTrainedTokenizerFast(tokenizer_file=path, eos_token="<|endoftext|>")


def _utf8(path: str) -> bool:
    try:
        open(path, encoding="utf-8").read()
        return True
    except (UnicodeDecodeError, OSError):
        return False


# Section: masks --------------------------------------------------------------------


def walk_masks(new_matcher, fill, consume, ids, n: int) -> float:
    """Median µs of the first mask at each position of `ids`, over `n` fresh walks
    (an engine may cache a state's mask, so each state is timed once per walk)."""
    per = []
    for _ in range(n):
        m = new_matcher()
        for i in ids:
            t = time.perf_counter()
            fill(m)
            per.append(time.perf_counter() - t)
            assert consume(m, i), i
    return statistics.median(per) * 1e6


def llguidance_masks(hf, n: int) -> dict:
    import llguidance
    import llguidance.hf
    import llguidance.numpy as lln

    tok = llguidance.hf.from_tokenizer(hf)
    grammars = {
        "regex": llguidance.LLMatcher.grammar_from_regex(REGEX),
        "lark": llguidance.LLMatcher.grammar_from_lark(LARK),
        "json": llguidance.LLMatcher.grammar_from_json_schema(json.dumps(SCHEMA)),
    }
    bm = lln.allocate_token_bitmask(1, tok.vocab_size)
    out = {}
    for kind, g in grammars.items():
        t = time.perf_counter()
        llguidance.LLMatcher(tok, g, log_level=0)
        compile_ms = (time.perf_counter() - t) * 1e3
        us = walk_masks(
            lambda g=g: llguidance.LLMatcher(tok, g, log_level=0),
            lambda m: lln.fill_next_token_bitmask(m, bm),
            lambda m, i: m.consume_token(i),
            hf.encode(TEXTS[kind], add_special_tokens=False),
            n,
        )
        out[kind] = (compile_ms, us)
    return out


def xgrammar_masks(hf, n: int) -> dict | None:
    try:
        import xgrammar as xgr
    except ImportError:
        return None
    info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=len(hf))
    comp = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    builders = {
        "regex": lambda: comp.compile_regex(REGEX),
        "lark": lambda: comp.compile_grammar(EBNF),
        "json": lambda: comp.compile_json_schema(json.dumps(SCHEMA)),
    }
    bm = xgr.allocate_token_bitmask(1, info.vocab_size)
    out = {}
    for kind, build in builders.items():
        t = time.perf_counter()
        compiled = build()
        compile_ms = (time.perf_counter() - t) * 1e3
        us = walk_masks(
            lambda c=compiled: xgr.GrammarMatcher(c),
            lambda m: m.fill_next_token_bitmask(bm),
            lambda m, i: m.accept_token(i),
            hf.encode(TEXTS[kind], add_special_tokens=False),
            n,
        )
        out[kind] = (compile_ms, us)
    return out


def section_masks(args) -> None:
    print("\n## Token masks (compile ms / median µs per mask along the text)")
    print("| tokenizer | engine | regex | grammar | JSON schema |\n|---|---|---|---|---|")
    for name, hf in [("embedded 4k", embedded_hf()), ("BPE 32k", bpe_32k())]:
        for engine, fn in [("llguidance", llguidance_masks), ("xgrammar", xgrammar_masks)]:
            res = fn(hf, args.mask_calls)
            if res is None:
                print(f"| {name} ({len(hf)}) | {engine} | not installed | | |")
                continue
            cells = " | ".join(f"{res[k][0]:.1f} ms / {res[k][1]:.1f} µs" for k in TEXTS)
            print(f"| {name} ({len(hf)}) | {engine} | {cells} |")


# Section: logw_next ------------------------------------------------------------------


async def section_logw_next(args, llm) -> None:
    from genlm.control import BoolCFG, BoolFSA, JsonSchema
    from genlm.control.potential.base import Potential

    print("\n## logw_next on the same context (median ms; ratio to the engine)")
    print(
        "| constraint | engine (µs) | coerce engine=False (ms) | generic trie walk (ms) | speed-up vs generic |"
    )
    print("|---|---|---|---|---|")
    cases = {
        "regex": BoolFSA.from_regex(REGEX),
        "lark": BoolCFG.from_lark(LARK),
        "json": JsonSchema(SCHEMA),
    }
    for kind, p in cases.items():
        ctx = llm.tokenize(TEXTS[kind])[: len(llm.tokenize(TEXTS[kind])) // 2]
        fast = p.coerce(llm, f=b"".join, engine=True)
        plain = p.coerce(llm, f=b"".join, engine=False)
        generic = Potential.coerce(p, llm, f=b"".join)
        a = await median_call(fast, ctx, args.repeats * 10, fresh=True)
        b = await median_call(plain, ctx, args.repeats, fresh=True)
        c = await median_call(generic, ctx, args.repeats, fresh=True)
        print(f"| {kind} | {a * 1e6:.0f} | {b * 1e3:.2f} | {c * 1e3:.1f} | {c / a:.0f}× |")


async def median_call(pot, ctx, n: int, fresh: bool) -> float:
    """Median s of `logw_next(ctx)` right after `logw_next(ctx[:-1])` (as in SMC);
    `fresh` starts each call from a spawned copy (no per-state row cached)."""
    out = []
    for _ in range(n):
        p = pot.spawn() if fresh else pot
        await p.logw_next(ctx[:-1])
        t = time.perf_counter()
        await p.logw_next(ctx)
        out.append(time.perf_counter() - t)
    return statistics.median(out)


# Section: smc -------------------------------------------------------------------------


async def run_smc(sampler, args) -> tuple[float, int]:
    """Seconds of one run and its number of steps (those it ran, see `_steps`)."""
    with counted_steps() as steps:
        t = time.perf_counter()
        await sampler.smc(n_particles=args.particles, ess_threshold=0.5, max_tokens=args.max_tokens)
        wall = time.perf_counter() - t
    return wall, steps.most


async def section_smc(args, llm) -> None:
    from genlm.control import AWRS, direct_token_sampler

    print(
        f"\n## SMC, N={args.particles}, max_tokens={args.max_tokens} (median s of {args.repeats})"
    )
    print("| run | median s | ratio | steps | ms per step | ratio per step |")
    print("|---|---|---|---|---|---|")
    prompts = {"regex": "A sentence:", "lark": "Arithmetic:", "json": "A person as JSON:"}
    grammars = {"regex": {"regex": REGEX}, "lark": {"lark": LARK}, "json": {"json_schema": SCHEMA}}
    base_llm = llm.spawn(prompt_ids=llm.model.tokenizer.encode("Text:"))
    runs = {"unconstrained": direct_token_sampler(base_llm)}
    for kind, kw in grammars.items():
        lm = llm.spawn(prompt_ids=llm.model.tokenizer.encode(prompts[kind]))
        runs[f"{kind} (AWRS)"] = AWRS(lm, lm.constrain(**kw))
    times: dict = {k: [] for k in runs}
    for _ in range(args.repeats):  # interleaved, so load on the machine hits all alike
        for k, s in runs.items():
            times[k].append(await run_smc(s, args))
    base = statistics.median(t for t, _ in times["unconstrained"])
    base_step = statistics.median(t / n for t, n in times["unconstrained"])
    for k, ts in times.items():
        med = statistics.median(t for t, _ in ts)
        step = statistics.median(t / n for t, n in ts)
        steps = statistics.median(n for _, n in ts)
        print(
            f"| {k} | {med:.3f} | {med / base:.2f} | {steps:.0f} | {step * 1e3:.0f} | "
            f"{step / base_step:.2f} |"
        )


# Section: coverage ----------------------------------------------------------------------


async def section_coverage(args, llm) -> None:
    import jsonschema

    from genlm.control import AWRS, JsonSchema

    files = sorted(glob.glob(os.path.join(HERE, "schemas", "*.json")))
    print(
        f"\n## JSON-schema coverage ({len(files)} schemas; SMC N={args.json_particles}, "
        f"max_tokens={args.json_max_tokens})"
    )
    print("| schema | JsonSchema | engine | finished | valid |\n|---|---|---|---|---|")
    totals = dict(ours=0, engine=0, runs=0, finished=0, valid=0, with_docs=0, all_valid=0)
    lm = llm.spawn(prompt_ids=llm.model.tokenizer.encode("JSON:"))
    for path in files:
        schema = json.load(open(path))
        name = os.path.basename(path)[:-5]
        ours = _compiles(JsonSchema, schema)
        try:
            lm.constrain(json_schema=schema)
            eng = "yes"
            # SMC on compact JSON: the tiny model otherwise emits whitespace forever.
            c = lm.constrain(json_schema={**schema, "x-guidance": COMPACT})
        except ValueError as e:
            c, eng = None, "no: " + str(e).splitlines()[0][45:100]
        totals["ours"] += ours == "yes"
        if c is None:
            print(f"| {name} | {ours} | {eng} | | |")
            continue
        totals["engine"] += 1
        seqs = await AWRS(lm, c).smc(args.json_particles, 0.5, args.json_max_tokens)
        fin, val = 0, 0
        for ctx, w in zip(seqs.contexts, seqs.log_weights):
            text = b"".join(bytes(t) for t in ctx[:-1])
            if w == float("-inf") or await c.complete(ctx[:-1]) != 0.0:
                continue  # stopped by max_tokens before the document closed
            fin += 1
            try:
                jsonschema.validate(json.loads(text), schema)
                val += 1
            except (ValueError, jsonschema.ValidationError):
                print(f"  INVALID {name}: {text!r}")
        totals["runs"] += 1
        totals["finished"] += fin
        totals["valid"] += val
        totals["with_docs"] += fin > 0
        totals["all_valid"] += 0 < fin == val
        print(f"| {name} | {ours} | {eng} | {fin}/{args.json_particles} | {val}/{fin} |")
    print(
        f"\nJsonSchema accepts {totals['ours']}/{len(files)}; the engine compiles "
        f"{totals['engine']}/{len(files)}; {totals['with_docs']}/{totals['runs']} runs finished "
        f"a document, {totals['all_valid']} of them only valid ones "
        f"({totals['valid']}/{totals['finished']} finished documents valid)"
    )


def _compiles(build, arg) -> str:
    try:
        build(arg)
        return "yes"
    except ValueError as e:
        return "no: " + str(e)[:50]


async def main(args) -> None:
    from genlm.control import PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    if "masks" in args.sections:
        section_masks(args)
    llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
    if "logw_next" in args.sections:
        await section_logw_next(args, llm)
    if "smc" in args.sections:
        await section_smc(args, llm)
    if "coverage" in args.sections:
        await section_coverage(args, llm)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sections", nargs="+", default=["masks", "logw_next", "smc", "coverage"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--particles", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--json-max-tokens", type=int, default=150)
    ap.add_argument("--json-particles", type=int, default=5)
    ap.add_argument("--mask-calls", type=int, default=5)
    np.seterr(all="ignore")
    asyncio.run(main(ap.parse_args()))
