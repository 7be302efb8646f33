"""The genlm-control command: output formats on the embedded model, records, and bad input."""

import asyncio
import json
import os
import re
import subprocess
import sys

import jsonschema
import lark
import pytest

from genlm.control import InferenceVisualizer
from genlm.control.cli import main

NUMBER = r" [0-9]\."  # one digit: every particle can finish within the token budget
BASE = ["generate", "--prompt", "The value of x is", "--particles", "8", "--max-tokens", "12", "--seed", "0"]

OUTPUT_SCHEMA = {
    "type": "object",
    "required": ["model", "prompt", "log_ml", "ess", "deaths", "posterior", "particles_without_mass"],
    "additionalProperties": False,
    "properties": {
        "deaths": {
            "type": "object",
            "required": ["max_tokens", "dead_prefix", "nan", "critic"],
            "additionalProperties": {"type": "integer", "minimum": 0},
        },
        "model": {"type": "string"},
        "prompt": {"type": "string"},
        "log_ml": {"type": "number"},
        "ess": {"type": "number", "minimum": 0},
        "particles_without_mass": {"type": "integer", "minimum": 0},
        "posterior": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["text", "probability"],
                "additionalProperties": False,
                "properties": {
                    "text": {"type": "string"},
                    "probability": {"type": "number", "minimum": 0, "maximum": 1},
                },
            },
        },
    },
}


