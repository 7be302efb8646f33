"""The bad-input catalogue of docs/bad-input.md for run records, the visualizer and the
command line: one case per row, each a clear error naming the problem, raised before
any work (no sampling, no model loaded) and changing no file."""

import asyncio
import json
import os
from pathlib import Path

import pytest
from toys.reliability import ab_lm, undocumented

from genlm.control import InferenceVisualizer, PromptedLLM, direct_token_sampler
from genlm.control.cli import main
from genlm.control.embedded import model_path
from genlm.control.smc.record import FORMAT, RunRecord

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _smc(json_path):
    return direct_token_sampler(ab_lm()).smc(n_particles=2, ess_threshold=0.5, max_tokens=3, json_path=json_path)


def _record_dict() -> dict:
    return {
        "format": FORMAT, "n_particles": 1, "ess_threshold": 0.5, "max_tokens": 2,
        "resampling_method": "multinomial", "seed": None, "log_ml": None,
        "steps": [{"step": 0, "contexts": [["a"]], "log_weights": [0.0], "done": [True], "ess": 1.0}],
        "final_contexts": [["a"]], "final_log_weights": [None],
    }


def _record_file(tmp: Path, content) -> Path:
    path = tmp / "in" / "bad-record.json"  # a folder of its own: the snapshot skips it
    if isinstance(content, dict):
        content = json.dumps(content)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def _with(**changes) -> dict:
    d = _record_dict()
    d.update(changes)
    return d


def _tampered():
    record = RunRecord.from_dict(_record_dict())
    object.__setattr__(record, "seed", "<script>alert(1)</script>")
    return InferenceVisualizer(record)


def _fixtures(tmp: Path) -> None:
    """Files the rows refer to: links, a pipe, inputs of the command line."""
    (tmp / "target.json").write_text("keep")
    (tmp / "in").mkdir()
    os.symlink(tmp / "target.json", tmp / "link.json")
    os.symlink(tmp / "nowhere.json", tmp / "dangling.json")
    os.mkfifo(tmp / "fifo")
    (tmp / "file").write_text("x")
    (tmp / "g.lark").write_text('start: "a"\n')
    (tmp / "s.json").write_text('{"type": "integer"}')
    os.link(tmp / "s.json", tmp / "s-hardlink.json")
    (tmp / "ref.json").write_text('{"$ref": "http://127.0.0.1:9/x.json"}')
    (tmp / "big.json").write_bytes(b" " * (8 * 2**20 + 1))
    (tmp / "deep.json").write_text("[" * 10**5 + "]" * 10**5)


