"""Run genlm-control 0.4.1's own test suite against this package.

The 0.4.1 sdist is downloaded from the package registry at run time (its tests are
never copied into this repository), unpacked into a temporary directory, and each of
its test files is run by pytest in a subprocess with this worktree first on
``PYTHONPATH``. "gpt2" and "openai-community/gpt2" are served by the embedded model:
the tests run with the temporary directory as working directory, where those names
are links to `genlm.control.embedded.model_path()` (Hugging Face loaders take an
existing directory before a Hub name), and ``HF_HUB_OFFLINE=1``, so nothing is
fetched from the network.

Prints a table by test file: passed, failed, and how many failures test 0.4.1
internals that our public API does not promise (the `INTERNALS` list below names
each one), followed by the public failures.

Usage:
    python benchmarks/compat_041.py [--keep DIR] [--only SUBSTRING] [--timeout S] [--package DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSION = "0.4.1"

# Failures that test 0.4.1's internals, not its public API: (substring of the test
# id "file::test", the internal it reaches). A failing test whose id contains the
# substring is counted as an internal failure.
INTERNALS: list[tuple[str, str]] = [
    ("test_typing.py::", "genlm.control.typing helpers"),
    ("test_util.py::test_lru", "util.LRUCache"),
    ("test_util.py::test_LRU", "util.LRUCache"),
    ("test_viz.py::", "InferenceVisualizer record format (owned elsewhere)"),
    ("test_mlx.py::", "MLX backend model (not available offline)"),
    ("test_harmony.py::", "gpt-oss-20b harmony chat model (not available offline)"),
    ("test_duplicate_byte_strings.py::", "CodeLlama/Mistral/Gemma tokenizers (not offline)"),
    ("test_smc_model.py::test_smc_record", "sampler.smc_record"),
    ("test_coerce.py::test_coerced_fast_path", "internal coercion lanes"),
]

MODEL_NAMES = ("gpt2", "openai-community/gpt2")


def download(dest: Path) -> Path:
    """The unpacked 0.4.1 sdist directory under `dest`."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", f"genlm-control=={VERSION}",
         "--no-deps", "--no-binary", ":all:", "-d", str(dest), "-q"],
        check=True,
    )
    (archive,) = dest.glob("genlm_control-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    src = dest / f"genlm_control-{VERSION}"
    # The sdist's own package would shadow ours from the working directory.
    shutil.rmtree(src / "genlm")
    return src


def link_models(where: Path) -> None:
    """Make each of `MODEL_NAMES` a directory link to the embedded model under `where`."""
    sys.path.insert(0, str(ROOT))
    from genlm.control.embedded import model_path

    for name in MODEL_NAMES:
        link = where / name
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(model_path(), target_is_directory=True)


def run_file(src: Path, test_file: Path, timeout: float, package: Path) -> list[tuple[str, str, str]]:
    """(test id, outcome, message) for each test in `test_file`; a file that times out
    or does not collect reports one row for the whole file."""
    report = src / (test_file.stem + ".xml")
    env = dict(os.environ, PYTHONPATH=str(package), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    rel = test_file.relative_to(src)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
           "-o", "asyncio_mode=auto", f"--junitxml={report}", str(rel)]
    try:
        subprocess.run(cmd, cwd=src, env=env, timeout=timeout, capture_output=True, check=False)
    except subprocess.TimeoutExpired:
        return [(f"{rel.name}::*", "failed", f"timed out after {timeout:.0f}s")]
    if not report.exists():
        return [(f"{rel.name}::*", "failed", "no report (collection crashed)")]
    rows = []
    for case in ET.parse(report).iter("testcase"):
        name = f"{rel.name}::{case.get('name')}"
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            rows.append((name, "failed", (bad.get("message") or "").splitlines()[0][:110]))
        elif case.find("skipped") is not None:
            rows.append((name, "skipped", ""))
        else:
            rows.append((name, "passed", ""))
    return rows


def internal(test_id: str) -> str | None:
    """The internal a failing test reaches, or None for a public-API test."""
    for needle, what in INTERNALS:
        if needle in test_id:
            return what
    return None


def table(results: dict[str, list[tuple[str, str, str]]]) -> str:
    """A Markdown table by file, with totals."""
    lines = ["| test file | passed | failed | of which internals |", "|---|---:|---:|---:|"]
    tot = [0, 0, 0]
    for path, rows in sorted(results.items()):
        passed = sum(o == "passed" for _, o, _ in rows)
        failed = [t for t, o, _ in rows if o == "failed"]
        inner = sum(internal(t) is not None for t in failed)
        tot = [tot[0] + passed, tot[1] + len(failed), tot[2] + inner]
        lines.append(f"| {path} | {passed} | {len(failed)} | {inner} |")
    lines.append(f"| **total** | **{tot[0]}** | **{tot[1]}** | **{tot[2]}** |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", help="unpack into this directory and keep it")
    ap.add_argument("--only", help="run only test files whose path contains this")
    ap.add_argument("--package", default=str(ROOT), help="checkout whose genlm.control is tested")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per test file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(args.keep) if args.keep else Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        existing = base / f"genlm_control-{VERSION}"
        src = existing if existing.is_dir() else download(base)
        link_models(src)
        files = sorted((src / "tests").rglob("test_*.py"))
        if args.only:
            files = [f for f in files if args.only in str(f.relative_to(src))]
        results = {}
        for f in files:
            key = str(f.relative_to(src / "tests"))
            results[key] = run_file(src, f, args.timeout, Path(args.package))
            print(f"{key}: done", file=sys.stderr, flush=True)
        print(table(results))
        print("\nInternal failures:")
        for rows in results.values():
            for t, o, _msg in rows:
                if o == "failed" and internal(t):
                    print(f"- {t} ({internal(t)})")
        print("\nPublic failures:")
        for rows in results.values():
            for t, o, msg in rows:
                if o == "failed" and not internal(t):
                    print(f"- {t}: {msg}")


if __name__ == "__main__":
    main()
