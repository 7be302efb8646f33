"""Bounds and item counts beyond 2**53 on the compiled engine (issue 34, findings 1-2).

llguidance reads `minimum`, `maximum`, `exclusive*`, `minItems` and `maxItems` as
64-bit floats (then as 64-bit integers): `2**53 + 1` is read as `2**53`, bounds past
`2**63` are clamped, and a lower bound below `-2**63` crashes the interpreter. The
whitelist (`_json_exact.EXACT_MAGNITUDE`) keeps such schemas off the engine as written;
our grammar writer serves them (integer ranges digit by digit) or the generic path
does. Pinned here: the engine's own misreading (a witness, in a subprocess, since it
may crash), the whitelist rule on every numeric keyword, and the default coercion's
next-token rows against `engine=False` on enumerated contexts around the bounds (the
schemas that crashed run in a subprocess)."""

import asyncio
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("llguidance")

from genlm.control import JsonSchema  # noqa: E402
from genlm.control.engine._json_exact import EXACT_MAGNITUDE, engine_difference  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
B53, B63, B64 = 2**53, 2**63, 2**64


def in_subprocess(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600
    )


def test_the_engine_itself_misreads_bounds_past_2_to_53():
    """The witness: on the schema as written, the engine accepts `2**53` under
    `[2**53 + 1, 2**53 + 3]` and refuses `2**60 + 1` under `[1, 2**60 + 1]` (bounds
    read as floats). (Past the 64-bit integers `grammar_text` now refuses the schema.)"""
    code = (
        "from toys.json_engine import EngineBytes\n"
        f"a = EngineBytes({{'type': 'integer', 'minimum': {B53 + 1}, 'maximum': {B53 + 3}}})\n"
        f"b = EngineBytes({{'type': 'integer', 'minimum': 1, 'maximum': {2**60 + 1}}})\n"
        f"print(a.complete(b'{B53}'), b.complete(b'{2**60 + 1}'), b.complete(b'{2**60}'))\n"
    )
    run = in_subprocess(code)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["True", "False", "True"]


NUMERIC_VALUES = [
    B53,
    B53 + 1,
    float(B53),
    2.0**53 + 2,
    B53 - 1,
    B63 - 1,
    B63,
    B64,
    B64 + 1,
    10**308,
    1e308,
    10**30,
    1e30,
    0.5,
    7,
]
NUMERIC_VALUES += [-v for v in NUMERIC_VALUES]


@pytest.mark.parametrize("value", NUMERIC_VALUES, ids=repr)
@pytest.mark.parametrize("key", ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"])
@pytest.mark.parametrize("kind", ["integer", ["integer", "null"]])
def test_integer_bounds_on_the_whitelist_only_below_2_to_53(kind, key, value):
    why = engine_difference({"type": kind, key: value})
    assert (why is not None and why.code == "magnitude") == (abs(value) >= EXACT_MAGNITUDE)
    nested = engine_difference({"type": "array", "items": {"type": kind, key: value}})
    assert (nested is not None and nested.code == "magnitude") == (abs(value) >= EXACT_MAGNITUDE)


@pytest.mark.parametrize("value", [v for v in NUMERIC_VALUES if v >= 0 and v == int(v)], ids=repr)
@pytest.mark.parametrize("key", ["minItems", "maxItems"])
def test_item_counts_on_the_whitelist_only_below_2_to_53(key, value):
    why = engine_difference({"type": "array", "items": {"type": "null"}, key: value})
    assert (why is not None and why.code == "magnitude") == (value >= EXACT_MAGNITUDE)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "number", "minimum": B53 + 1},
        {"const": B53 + 1},
        {"enum": [B63, -B64, 1e308]},
        {"type": "integer", "multipleOf": B53 + 1},
        {"type": "string", "minLength": B64},
        {"type": "string", "maxLength": B53 + 1},
        {"type": "integer", "minimum": 1, "maximum": 2, "multipleOf": 1e308},
    ],
    ids=lambda s: json.dumps(s)[:40],
)
def test_other_numeric_keywords_are_off_the_whitelist(schema):
    assert engine_difference(schema) is not None


# The default coercion's rows against engine=False ---------------------------------

# Integer ranges that crashed the interpreter, or gave a wrong language, as written.
CRASHED = [
    {"type": "integer", "minimum": -(2**66), "maximum": -(2**65)},
    {"type": "integer", "minimum": -(10**25), "maximum": -(10**24)},
    {"type": "integer", "maximum": -B63 - 1},
]
WRONG = [
    {"type": "integer", "minimum": 1, "maximum": 10**30},
    {"type": "integer", "minimum": B53 + 1, "maximum": B53 + 3},
    {"type": "integer", "minimum": B63, "maximum": B64},
    {"type": "integer", "exclusiveMinimum": B53, "exclusiveMaximum": B64 + 2},
    {"type": "integer", "minimum": 1, "maximum": 1e30},
    {"type": "integer", "minimum": 1e300},
    {"type": "integer", "minimum": -(10**308), "maximum": -B53 - 1},
    {
        "type": "array",
        "items": {"type": "integer", "minimum": B53 - 1, "maximum": B53 + 1},
        "maxItems": 2,
    },
    {"type": "array", "items": {"type": "integer"}, "maxItems": B64},
    {"type": "array", "items": {"type": "null"}, "minItems": B53 + 1},
    {"type": "number", "minimum": B53 + 1, "maximum": B53 + 3},
    {"type": ["integer", "null"], "minimum": B63 + 5},
    {"type": "integer", "exclusiveMinimum": B53},  # the engine derives 2**53 + 1, a float no more
    {"type": "integer", "exclusiveMaximum": -B53},
    {"type": "integer", "minimum": B53},
]
AROUND = [B53, B63, B64, 10**19, 10**20, 10**24, 10**25, 10**30, 2**65, 2**66, 10**300]