# (row id, thunk of the tmp folder, error type, message pattern); in the order of docs/bad-input.md
ROWS = [
    # Samplers and SMC: json_path, checked before sampling
    ("json-path-empty", lambda t: _smc(""), ValueError, "json_path is empty"),
    ("json-path-missing-folder", lambda t: _smc(t / "no" / "r.json"), ValueError, "folder that does not exist"),
    ("json-path-under-a-file", lambda t: _smc(t / "file" / "r.json"), ValueError, "not a folder|cannot be used"),
    ("json-path-directory", lambda t: _smc(t), ValueError, "is a directory"),
    ("json-path-symlink", lambda t: _smc(t / "link.json"), ValueError, "symbolic link"),
    ("json-path-dangling-symlink", lambda t: _smc(t / "dangling.json"), ValueError, "symbolic link"),
    ("json-path-fifo", lambda t: _smc(t / "fifo"), ValueError, "not a regular file"),
    ("json-path-nul", lambda t: _smc(str(t / "a\0b")), ValueError, "NUL"),
    ("json-path-bytes", lambda t: _smc(b"r.json"), TypeError, "json_path must be a path"),
    # Records and the visualizer
    ("record-missing", lambda t: RunRecord.from_json(t / "missing.json"), FileNotFoundError, "no SMC record"),
    ("record-not-json", lambda t: RunRecord.from_json(_record_file(t, "{oops")), ValueError, "not JSON"),
    ("record-nan", lambda t: RunRecord.from_json(_record_file(t, '{"log_ml": NaN}')), ValueError, "NaN is not strict JSON"),
    ("record-deep-nesting", lambda t: RunRecord.from_json(_record_file(t, "[" * 10**5)), ValueError, "nested too deeply"),
    ("record-not-utf8", lambda t: RunRecord.from_json(_record_file(t, b"\xff\xfe")), ValueError, "not UTF-8"),
    ("record-not-object", lambda t: RunRecord.from_json(_record_file(t, "[1]")), ValueError, "must be a JSON object"),
    ("record-wrong-format", lambda t: RunRecord.from_dict({"format": "x"}), ValueError, "not an SMC record"),
    ("record-missing-field", lambda t: RunRecord.from_dict({"format": FORMAT}), ValueError, "field steps: is missing"),
    ("record-field-type", lambda t: RunRecord.from_dict(_with(seed="<script>")), ValueError, "field seed: must be an integer"),
    ("record-nested-field-type", lambda t: RunRecord.from_dict(_with(final_contexts=[[5]])), ValueError, r"field final_contexts\[0\]\[0\]: must be a str"),
    ("record-length-mismatch", lambda t: RunRecord.from_dict(_with(n_particles=2)), ValueError, r"steps\[0\]\.contexts: must have 2 entries"),
    ("record-log-weight-inf", lambda t: RunRecord.from_dict(_with(final_log_weights=[1e400])), ValueError, r"final_log_weights\[0\]"),
    ("viz-source-type", lambda t: InferenceVisualizer([1, 2]), TypeError, "expected a RunRecord"),
    ("viz-tampered-record", lambda t: _tampered(), ValueError, "field seed"),
    ("viz-page-symlink", lambda t: InferenceVisualizer(RunRecord.from_dict(_record_dict())).to_html(t / "link.json"), ValueError, "symbolic link"),
]


