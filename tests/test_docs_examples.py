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

Shown output. Every output the docs show is produced here, so a stale one fails:

- a ```text block that follows a ```python block with nothing but blank lines between
  is that block's standard output (for a `<!-- script -->` block, the script's);
- a ```text block that follows a ```bash block holding one `genlm-control ...`
  command is that command's standard output (run through `genlm.control.cli.main`);
- a ```text block whose first line starts with `$ ` is a transcript: each
  `$ [VAR=value ...] genlm-control ...` line is run the same way (with those
  environment variables), and the lines up to the next `$ ` are its standard output
  and standard error;
- a line of a runnable block that calls `print(...)` carries no trailing comment: a
  printed value is shown in an output block, where it is checked, never in a comment.

Outputs are compared line by line after removing trailing spaces and blank lines at
either end; nothing else is normalised (the examples are seeded, so their output is
the same bit for bit). The shown outputs are those of the CPU (the Hugging Face
backend): where CUDA and vLLM are both present, `PromptedLLM.from_name` and the
command choose vLLM, and the blocks still run but their output is not compared.
"""

import importlib.util
import json
import math
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
    output: str | None = None  # the ```text block shown right after it

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def page_blocks(page: Path) -> list[Block]:
    """The fenced blocks of `page`, each with the text block that follows it at once."""
    text = page.read_text(encoding="utf-8")
    found = list(FENCE.finditer(text))
    out = []
    for i, m in enumerate(found):
        line = text.count("\n", 0, m.start(2)) + 1
        after = found[i + 1] if i + 1 < len(found) else None
        output = None
        if after is not None and after.group(2) == "text" and not text[m.end() : after.start()].strip():
            output = after.group(3) + "\n"
        out.append(Block(page, line, m.group(2), m.group(1), m.group(3) + "\n", output))
    return out


ALL = [b for page in PAGES for b in page_blocks(page)]


def blocks(lang: str) -> list[Block]:
    return [b for b in ALL if b.lang == lang]


PYTHON = blocks("python")
COMMANDS = [b for b in blocks("bash") if b.output is not None]
TRANSCRIPTS = [b for b in blocks("text") if b.code.startswith("$ ")]
ON_VLLM = torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None


def shown(text: str) -> list[str]:
    """`text` as compared with a shown output: lines without trailing spaces, no blank
    lines at either end."""
    return [line.rstrip() for line in text.strip("\n").splitlines()]


#: A decimal number with a fraction or an exponent, as `repr(float)` writes one.
FLOAT = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?|-?\d+e[-+]?\d+")


def same_output(printed: list[str], page: list[str]) -> bool:
    """Line for line equal, where floats with a fraction may differ in their last
    digits (relative 1e-6): float32 sums in another order, on another CPU, change
    the seventh digit of a run's weights, not its draws."""
    if len(printed) != len(page):
        return False
    for a, b in zip(printed, page):
        if FLOAT.sub("#", a) != FLOAT.sub("#", b):
            return False
        for x, y in zip(FLOAT.findall(a), FLOAT.findall(b)):
            if not math.isclose(float(x), float(y), rel_tol=1e-6, abs_tol=1e-9):
                return False
    return True


def check_output(block: Block, printed: str) -> None:
    if block.output is None or ON_VLLM:
        return
    assert same_output(shown(printed), shown(block.output)), (
        f"{block.name} prints\n{printed}\nbut the page shows\n{block.output}"
    )


def test_every_page_has_known_marks_and_runs_something():
    assert {b.mark for b in PYTHON} <= MARKS
    runnable = [b for b in PYTHON if b.mark is None]
    assert len(runnable) >= 10
    # the blocks that need a GPU with vLLM or gpt-oss's weights (the vLLM page's run in
    # CI's vLLM environment); every other block runs here
    assert sum(b.mark == "no-test" for b in PYTHON) <= 3


