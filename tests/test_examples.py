"""Every script in examples/ runs offline on the embedded model and does what it says.

The scripts are imported from their files and their `main` coroutines awaited in this
process (the model loads once per worker); a slow test also runs each as a script.
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import lark
import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NUMBER = re.compile(r" [0-9]+\.")


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_posterior(sequences, pattern=NUMBER):
    posterior = sequences.decoded_posterior
    assert posterior, "no particle finished with positive weight"
    assert sum(posterior.values()) == pytest.approx(1.0)
    for text, p in posterior.items():  # entries of weight zero (dead particles) stay, as in 0.4.1
        assert p == 0.0 or pattern.fullmatch(text), text
    assert np.isfinite(sequences.log_ml)


async def test_regex_digits():
    check_posterior(await load("regex_digits").main())


async def test_json_schema_outputs_are_valid():
    module = load("json_schema")
    sequences = await module.main()
    assert sequences.decoded_posterior
    for text in (t for t, p in sequences.decoded_posterior.items() if p > 0):
        jsonschema.validate(json.loads(text), module.SCHEMA)
        assert "  " not in text and "\n" not in text


async def test_everyday_json_finishes_valid_documents_on_the_documented_path():
    """The example's realistic schema (nested object, enum, integer bounds, array,
    pattern, date) through `AWRS(llm, JsonSchema(schema, spelling="canonical").coerce(...))`:
    seed 0 ends with documents of positive weight, each valid with the format checker,
    none with whitespace outside strings."""
    module = load("everyday_json")
    sequences = await module.main()
    done = [t for t, p in sequences.decoded_posterior.items() if p > 0]
    assert done
    for text in done:
        value = json.loads(text)
        jsonschema.validate(value, module.SCHEMA, format_checker=jsonschema.FormatChecker())
        assert text == json.dumps(value, ensure_ascii=False, separators=(",", ":"))


async def test_everyday_sql_finishes_on_the_default_path():
    """The SQL-like grammar through AWRS at max_tokens=40: seed 0 ends with queries of
    positive weight (the regular grammar's exact budget), each parsed by Lark."""
    module = load("everyday_sql")
    parser = lark.Lark(module.SQL)
    sequences = await module.main()
    done = [t for t, p in sequences.decoded_posterior.items() if p > 0]
    assert done
    for text in done:
        parser.parse(text)


async def test_sql_grammar_outputs_parse():
    module = load("sql_grammar")
    parser = lark.Lark(module.GRAMMAR)
    sequences = await module.main()
    assert sequences.decoded_posterior
    for text in (t for t, p in sequences.decoded_posterior.items() if p > 0):
        parser.parse(text)


async def test_critic_potential_and_run():
    module = load("critic")
    few_zeros = module.FewZeros(penalty=0.5)
    assert await few_zeros.prefix(list(b" 100")) == pytest.approx(2 * np.log(0.5))
    assert await few_zeros.complete(list(b" 7.")) == 0.0
    check_posterior(await module.main())


async def test_concurrent_runs_are_valid_and_reproducible():
    module = load("concurrent_runs")
    first, second = await module.main(), await module.main()
    assert list(first) == module.PROMPTS
    for prompt in module.PROMPTS:
        check_posterior(first[prompt])
        assert first[prompt].contexts == second[prompt].contexts
        np.testing.assert_array_equal(first[prompt].log_weights, second[prompt].log_weights)


async def test_visualize_record_writes_page(tmp_path):
    page = await load("visualize_record").main(str(tmp_path))
    html = page.read_text(encoding="utf-8")
    assert "<h2>Step 1 of" in html and "Result" in html
    record = json.loads((tmp_path / "smc_record.json").read_text(encoding="utf-8"))
    assert record["n_particles"] == 8


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_example_runs_as_script(script, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    args = [sys.executable, str(EXAMPLES / script)]
    if script == "visualize_record.py":
        args.append(str(tmp_path))
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip()