@pytest.mark.parametrize("thunk, err, match", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
async def test_bad_record_input_gives_a_clear_error(thunk, err, match, tmp_path):
    _fixtures(tmp_path)
    before = _snapshot(tmp_path)
    with pytest.raises(err, match=match):
        out = thunk(tmp_path)
        if asyncio.iscoroutine(out):
            await asyncio.wait_for(out, timeout=30)
    assert _snapshot(tmp_path) == before, "a refused input changes no file"


def _snapshot(tmp: Path) -> dict:
    return {
        p.name: (p.read_bytes() if p.is_file() and not p.is_symlink() else os.readlink(p) if p.is_symlink() else None)
        for p in sorted(tmp.iterdir())
        if p.name != "fifo"
    } | {"<names>": sorted(p.name for p in tmp.iterdir())}


# Command line: (row id, arguments of the tmp folder, message pattern); exit status 2
CLI_ROWS = [
    ("cli-particles-huge", lambda t: ["--particles", "200000000"], r"--particles must be an integer in \[1, 10000\]"),
    ("cli-particles-negative", lambda t: ["--particles", "-5"], "--particles must be an integer"),
    ("cli-particles-float", lambda t: ["--particles", "2.5"], "invalid int value"),
    ("cli-max-tokens-huge", lambda t: ["--max-tokens", str(10**9)], r"--max-tokens must be an integer in \[1, 100000\]"),
    ("cli-max-tokens-negative", lambda t: ["--max-tokens", "-1"], "--max-tokens must be an integer"),
    ("cli-max-tokens-float", lambda t: ["--max-tokens", "1e3"], "invalid int value"),
    ("cli-top-k-zero", lambda t: ["--top-k", "0"], "--top-k must be an integer"),
    ("cli-top-k-huge", lambda t: ["--top-k", str(10**7)], "--top-k must be an integer"),
    ("cli-seed-negative", lambda t: ["--seed", "-1"], "--seed must be an integer"),
    ("cli-seed-huge", lambda t: ["--seed", str(2**64)], "--seed must be an integer"),
    ("cli-seed-float", lambda t: ["--seed", "0.5"], "invalid int value"),
    ("cli-ess-nan", lambda t: ["--ess-threshold", "nan"], "--ess-threshold must lie in"),
    ("cli-ess-inf", lambda t: ["--ess-threshold", "inf"], "--ess-threshold must lie in"),
    ("cli-ess-negative", lambda t: ["--ess-threshold", "-0.5"], "--ess-threshold must lie in"),
    ("cli-unknown-model-offline", lambda t: ["--model", "no-such-org/no-such-model"], "not available offline"),
    ("cli-missing-model-folder", lambda t: ["--model", str(t / "no-model")], "not available offline"),
    ("cli-record-empty", lambda t: ["--record", ""], "--record is empty"),
    ("cli-record-directory", lambda t: ["--record", str(t)], "is a directory"),
    ("cli-record-missing-folder", lambda t: ["--record", str(t / "no" / "r.json")], "folder that does not exist"),
    ("cli-record-symlink", lambda t: ["--record", str(t / "link.json")], "symbolic link"),
    ("cli-record-dangling-symlink", lambda t: ["--record", str(t / "dangling.json")], "symbolic link"),
    ("cli-record-fifo", lambda t: ["--record", str(t / "fifo")], "not a regular file"),
    ("cli-record-is-lark-input", lambda t: ["--lark", str(t / "g.lark"), "--record", str(t / "g.lark")], "is the --lark input file"),
    ("cli-record-is-schema-input", lambda t: ["--json-schema", str(t / "s.json"), "--record", str(t / "s.json")], "is the --json-schema input file"),
    ("cli-record-hardlink-of-input", lambda t: ["--json-schema", str(t / "s.json"), "--record", str(t / "s-hardlink.json")], "is the --json-schema input file"),
    ("cli-record-relative-input", lambda t: ["--json-schema", str(t / "s.json"), "--record", os.path.relpath(t / "s.json")], "is the --json-schema input file"),
    ("cli-record-in-model-folder", lambda t: ["--record", os.path.join(model_path(), "config.json")], "inside the model's folder"),
    ("cli-lark-device", lambda t: ["--lark", "/dev/zero"], "not a regular file"),
    ("cli-lark-fifo", lambda t: ["--lark", str(t / "fifo")], "not a regular file"),
    ("cli-schema-too-large", lambda t: ["--json-schema", str(t / "big.json")], "larger than 8 MiB"),
    ("cli-schema-deep-nesting", lambda t: ["--json-schema", str(t / "deep.json")], "nested too deeply"),
    ("cli-schema-remote-ref", lambda t: ["--json-schema", str(t / "ref.json")], "not a local reference|remote|\\$ref"),
]


@pytest.mark.parametrize("args, match", [r[1:] for r in CLI_ROWS], ids=[r[0] for r in CLI_ROWS])
def test_bad_command_line_is_one_line_before_loading_a_model(args, match, tmp_path, capsys, monkeypatch):
    _fixtures(tmp_path)
    before = _snapshot(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("GENLM_CONTROL_DEBUG", raising=False)

    def no_loading(*a, **k):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(PromptedLLM, "from_name", no_loading)
    try:
        code = main(["generate", "--particles", "2", "--max-tokens", "4", *args(tmp_path)])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("genlm-control: error: "), captured.err
    assert __import__("re").search(match, lines[0]), lines[0]
    assert _snapshot(tmp_path) == before, "a refused invocation changes no file"
    assert open(os.path.join(model_path(), "config.json")).read().startswith("{")


def test_every_row_is_documented():
    missing = undocumented(r[0] for r in ROWS + CLI_ROWS)
    assert not missing, f"rows without a line in docs/bad-input.md: {missing}"
