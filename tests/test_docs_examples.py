"""Every ```python block of README.md and docs/*.md runs as written.

A block runs in a fresh namespace in this process (the model loads once per worker),
from a temporary working directory. The HTML comment on the line before a block
changes that:

- `<!-- gpu-only -->`: the block runs only where CUDA and vLLM are available;
- `<!-- vllm -->`: the block runs only where the vllm package is importable (CPU or GPU);
- `<!-- script -->`: the block is written to a file and run by a new interpreter
  (for code that starts worker processes, which must import its definitions);
- `<!-- no-test -->`: a fragment that is not run.

The README's main-job command is run through `genlm.control.cli.main` with the
arguments read from the README, so a change to that command is tested too.
"""

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"(?:<!--\s*([\w-]+)\s*-->\s*\n)?```(\w*)\n(.*?)\n```", re.S)
MARKS = {None, "gpu-only", "vllm", "script", "no-test"}


class Block(NamedTuple):
    page: Path
    line: int
    lang: str
    mark: str | None
    code: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(lang: str) -> list[Block]:
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            if m.group(2) == lang:
                line = text.count("\n", 0, m.start(2)) + 1
                out.append(Block(page, line, lang, m.group(1), m.group(3) + "\n"))
    return out


PYTHON = blocks("python")


def test_every_page_has_known_marks_and_runs_something():
    assert {b.mark for b in PYTHON} <= MARKS
    runnable = [b for b in PYTHON if b.mark is None]
    assert len(runnable) >= 10
    assert sum(b.mark == "no-test" for b in PYTHON) <= 2


@pytest.mark.parametrize("block", PYTHON, ids=[b.name for b in PYTHON])
def test_python_block(block, tmp_path, monkeypatch):
    if block.mark == "no-test":
        pytest.skip("a fragment")
    if block.mark == "gpu-only" and not (
        torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None
    ):
        pytest.skip("needs CUDA and vllm")
    if block.mark == "vllm" and importlib.util.find_spec("vllm") is None:
        pytest.skip("needs the vllm package (CI runs it in the vLLM environment)")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    if block.mark == "script":
        script = tmp_path / "block.py"
        script.write_text(block.code, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=300,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return
    code = compile(block.code, block.name, "exec")
    exec(code, {"__name__": "__main__"})


def readme_command(prefix: str) -> list[str]:
    """The arguments after `prefix` in the README's bash block that contains it."""
    for block in blocks("bash"):
        if block.page.name != "README.md":
            continue
        for part in block.code.split("&&"):
            words = shlex.split(part)
            if words and words[0].endswith(prefix):
                return words[1:]
    raise AssertionError(f"README has no bash command starting with {prefix!r}")


def test_readme_main_job_command(capsys):
    from genlm.control.cli import main

    args = readme_command("genlm-control")
    assert args[0] == "generate" and "--regex" in args
    pattern = args[args.index("--regex") + 1]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["posterior"], "the README's command produced no finished sequence"
    assert sum(r["probability"] for r in out["posterior"]) == pytest.approx(1.0)
    for row in out["posterior"]:
        assert re.fullmatch(pattern, row["text"]), row["text"]
    assert main(args) == 0
    table = capsys.readouterr().out
    assert table.startswith("log_ml = ") and "probability  text" in table


def test_readme_test_command_runs_pytest():
    args = readme_command("python")
    assert args[:2] == ["-m", "pytest"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python -m pytest " + " ".join(args[2:]) in ci