def run_json(capsys, *args):
    assert main([*BASE, *args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    jsonschema.validate(out, OUTPUT_SCHEMA)
    return out


def check_posterior(out, accepts):
    rows = out["posterior"]
    assert rows, "no particle finished with positive weight"
    assert sum(r["probability"] for r in rows) == pytest.approx(1.0)
    probs = [r["probability"] for r in rows]
    assert probs == sorted(probs, reverse=True)
    for r in rows:
        assert accepts(r["text"]), r["text"]


@pytest.mark.parametrize("sampler", ["awrs", "direct", "eager", "topk"])
def test_regex_json_output(capsys, sampler):
    out = run_json(capsys, "--regex", NUMBER, "--sampler", sampler)
    assert out["prompt"] == "The value of x is"
    assert out["model"] == "genlm-control/tiny-gpt2"
    check_posterior(out, lambda t: re.fullmatch(NUMBER, t))


def test_the_run_closes_a_backend_that_holds_an_engine(capsys, monkeypatch):
    """A backend with `close` (vLLM's engine) is shut down once the run is over, with
    the result already made, and also when the run fails; one without is left as it is."""
    import genlm.control.cli as cli

    closed = []
    load = cli._load

    def loading(model, backend):
        llm = load(model, backend)
        llm.model.close = lambda: closed.append(llm.model)
        return llm

    monkeypatch.setattr(cli, "_load", loading)
    out = run_json(capsys, "--regex", NUMBER)
    check_posterior(out, lambda t: re.fullmatch(NUMBER, t))
    assert len(closed) == 1

    def failing(self, *args, **kwargs):
        raise RuntimeError("the run failed")

    from genlm.control import AWRS

    monkeypatch.setattr(AWRS, "smc", failing)
    assert main([*BASE, "--regex", NUMBER]) != 0  # (the command line reports the error)
    assert "the run failed" in capsys.readouterr().err
    assert len(closed) == 2


def test_table_output_matches_json(capsys):
    out = run_json(capsys, "--regex", NUMBER)
    assert main([*BASE, "--regex", NUMBER]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"log_ml = {out['log_ml']:.4f}   ESS = {out['ess']:.2f}"
    assert lines[2].split() == ["probability", "text"]
    rows = [(float(line[:11]), line[13:]) for line in lines[3:3 + len(out["posterior"])]]
    assert rows == [(round(r["probability"], 4), repr(r["text"])) for r in out["posterior"]]
    rest = lines[3 + len(out["posterior"]):]
    if out["particles_without_mass"]:
        n = out["particles_without_mass"]
        assert rest == [f"({n} more particle{'s' if n != 1 else ''} with weight zero or unfinished, not shown)"]
    else:
        assert rest == []


def test_table_leaves_out_particles_without_mass(capsys):
    # one token and EOS cannot spell five digits and a period: every particle dies,
    # and none is listed
    assert main([*BASE[:-4], "--max-tokens", "2", "--seed", "1", "--particles", "40", "--regex", " [0-9]{5}\\.", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["posterior"] == []
    assert out["particles_without_mass"] == 40
    assert out["deaths"]["max_tokens"] + out["deaths"]["dead_prefix"] == 40


def test_seed_reproduces(capsys):
    assert run_json(capsys, "--regex", NUMBER) == run_json(capsys, "--regex", NUMBER)


def test_lark_grammar(capsys, tmp_path):
    grammar = 'start: " " DIGIT DIGIT? "."\nDIGIT: "0".."9"\n'
    path = tmp_path / "number.lark"
    path.write_text(grammar, encoding="utf-8")
    parser = lark.Lark(grammar)
    out = run_json(capsys, "--lark", str(path), "--sampler", "eager")

    def parses(text):
        parser.parse(text)
        return True

    check_posterior(out, parses)


def test_lark_relative_import_reads_the_grammar_folder(capsys, tmp_path, monkeypatch):
    (tmp_path / "grammar").mkdir()
    (tmp_path / "work").mkdir()
    (tmp_path / "grammar" / "number.lark").write_text('start: " " digit "."\n%import .digits (digit)\n')
    (tmp_path / "grammar" / "digits.lark").write_text('digit: "7"\n')
    (tmp_path / "work" / "digits.lark").write_text('digit: "3"\n')  # a decoy in the working folder
    monkeypatch.chdir(tmp_path / "work")
    out = run_json(capsys, "--lark", str(tmp_path / "grammar" / "number.lark"), "--sampler", "eager")
    assert [r["text"] for r in out["posterior"]] == [" 7."]


def test_json_schema(capsys, tmp_path):
    schema = {"type": "integer", "minimum": 0, "maximum": 999}
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema), encoding="utf-8")
    out = run_json(capsys, "--json-schema", str(path), "--sampler", "direct")

    def valid(text):
        jsonschema.validate(json.loads(text), schema)
        return True

    check_posterior(out, valid)


@pytest.mark.parametrize("spelling, spaced", [(None, False), ("compact", False), ("any", True)])
def test_json_spelling_reaches_the_schema(spelling, spaced, tmp_path):
    from genlm.control.cli import _item_constraint, build_parser

    path = tmp_path / "schema.json"
    path.write_text(json.dumps({"type": "array", "items": {"type": "integer"}}), encoding="utf-8")
    flags = [] if spelling is None else ["--json-spelling", spelling]
    args = build_parser().parse_args(["generate", "--json-schema", str(path), *flags])
    p = _item_constraint(args)
    assert p.spelling == (spelling or "canonical")
    assert (asyncio.run(p.complete(list(b"[1, 2]"))) == 0.0) is spaced
    assert asyncio.run(p.complete(list(b"[1,2]"))) == 0.0


def test_json_spelling_without_a_schema_is_a_usage_error():
    from genlm.control.cli import UsageError, _item_constraint, build_parser

    args = build_parser().parse_args(["generate", "--regex", "a", "--json-spelling", "any"])
    with pytest.raises(UsageError, match="--json-spelling applies to --json-schema only"):
        _item_constraint(args)


def test_record_renders(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a bare file name: the record goes in the working folder
    record = tmp_path / "run.json"
    record.write_text("an older record")  # a regular file is replaced
    out = run_json(capsys, "--regex", NUMBER, "--record", "run.json")
    data = json.loads(record.read_text(encoding="utf-8"))
    assert data["n_particles"] == 8 and data["seed"] == 0
    assert data["log_ml"] == pytest.approx(out["log_ml"])
    page = InferenceVisualizer(record).to_html()
    assert "<h2>Step 1 of" in page


def test_failed_record_still_prints_the_result(capsys, tmp_path, monkeypatch):
    import errno

    from genlm.control.smc import record_file

    expected = run_json(capsys, "--regex", NUMBER)

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(record_file.os, "fsync", no_space)
    code = main([*BASE, "--regex", NUMBER, "--record", str(tmp_path / "run.json"), "--json"])
    captured = capsys.readouterr()
    assert code == 1
    assert json.loads(captured.out) == expected, "the result is printed all the same"
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("genlm-control: error: the record was not written to ")
    assert lines[0].endswith("No space left on device")
    assert list(tmp_path.iterdir()) == [], "no partial or temporary file is left"


def test_offline_model_check(tmp_path, monkeypatch):
    import huggingface_hub.constants

    from genlm.control.cli import UsageError, _check_model
    from genlm.control.embedded import model_path

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    snapshot = tmp_path / "models--some-org--cached-model" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "models--some-org--cached-model" / "refs").mkdir()
    (tmp_path / "models--some-org--cached-model" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("some-org/cached-model", "genlm-control/tiny-gpt2", "embedded", model_path()):
        _check_model(name)  # available offline: no error
    for name in ("some-org/other-model", "a/b/c", "../x", ""):
        with pytest.raises(UsageError, match="not available offline"):
            _check_model(name)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    _check_model("some-org/other-model")  # online, the hub client decides


def _bad_inputs(tmp_path):
    (tmp_path / "bad.lark").write_text('start: "a" (\n', encoding="utf-8")
    (tmp_path / "nostart.lark").write_text('rule: "a"\n', encoding="utf-8")
    (tmp_path / "notjson.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "badschema.json").write_text('{"type": 5}', encoding="utf-8")
    (tmp_path / "unsupported.json").write_text('{"$dynamicRef": "#node"}', encoding="utf-8")
    (tmp_path / "binary.lark").write_bytes(b"\xff\xfe")
    return {
        "missing-file": ["--lark", str(tmp_path / "missing.lark")],
        "directory": ["--json-schema", str(tmp_path)],
        "not-utf8": ["--lark", str(tmp_path / "binary.lark")],
        "bad-regex": ["--regex", "[0-9"],
        "lookaround-regex": ["--regex", "(?<=a)b"],
        "bad-grammar": ["--lark", str(tmp_path / "bad.lark")],
        "no-start-rule": ["--lark", str(tmp_path / "nostart.lark")],
        "not-json": ["--json-schema", str(tmp_path / "notjson.json")],
        "invalid-schema": ["--json-schema", str(tmp_path / "badschema.json")],
        "unsupported-schema": ["--json-schema", str(tmp_path / "unsupported.json")],
        "unknown-model": ["--model", "no-such-org/no-such-model"],
        "unknown-backend": ["--backend", "nope"],
        "zero-particles": ["--particles", "0"],
        "bad-threshold": ["--ess-threshold", "1.5"],
        "zero-max-tokens": ["--max-tokens", "0"],
        "two-constraints": ["--regex", "a", "--json-schema", str(tmp_path / "badschema.json")],
        "not-an-int": ["--particles", "many"],
        "unknown-sampler": ["--sampler", "beam"],
    }


BAD = [
    "missing-file", "directory", "not-utf8", "bad-regex", "lookaround-regex", "bad-grammar",
    "no-start-rule", "not-json", "invalid-schema", "unsupported-schema", "unknown-model",
    "unknown-backend", "zero-particles", "bad-threshold", "zero-max-tokens", "two-constraints",
    "not-an-int", "unknown-sampler",
]


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_one_line(case, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("GENLM_CONTROL_DEBUG", raising=False)
    args = _bad_inputs(tmp_path)[case]
    try:
        code = main(["generate", "--max-tokens", "4", "--particles", "2", *args])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("genlm-control: error: ")
    assert "Traceback" not in captured.err


def test_module_help_runs():
    done = subprocess.run(
        [sys.executable, "-m", "genlm.control", "generate", "--help"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0
    for option in ("--prompt", "--regex", "--lark", "--json-schema", "--model", "--backend",
                   "--sampler", "--particles", "--ess-threshold", "--max-tokens",
                   "--resampling", "--seed", "--record", "--json"):
        assert option in done.stdout


BAD_INPUT_PROBE = """
import sys
from genlm.control.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "transformers", "genlm.grammar", "genlm.backend") if m in sys.modules)
print(code, heavy)
"""


@pytest.mark.parametrize("kind", ["regex", "lark", "json-schema"])
def test_bad_input_fails_before_the_model_stack_is_imported(tmp_path, kind):
    """Bad user input is reported before torch, transformers or the grammar library
    are imported (they cost seconds): the error path stays fast."""
    arg = "[a-"
    if kind == "lark":
        arg = str(tmp_path / "g.lark")
        (tmp_path / "g.lark").write_text('start: "a" (\n')
    if kind == "json-schema":
        arg = str(tmp_path / "s.json")
        (tmp_path / "s.json").write_text('{"type": "nonsense"}')
    done = subprocess.run(
        [sys.executable, "-c", BAD_INPUT_PROBE, "generate", f"--{kind}", arg],
        capture_output=True, text=True, timeout=120,
    )
    assert done.stdout.split("\n")[0] == "2 []", done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("genlm-control: error: ")


def test_generate_help_shows_defaults():
    from genlm.control.cli import build_parser

    text = build_parser()._subparsers._group_actions[0].choices["generate"].format_help()
    flat = " ".join(text.split())
    for shown in ("(default: 10)", "(default: 0.5)", "(default: 32)", "(default: awrs)",
                  "(default: multinomial)", "(default: 5)", "(default: the embedded model)"):
        assert shown in flat, shown


def test_ess_is_that_of_the_last_resampling(capsys, tmp_path):
    # the command reports the ESS the record keeps for the run's last resampled step,
    # not the N that the equal weights after it give
    path = tmp_path / "run.json"
    out = run_json(capsys, "--regex", NUMBER, "--record", str(path))
    resampled = [s for s in json.loads(path.read_text())["steps"] if s["ancestors"] is not None]
    assert resampled and resampled[-1]["ess"] < 8 * 0.5
    assert out["ess"] == pytest.approx(resampled[-1]["ess"], rel=1e-12)


def test_warnings_name_no_line_of_source(capsys):
    # every particle dies: the warning is one line of the command's, with no file,
    # line number or source line (of ours or anyone's)
    args = [*BASE[:-4], "--max-tokens", "2", "--seed", "1", "--particles", "4", "--regex", " [0-9]{5}\\."]
    assert main(args) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[0].startswith("genlm-control: warning: every one of the 4 particles")
    assert len(lines) == 1, err
    assert ".py" not in err and "return await" not in err


def test_the_one_thread_setting_is_for_the_hf_backend_only():
    """vLLM's CPU build binds its OpenMP threads when its engine starts and aborts a step
    run on another count, so the command line sets one torch thread only on the HF backend."""
    import torch

    from genlm.control._cli_embedded import one_torch_thread
    from genlm.control.embedded import EMBEDDED_MODEL

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with one_torch_thread(EMBEDDED_MODEL, "vllm"):
            assert torch.get_num_threads() == 2
        with one_torch_thread("some/other-model", "hf"):
            assert torch.get_num_threads() == 2
        with one_torch_thread(EMBEDDED_MODEL, "hf"):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