def spellings(schema: dict) -> list[bytes]:
    """Integers at and around every bound in `schema` and the fixed-width limits, as
    numbers and in arrays."""
    inner = schema.get("items", schema)
    edges = [
        int(inner[k])
        for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
        if k in inner
    ]
    values = {v + d for v in edges + AROUND for d in (-2, -1, 0, 1, 2)}
    values |= {-v for v in values}
    numbers = sorted(str(v).encode() for v in values)
    return numbers + [b"[" + n + b"]" for n in numbers[::5]] + [b"[1,2]", b"[null,null]", b"null"]


def compare_rows(schema: dict, seed: int = 0) -> None:
    """Asserts the default coercion's next-token support and `complete` equal
    `engine=False`'s at every token prefix of `spellings(schema)` (each spelled by
    random tokens of the embedded model)."""
    from genlm.control import PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend="mock")
    fast = JsonSchema(schema).coerce(llm, f=b"".join)
    slow = JsonSchema(schema).coerce(llm, f=b"".join, engine=False)
    by_bytes = {bytes(t): t for t in llm.vocab}
    rng = random.Random(seed)

    def tokenize(data: bytes) -> list:
        out, i = [], 0
        while i < len(data):
            fits = [k for k in range(min(12, len(data) - i), 0, -1) if data[i : i + k] in by_bytes]
            k = rng.choice(fits[:3])
            out.append(by_bytes[data[i : i + k]])
            i += k
        return out

    async def check():
        seen = set()
        for doc in spellings(schema):
            ctx = tokenize(doc)
            for i in range(len(ctx) + 1):
                key = tuple(ctx[:i])
                if key in seen:
                    continue
                seen.add(key)
                if await slow.prefix(ctx[:i]) != 0:
                    assert await fast.prefix(ctx[:i]) != 0, doc[:i]
                    break
                a, b = await fast.logw_next(ctx[:i]), await slow.logw_next(ctx[:i])
                live_a, live_b = (
                    np.isfinite(np.asarray(a.weights)),
                    np.isfinite(np.asarray(b.weights)),
                )
                assert np.array_equal(live_a, live_b), (json.dumps(schema), b"".join(ctx[:i]))

    asyncio.run(check())


@pytest.fixture(scope="module")
def mock_llm():
    from genlm.control import PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    return PromptedLLM.from_name(EMBEDDED_MODEL, backend="mock")


@pytest.mark.parametrize("schema", WRONG, ids=lambda s: json.dumps(s)[:60])
def test_default_rows_equal_the_generic_rows_past_2_to_53(schema):
    compare_rows(schema)


def test_integer_ranges_past_2_to_53_take_our_grammar(mock_llm):
    """The writer's grammar serves them on the engine (not the generic path)."""
    from genlm.control.engine.guided import GuidedCoerced

    for schema in WRONG[:5]:
        assert isinstance(JsonSchema(schema).coerce(mock_llm, f=b"".join), GuidedCoerced), schema


@pytest.mark.parametrize("schema", CRASHED, ids=lambda s: json.dumps(s)[:60])
def test_schemas_that_crashed_the_engine_give_the_generic_rows(schema):
    code = (
        "import json, test_json_engine_magnitude as t\n"
        f"t.compare_rows(json.loads({json.dumps(json.dumps(schema))}))\n"
        "print('agree')\n"
    )
    env_path = str(ROOT / "tests" / "engine")
    run = in_subprocess(f"import sys; sys.path.insert(0, {env_path!r})\n" + code)
    assert run.returncode == 0, (run.returncode, run.stderr[-3000:])
    assert run.stdout.split()[-1] == "agree"


@pytest.mark.parametrize(
    "schema",
    CRASHED
    + [
        {"type": "integer", "minimum": B63, "maximum": B64},
        {"type": "array", "items": {"properties": {"a": {"maximum": -B64}}}},
        {"type": "array", "items": {"type": "null"}, "maxItems": B64},
    ],
    ids=lambda s: json.dumps(s)[:60],
)
def test_the_engine_as_written_refuses_bounds_past_64_bits(schema):
    """`engine=True` and `llm.constrain(json_schema=...)` give the schema to the engine
    as written: past the 64-bit integers that is a clear ValueError, never a crash
    (in a subprocess, in case it is one)."""
    code = (
        "import json\n"
        "from genlm.control import JsonSchema, PromptedLLM\n"
        "from genlm.control.embedded import EMBEDDED_MODEL\n"
        "llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend='mock')\n"
        f"schema = json.loads({json.dumps(json.dumps(schema))})\n"
        "for make in (lambda: JsonSchema(schema).coerce(llm, f=b''.join, engine=True),\n"
        "             lambda: llm.constrain(json_schema=schema)):\n"
        "    try:\n"
        "        make()\n"
        "    except ValueError as e:\n"
        "        assert 'outside the 64-bit integers' in str(e), e\n"
        "    else:\n"
        "        raise AssertionError('no error')\n"
        "print('refused')\n"
    )
    run = in_subprocess(code)
    assert run.returncode == 0, (run.returncode, run.stderr[-3000:])
    assert run.stdout.split()[-1] == "refused"


def test_the_engine_as_written_keeps_bounds_inside_64_bits(mock_llm):
    """Inside the 64-bit integers `engine=True` still takes the schema as written."""
    from genlm.control.engine.guided import GuidedCoerced

    schema = {"type": "integer", "minimum": -(2**62), "maximum": 2**62, "description": "x"}
    assert isinstance(JsonSchema(schema).coerce(mock_llm, f=b"".join, engine=True), GuidedCoerced)
