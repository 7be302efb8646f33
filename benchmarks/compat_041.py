"""Run genlm-control 0.4.1's own test suite against this package.

The 0.4.1 sdist is downloaded from the package registry at run time (its tests are
never copied into this repository), unpacked into a temporary directory, and each of
its test files is run by pytest in a subprocess with this worktree first on
``PYTHONPATH``. "gpt2" and "openai-community/gpt2" are served by the embedded model:
the tests run with the temporary directory as working directory, where those names
are links to `genlm.control.embedded.model_path()` (Hugging Face loaders take an
existing directory before a Hub name), and ``HF_HUB_OFFLINE=1``, so nothing is
fetched from the network. 0.4.1's test-only dependencies that this environment lacks
(`TEST_DEPS`) are installed with pip into the unpacked directory, never into the
running environment.

Prints a table by test file: passed, failed, and of the failures how many test 0.4.1
internals that our public API does not promise (named by the `STUBS` placeholders, a
private attribute, or the `INTERNALS` list below), how many need a model that cannot
be had offline (`OFFLINE`), and how many are public; then each failure by class.

Usage:
    python benchmarks/compat_041.py [--keep DIR] [--only SUBSTRING] [--timeout S] [--jobs N] [--package DIR]

With `--jobs N`, N test files run at once (each in its own process, so the results
are those of running them one by one); the files known to be long (`LONG`) start
first.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSION = "0.4.1"

# Failures that test 0.4.1's internals, not its public API: (substring of the test
# id "file::test", the internal it reaches). A failing test whose id contains the
# substring is counted as an internal failure.
INTERNALS: list[tuple[str, str]] = [
    ("test_typing.py::", "genlm.control.typing helpers"),
    ("test_smc_model.py::test_smc_record", "sampler.smc_record"),
    ("test_coerce.py::test_advance_lane", "internal coercion lanes"),
    ("test_coerce.py::test_trie_lane", "internal coercion lanes"),
    ("test_canonical.py::test_set_overrides", "CanonicalTokenization.canonicality_filter (FastCanonicalityFilterBPE)"),
    ("test_canonical.py::test_from_llm_extract_merges_slow_tokenizer", "FastCanonicalityFilterBPE._merges"),
    ("test_canonical.py::test_from_llm_duplicate_byte_error", "canonical.decode_vocab, FastCanonicalityFilterBPE"),
]

# Test files that need a model that is not available offline (counted apart).
OFFLINE: list[tuple[str, str]] = [
    ("test_mlx.py::", "an MLX model"),
    ("test_harmony.py::test_harmony_awrs_constrained_sampling", "gpt-oss-20b's weights (a CUDA GPU)"),
    ("test_harmony.py::test_harmony_sampling_from_product", "gpt-oss-20b's weights (a CUDA GPU)"),
    ("test_duplicate_byte_strings.py::", "CodeLlama/Mistral/Gemma tokenizers"),
    # GPT-2 itself: the embedded model that serves "gpt2" has its own 4096 tokens (EOS id
    # 0) and reads 256 positions, so tests that name GPT-2's token ids or tokens fail.
    ("test_llm.py::test_new_eos_tokens", "GPT-2's token ids (ids up to 50256)"),
    ("test_llm.py::test_spawn", "GPT-2's token ids (b'!' is id 0)"),
    ("test_canonical.py::test_init", "GPT-2's tokens (b' city')"),
    ("test_canonical.py::test_complete_non_canonical", "GPT-2's tokens (b'To', b'ken')"),
    ("test_canonical.py::test_logw_next_canonical", "GPT-2's tokens (b'Token', b'ization')"),
]

# Failure messages that say a test needs GPT-2 itself (see `OFFLINE`).
OFFLINE_MESSAGES: list[tuple[str, str]] = [
    ("over the model's limit of 256 positions", "GPT-2's 1024 positions (the embedded model reads 256)"),
]

# Public failures that are a difference from 0.4.1 kept on purpose (docs/compat-041.md,
# "Differences from 0.4.1"): (substring of the test id, the difference). They stay in
# the "public" column; the list of public failures names the difference.
DIFFERENCES: list[tuple[str, str]] = [
    ("test_json.py::test_rejects_duplicated_key", "a repeated key jsonschema accepts is accepted"),
    ("test_json.py::test_accepts_basic_integer_list", "JSON whitespace (tab, CR) after a value"),
    ("test_json.py::test_long_whitespace_at_start_is_rejected", "any amount of JSON whitespace"),
    ("test_json.py::test_no_double_newline_after_start", "any amount of JSON whitespace"),
    ("test_awrs.py::test_invalid_arguments", "AWRS takes max_accepts=1 and max_rejects=1"),
    ("test_seq_sampler.py::test_record_increments_rebuild_each_context", "json_path writes our record"),
    ("test_coerce.py::test_coerced_with_token_vocab", "Coerced over a Token vocabulary"),
    ("test_ensemble.py::test_zero_prefix_raises", "Ensemble row after a zero-weight context"),
    ("test_llm.py::test_prompt_ids_is_per_asyncio_task", "prompt_ids belongs to the PromptedLLM"),
    ("test_mp.py::test_mp_spawn", "MultiProcPotential.spawn() returns a copy"),
    ("test_smc_model.py::test_terminate_when_appends_eos", "terminate_when closes with the logw_eos correction"),
    ("test_draw_batch.py::test_exception_fails_its_group", "a malformed LazyWeights is rejected when made"),
]

MODEL_NAMES = ("gpt2", "openai-community/gpt2")

# gpt-oss's tokenizer is served by a stand-in: the embedded model's tokenizer with
# Harmony's special tokens added (EOS `<|return|>`, a Harmony chat template), so 0.4.1's
# `test_harmony.py` runs its tokenizer-level tests; its two tests that load gpt-oss-20b's
# weights need a CUDA GPU and are counted under `OFFLINE`.
HARMONY_NAME = "unsloth/gpt-oss-20b-BF16"
HARMONY_SPECIALS = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|constrain|>", "<|call|>"]
HARMONY_TEMPLATE = (
    "{% for m in messages %}<|start|>{{ m['role'] }}<|message|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)

# Test files that take far longer than the others (0.4.1 itself as well as ours:
# `sampler/test_awrs.py` draws about two million times, 10,000 per hypothesis example),
# started first when files run in parallel.
LONG = ("sampler/test_awrs.py", "sampler/test_seq_sampler.py", "potential/test_json.py", "potential/test_bytellm.py")

# 0.4.1's test-only dependencies (its `test` extra) that its test files import, as
# (module, distribution). Those missing here are installed with pip into the unpacked
# directory's `deps/` (`pip install --target`, no dependencies) and put on the tests'
# `PYTHONPATH`; nothing is installed into the running environment.
TEST_DEPS: list[tuple[str, str]] = [
    ("hypothesis_jsonschema", "hypothesis-jsonschema"),
    ("pytest_mock", "pytest-mock"),
]

# 0.4.1 internals that its test files import at the top. Each missing one is replaced,
# in the test processes only, by a placeholder that fails when used with
# "0.4.1 internal: <name>" (calling it while pytest collects gives a value that fails
# so when used, as in a parametrize list), so that
# the other tests of the file still run and a test that uses one is counted as an
# internal failure. ("<module>": a whole module.)
STUBS: list[tuple[str, str]] = [
    ("genlm.control", "convert_to_weighted_logop"),
    ("genlm.control.potential.built_in.canonical", "FastCanonicalityFilterBPE"),
    ("genlm.control.potential.built_in.canonical", "_extract_bpe_merges"),
    *[("genlm.control.potential.built_in.json", n) for n in (
        "ARBITRARY_JSON", "FLOAT_PARSER", "FixedSetParser", "FloatParser",
        "FullValidatorJsonSchema", "Incomplete", "Input", "ParseError", "ParserPotential",
        "StringLiteralMatchingPatternParser", "StringSource", "TrivialSource",
        "WHITESPACE_PARSER", "chunk_to_complete_utf8", "json_schema_parser",
        "prune_to_validatable_prefix",
    )],
    ("genlm.control.potential.built_in.llm", "TokenMappings"),
    ("genlm.control.potential.built_in.llm", "_prompt_ids_overrides"),
    ("genlm.control.potential.harmony", "<module>"),
    ("genlm.control.potential.stateful", "<module>"),
    ("genlm.control.potential.streaming", "<module>"),
    ("genlm.control.sampler.smc_record", "<module>"),
    ("genlm.control.sampler.token", "geometric_awrs"),
    ("genlm.control.sampler.token", "recursive_awrs"),
    ("genlm.control.util", "LRUCache"),
    ("genlm.control.util", "Token"),
    ("genlm.control.util", "draw_indices"),
    ("genlm.control.util", "escape"),
    ("genlm.control.util", "load_trie"),
]

PLUGIN = """
import importlib, sys, types

