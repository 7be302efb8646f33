"""Hostile regexes and Lark grammars: every constructor and coercion ends fast or with
a clear error.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python benchmarks/hostile_constraints.py

For each input: the constructor (`BoolFSA.from_regex`, `BoolCFG.from_lark`,
`JsonSchema`), then `.coerce(llm, f=b"".join)` (default: the engine where exact) and
`.coerce(llm, f=b"".join, engine=False)`, each timed, with the error type and the
start of its message. Each step has a 60 s alarm, reported as a hang.
Prints a Markdown table.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from genlm.control import BoolCFG, BoolFSA, JsonSchema, PromptedLLM  # noqa: E402
from genlm.control.embedded import EMBEDDED_MODEL  # noqa: E402

KW2000 = "start: " + " | ".join(f'"kw{i}"' for i in range(2000))
REGEXES = [
    "a{4000}",
    "a{100000}",
    "x" * 20000,
    ".{2000}",
    "(a|b|c|d|e)*a(a|b|c|d|e){12}",
    "(a|b|c|d|e)*a(a|b|c|d|e){20}",
    "(?:" * 2000 + "a" + ")" * 2000,
    "(" * 5000,
    "a{99999999999}",
    "a{4294967294}",
    "(a{1000}){1000}",
    "((a{100}){100}){100}",
    "|".join(f"word{i}" for i in range(5000)),
    r"[\u0100-\U0010ffff]{500}",
    r"\d{1000}",
    r"\u00e9",
    r"\N{LATIN SMALL LETTER E WITH ACUTE}",
    r"\0",
    r"(?u)\w",
    r"\x{1F600}",
    "a*+",
    "(?>a)b",
    "a(?=b)",
    "(?<!a)b",
    r"(a)\1",
    "^a$",
    r"a\Z",
    r"[^\x00-\U0010ffff]",
    "(?i)[a-z]{3}",
]
GRAMMARS = [
    KW2000,
    'start: a\na: a "x"',
    "%import nosuch.WORD\nstart: WORD",
    "%import .mygrammar.WORD\nstart: WORD",
    "%import common.WORD\nstart: WORD",
    "start: " + "(" * 3000 + '"a"' + ")" * 3000,
    "start: X\nX: /.{2000}/",
    "start: "
    + " ".join(f"X{i}" for i in range(50))
    + "\n"
    + "\n".join(f"X{i}: /.{{1000}}/" for i in range(50)),
    "start: WORD WORD\nWORD: /[a-z]+/",
    "start: X\nX: /(a|b|c|d|e)*a(a|b|c|d|e){20}/",
]
SCHEMAS = [
    {"type": "string", "pattern": "^a{5000}$"},
    {"type": "string", "pattern": "a{100000}"},
    {"type": "string", "pattern": "(" * 5000},
]


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang


def timed(fn):
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(60)
    t = time.perf_counter()
    try:
        out = fn()
        return out, f"{time.perf_counter() - t:.3f} s ok"
    except Hang:
        return None, "HANG (> 60 s)"
    except Exception as e:  # noqa: BLE001 - the point is to show which error
        msg = str(e).replace("|", "\\|").replace("\n", " ")[:70]
        return None, f"{time.perf_counter() - t:.3f} s {type(e).__name__}: {msg}"
    finally:
        signal.alarm(0)


def show(x: str) -> str:
    text = repr(x) if isinstance(x, str) else repr(x)
    text = text.replace("|", "\\|").replace("\n", "\\n")
    return f"`{text[:40]}{'…' if len(text) > 40 else ''}` ({len(x) if isinstance(x, str) else ''})"


def row(label: str, build) -> str:
    potential, built = timed(build)
    cells = [built]
    for kwargs in ({}, {"engine": False}):
        if potential is None:
            cells.append("—")
            continue
        c, took = timed(lambda kw=kwargs: potential.coerce(LLM, f=b"".join, **kw))
        kind = (
            ""
            if c is None
            else f" ({'engine' if 'Guided' in type(c).__name__ else type(c).__name__})"
        )
        cells.append(took + kind)
    return f"| {label} | " + " | ".join(cells) + " |"


if __name__ == "__main__":
    LLM = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
    print("| input | constructor | coerce (default) | coerce engine=False |")
    print("|---|---|---|---|")
    for p in REGEXES:
        print(row(f"regex {show(p)}", lambda p=p: BoolFSA.from_regex(p)), flush=True)
    for g in GRAMMARS:
        print(row(f"lark {show(g)}", lambda g=g: BoolCFG.from_lark(g)), flush=True)
    for s in SCHEMAS:
        print(row(f"json {show(s['pattern'])}", lambda s=s: JsonSchema(s)), flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak RSS {rss:.0f} MiB", file=sys.stderr)