PRINT_WITH_COMMENT = re.compile(r"\bprint\(.*\)\s*#")


def test_printed_values_are_shown_in_output_blocks_not_comments():
    found = [
        f"{b.name}+{i}: {line.strip()}"
        for b in PYTHON
        if b.mark != "no-test"
        for i, line in enumerate(b.code.splitlines(), 1)
        if PRINT_WITH_COMMENT.search(line)
    ]
    assert not found, "show printed values in a ```text block after the code:\n" + "\n".join(found)


def test_every_shown_output_is_checked():
    # an output block may follow only code that this file runs and compares
    for b in ALL:
        if b.output is not None and b.lang not in ("python", "text"):
            assert b in COMMANDS and b.code.strip().startswith("genlm-control "), b.name
        if b.output is not None and b.lang == "python":
            assert b.mark in (None, "script"), f"{b.name}: its output is shown but it does not run here"
    assert len([b for b in PYTHON if b.output is not None]) >= 5
    assert COMMANDS and TRANSCRIPTS


@pytest.mark.parametrize("block", PYTHON, ids=[b.name for b in PYTHON])
def test_python_block(block, tmp_path, monkeypatch, capsys):
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
        check_output(block, done.stdout)
        return
    code = compile(block.code, block.name, "exec")
    capsys.readouterr()
    exec(code, {"__name__": "__main__"})
    check_output(block, capsys.readouterr().out)


def run_cli(words: list[str], capsys) -> tuple[int, str, str]:
    """`genlm-control` run in this process: its exit status, stdout and stderr."""
    from genlm.control.cli import main

    assert words[0] == "genlm-control", words
    capsys.readouterr()
    code = main(words[1:])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("block", COMMANDS, ids=[b.name for b in COMMANDS])
def test_command_output(block, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = run_cli(shlex.split(block.code), capsys)
    assert code == 0, err
    check_output(block, out)


@pytest.mark.parametrize("block", TRANSCRIPTS, ids=[b.name for b in TRANSCRIPTS])
def test_transcript(block, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    runs = re.split(r"^\$ ", block.code, flags=re.M)[1:]
    assert runs, block.name
    for run in runs:
        command, _, expected = run.partition("\n")
        words = shlex.split(command)
        while "=" in words[0]:
            name, _, value = words.pop(0).partition("=")
            monkeypatch.setenv(name, value)
        _, out, err = run_cli(words, capsys)
        assert shown(out + err) == shown(expected), f"{block.name}: `{command}` printed\n{out}{err}"


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


def test_the_command_line_page_shows_the_readmes_command():
    cli_page = [b for b in COMMANDS if b.page.name == "cli.md"]
    assert cli_page and shlex.split(cli_page[0].code)[1:] == readme_command("genlm-control")


def _prose(page: Path) -> str:
    return re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_no_page_repeats_a_heading_or_keeps_a_placeholder(page):
    headings = [line.strip() for line in _prose(page).splitlines() if re.match(r"#{1,6} ", line)]
    repeated = sorted({h for h in headings if headings.count(h) > 1})
    assert not repeated, f"{page.name} repeats {repeated}"
    # an HTML comment is a block's mark, never a note left for later
    comments = re.findall(r"<!--(.*?)-->", _prose(page), flags=re.S)
    assert all(c.strip() in MARKS for c in comments), comments


def test_outputs_compare_floats_to_six_digits_and_everything_else_exactly():
    page = ["Chart {", "  ' 0.': 0.5033120599490398,", "} log Z ≈ -18.204060963442238"]
    near = ["Chart {", "  ' 0.': 0.5033119630084671,", "} log Z ≈ -18.204059988778265"]
    assert same_output(near, page)
    assert not same_output(["Chart {", "  ' 0.': 0.5034119630084671,", page[2]], page)
    assert not same_output(["Chart {", "  ' 1.': 0.5033119630084671,", page[2]], page)
    assert not same_output(near[:2], page)