MARK = "0.4.1 internal: "


def unavailable(qualname):
    # What calling a placeholder gives: a value that fails when used, so that a test
    # module whose top level (a parametrize list) calls an internal still collects.
    def fail(self, *args, **kwargs):
        raise NotImplementedError(MARK + qualname)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)  # what pytest's collection probes (`__name__`, ...)
        raise NotImplementedError(MARK + qualname + "." + name)

    ops = ("__call__", "__iter__", "__await__", "__len__", "__getitem__", "__bool__",
           "__enter__", "__aenter__", "__lt__", "__add__", "__mul__")
    body = {name: fail for name in ops}
    body["__getattr__"] = __getattr__
    body["__repr__"] = lambda self: "<0.4.1 internal " + qualname + "(...)>"
    return type("Unavailable", (), body)()


COLLECTING = [True]


def pytest_collection_finish(session):
    COLLECTING[0] = False


def placeholder(qualname):
    def call(cls, *args, **kwargs):
        if COLLECTING[0]:
            return unavailable(qualname)
        raise NotImplementedError(MARK + qualname)

    def __getattr__(cls, name):
        raise NotImplementedError(MARK + qualname + "." + name)

    meta = type("Internal", (type,), {"__getattr__": __getattr__, "__call__": call})
    # An exception class, so that `pytest.raises(Internal)` around a call of another
    # internal reports that call's placeholder failure.
    return meta(qualname.rsplit(".", 1)[-1], (Exception,), {})


class StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return placeholder(self.__name__ + "." + name)


for module, name in STUBS:
    if name == "<module>":
        try:
            importlib.import_module(module)
        except ImportError:
            sys.modules[module] = StubModule(module)
        continue
    mod = importlib.import_module(module)
    if not hasattr(mod, name):
        setattr(mod, name, placeholder(module + "." + name))


# 0.4.1's tests use pytest-mock's `mocker` (a test dependency, not ours); where it is
# not installed, a minimal one: `mocker.patch(...)` patches until the test ends.
try:
    import pytest_mock  # noqa: F401
except ImportError:
    import pytest
    import unittest.mock

    class _Mocker:
        def __init__(self):
            self._patches = []

        def patch(self, target, *args, **kwargs):
            patcher = unittest.mock.patch(target, *args, **kwargs)
            self._patches.append(patcher)
            return patcher.start()

        def stopall(self):
            while self._patches:
                self._patches.pop().stop()

    @pytest.fixture
    def mocker():
        m = _Mocker()
        yield m
        m.stopall()
"""


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


def test_deps(src: Path) -> Path:
    """`src/deps`, holding each of `TEST_DEPS` this environment lacks."""
    import importlib.util

    deps = src / "deps"
    deps.mkdir(exist_ok=True)
    sys.path.insert(0, str(deps))
    missing = [dist for mod, dist in TEST_DEPS if importlib.util.find_spec(mod) is None]
    sys.path.remove(str(deps))
    if missing:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(deps), *missing],
            check=True,
        )
    return deps


def link_models(where: Path) -> None:
    """Make each of `MODEL_NAMES` a directory link to the embedded model under `where`."""
    sys.path.insert(0, str(ROOT))
    from genlm.control.embedded import model_path

    for name in MODEL_NAMES:
        link = where / name
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(model_path(), target_is_directory=True)
    stand_in = where / HARMONY_NAME
    if not (stand_in / "tokenizer_config.json").exists():
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_path())
        tok.add_special_tokens({"additional_special_tokens": HARMONY_SPECIALS})
        tok.eos_token = "<|return|>"
        tok.chat_template = HARMONY_TEMPLATE
        tok.save_pretrained(stand_in)


def write_plugin(src: Path) -> None:
    """The pytest plugin that installs the `STUBS` placeholders, in `src`."""
    (src / "compat041_stubs.py").write_text(f"STUBS = {STUBS!r}\n{PLUGIN}")


def run_file(src: Path, test_file: Path, timeout: float, package: Path) -> list[tuple[str, str, str]]:
    """(test id, outcome, message) for each test in `test_file`; a file that times out
    or does not collect reports one row for the whole file."""
    report = src / (test_file.stem + ".xml")
    paths = [str(package), str(src), str(src / "deps")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    rel = test_file.relative_to(src)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
           "-o", "asyncio_mode=auto", "-p", "compat041_stubs", f"--junitxml={report}", str(rel)]
    report.unlink(missing_ok=True)
    # Its own session, so that a timeout kills every process the tests started.
    proc = subprocess.Popen(cmd, cwd=src, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return [(f"{rel.name}::*", "failed", f"timed out after {timeout:.0f}s")]
    return parse_report(report, rel)


def parse_report(report: Path, rel: Path) -> list[tuple[str, str, str]]:
    """(test id, outcome, message) for each test case of a JUnit report."""
    if not report.exists():
        return [(f"{rel.name}::*", "failed", "no report (collection crashed)")]
    rows = []
    for case in ET.parse(report).iter("testcase"):
        name = f"{rel.name}::{case.get('name')}"
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            message = bad.get("message") or ""
            mark = re.search(r"0\.4\.1 internal: ([\w.]+)", message + "\n" + (bad.text or ""))
            first = (message.splitlines() or [""])[0][:110]
            rows.append((name, "failed", f"0.4.1 internal: {mark.group(1)}" if mark else first))
        elif case.find("skipped") is not None:
            rows.append((name, "skipped", ""))
        else:
            rows.append((name, "passed", ""))
    return rows


def internal(test_id: str, message: str = "") -> str | None:
    """The internal a failing test reaches, or None for a public-API test: a
    placeholder of `STUBS` it used, a private attribute it read, or an `INTERNALS` entry."""
    if message.startswith("0.4.1 internal: "):
        return message[len("0.4.1 internal: "):]
    private = re.search(r"has no attribute '(_\w+)'", message)
    if private:
        return f"private attribute {private.group(1)}"
    for needle, what in INTERNALS:
        if needle in test_id:
            return what
    return None


def offline(test_id: str, message: str = "") -> str | None:
    """The model a test needs that cannot be had offline, or None."""
    found = next((what for needle, what in OFFLINE if needle in test_id), None)
    return found or next((what for needle, what in OFFLINE_MESSAGES if needle in message), None)


def table(results: dict[str, list[tuple[str, str, str]]]) -> str:
    """A Markdown table by file, with totals."""
    lines = [
        "| test file | passed | failed | internals | no offline model | public |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    tot = [0] * 5
    for path, rows in sorted(results.items()):
        bad = [(t, m) for t, o, m in rows if o == "failed"]
        model = sum(offline(t, m) is not None for t, m in bad)
        inner = sum(offline(t, m) is None and internal(t, m) is not None for t, m in bad)
        row = [sum(o == "passed" for _, o, _ in rows), len(bad), inner, model, len(bad) - inner - model]
        tot = [a + b for a, b in zip(tot, row)]
        lines.append(f"| {path} | " + " | ".join(map(str, row)) + " |")
    lines.append("| **total** | " + " | ".join(f"**{v}**" for v in tot) + " |")
    return "\n".join(lines)


def head(package: Path) -> str:
    """The commit checked out at `package` (with "+changes" when its tree differs), or "?"."""
    try:
        commit = subprocess.run(["git", "-C", str(package), "rev-parse", "--short=12", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(package), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return commit + ("+changes" if dirty else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", help="unpack into this directory and keep it")
    ap.add_argument("--only", help="run only test files whose path contains this")
    ap.add_argument("--package", default=str(ROOT), help="checkout whose genlm.control is tested")
    ap.add_argument("--reports", action="store_true",
                    help="only tabulate the reports an earlier run left in --keep DIR")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per test file")
    ap.add_argument("--jobs", type=int, default=1, help="test files run at once")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(args.keep) if args.keep else Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        existing = base / f"genlm_control-{VERSION}"
        src = existing if existing.is_dir() else download(base)
        link_models(src)
        write_plugin(src)
        if not args.reports:
            test_deps(src)
        files = sorted((src / "tests").rglob("test_*.py"))
        if args.only:
            files = [f for f in files if args.only in str(f.relative_to(src))]
        results: dict = {}
        skipped: list[str] = []
        keys = {f: str(f.relative_to(src / "tests")) for f in files}
        if args.reports:
            for f, key in keys.items():
                if (src / (f.stem + ".xml")).exists():
                    results[key] = parse_report(src / (f.stem + ".xml"), f.relative_to(src))
                else:
                    skipped.append(key)
        else:
            print(f"# genlm-control {VERSION}'s tests against {args.package} at {head(Path(args.package))}, "
                  f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, --timeout {args.timeout:.0f} --jobs {args.jobs}",
                  flush=True)

            def one(f: Path):
                start = time.monotonic()
                rows = run_file(src, f, args.timeout, Path(args.package))
                print(f"{keys[f]}: done in {time.monotonic() - start:.0f}s", file=sys.stderr, flush=True)
                return keys[f], rows

            order = sorted(files, key=lambda f: keys[f] not in LONG)
            with ThreadPoolExecutor(max(1, args.jobs)) as pool:
                results = dict(pool.map(one, order))
        print(table(results))
        if skipped:
            print("\nNo report (not run): " + ", ".join(skipped))
        failures = [(t, m) for rows in results.values() for t, o, m in rows if o == "failed"]
        print("\nFailures that need a model not available offline:")
        for t, m in failures:
            if offline(t, m):
                print(f"- {t} ({offline(t, m)})")
        print("\nFailures that test 0.4.1 internals:")
        for t, m in failures:
            if not offline(t, m) and internal(t, m):
                print(f"- {t} ({internal(t, m)})")
        print("\nPublic failures:")
        for t, m in failures:
            if not offline(t, m) and not internal(t, m):
                kept = next((what for needle, what in DIFFERENCES if needle in t), None)
                print(f"- {t}: {m}" + (f" (difference from 0.4.1: {kept})" if kept else ""))


if __name__ == "__main__":
    main()
