"""The `genlm-control` command line: constrained generation by SMC from a shell.

    genlm-control generate --prompt "Numbers: " --regex "[0-9]+( [0-9]+)*" --particles 10

The model defaults to the embedded one, so the command runs offline. Bad input exits
with status 2 and one line on stderr before any model is loaded (set
GENLM_CONTROL_DEBUG=1 for the traceback). A result is never lost: when the run's
record (`--record`) cannot be written after the run, the result is printed all the
same, the failure is reported on stderr, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import stat
import sys
import warnings
from typing import Any, NoReturn, Sequence

from genlm.control._cli_embedded import (
    end_process,
    one_thread_before_torch,
    one_torch_thread,
    ran_embedded_forward,
)
from genlm.control._cli_embedded import load as _load
from genlm.control.embedded import ALIASES, EMBEDDED_MODEL, resolve
from genlm.control.smc.record_file import RecordNotWrittenWarning, check_output_path

SAMPLERS = ("awrs", "direct", "eager", "topk")
RESAMPLING = ("multinomial", "stratified", "systematic", "residual")
# The accepted range of each integer option: past it a run cannot fit in memory or time.
BOUNDS = {
    "particles": (1, 10_000),
    "max_tokens": (1, 100_000),
    "top_k": (1, 10_000),
    "seed": (0, 2**63 - 1),
}
MAX_INPUT_BYTES = 8 * 2**20  # the largest --lark / --json-schema file read


class UsageError(Exception):
    """Bad input that the command reports in one line."""


class _Parser(argparse.ArgumentParser):
    """An argument parser that reports bad arguments in one line (no usage block)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"genlm-control: error: {message} (see {self.prog} --help)\n")


class _DefaultsFormatter(argparse.HelpFormatter):
    """Help that ends each option's line with its default, where it has one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "(default" in text or default in (None, False, argparse.SUPPRESS) or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)".strip()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="genlm-control", description="Controlled generation from language models by SMC."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser(
        "generate", help="sample from LM(x) · constraint(x) by SMC", formatter_class=_DefaultsFormatter
    )
    gen.add_argument("--prompt", default="", help="text the model continues (default: empty)")
    constraint = gen.add_mutually_exclusive_group()
    constraint.add_argument("--regex", metavar="PATTERN", help="a regular expression the output matches")
    constraint.add_argument("--lark", metavar="FILE", help="a Lark grammar file the output parses under")
    constraint.add_argument("--json-schema", metavar="FILE", help="a JSON Schema file the output is valid under")
    gen.add_argument(
        "--json-spelling", choices=("canonical", "compact", "any"), default=None,
        help="with --json-schema: how the document is spelled outside its strings "
        "(canonical: no whitespace, strings as a JSON writer writes them; compact: no "
        "whitespace; any: RFC 8259 whitespace and escapes) (default: canonical)",
    )
    gen.add_argument("--model", default=None, help="model name or path (default: the embedded model)")
    gen.add_argument("--backend", default=None, help="hf, vllm or mock (default: vllm with CUDA, else hf)")
    gen.add_argument("--sampler", choices=SAMPLERS, default="awrs", help="token sampler")
    gen.add_argument("--top-k", type=int, default=5, help="K for --sampler topk")
    gen.add_argument("--particles", type=int, default=10, help="number of particles")
    gen.add_argument("--ess-threshold", type=float, default=0.5, help="resample when ESS/N falls below this")
    gen.add_argument("--max-tokens", type=int, default=32, help="maximum tokens per sequence, EOS included")
    gen.add_argument("--resampling", choices=RESAMPLING, default="multinomial", help="resampling scheme")
    gen.add_argument("--seed", type=int, default=None, help="seed for a reproducible run (default: none)")
    gen.add_argument("--record", metavar="FILE", help="write the run's record (JSON) here")
    gen.add_argument("--json", action="store_true", help="print the result as JSON")
    return parser


def _read(path: str) -> str:
    """The UTF-8 text of a regular file of at most `MAX_INPUT_BYTES` (never a pipe or
    device, which could block or never end)."""
    try:  # O_NONBLOCK: opening a pipe with no writer returns at once instead of waiting
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise UsageError(f"cannot read {path!r}: not a regular file")
            data = fh.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {path!r}: {exc.strerror or exc}") from exc
    if len(data) > MAX_INPUT_BYTES:
        raise UsageError(f"cannot read {path!r}: larger than {MAX_INPUT_BYTES // 2**20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read {path!r}: not UTF-8 text ({exc.reason})") from exc


def _item_constraint(args: argparse.Namespace) -> Any:
    """The byte-level constraint named on the command line, or None.

    Each constraint class is imported only when named: the grammar library costs
    seconds to import and a regex or a schema does not need it."""
    if args.json_spelling is not None and args.json_schema is None:
        raise UsageError("--json-spelling applies to --json-schema only")
    if args.regex is not None:
        from genlm.control.constraints.fsa.wfsa import BoolFSA

        return BoolFSA.from_regex(args.regex)
    if args.lark is not None:
        return _lark(args.lark)
    if args.json_schema is not None:
        from genlm.control.constraints.json_schema.json import JsonSchema

        text = _read(args.json_schema)
        try:
            schema = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{args.json_schema!r} is not JSON: {exc}") from exc
        except RecursionError:
            raise UsageError(f"{args.json_schema!r} is JSON nested too deeply") from None
        return JsonSchema(schema, spelling=args.json_spelling or "canonical")
    return None


def _lark(path: str) -> Any:
    """The grammar of the file at `path`; a relative `%import .name` reads `name.lark`
    from the file's folder, never from the working folder. The grammar is read (and a
    bad one reported) before the grammar library, which takes seconds, is imported."""
    from genlm.control.constraints.cfg import read_lark

    text, base_dir = _read(path), os.path.dirname(os.path.abspath(path))
    read_lark(text, base_dir)
    from genlm.control.constraints.cfg.wcfg import BoolCFG

    return BoolCFG.from_lark(text, base_dir=base_dir)


def _sampler(args: argparse.Namespace, llm: Any, item: Any) -> Any:
    from genlm.control import AWRS, direct_token_sampler, eager_token_sampler, topk_token_sampler

    if item is None:
        return direct_token_sampler(llm)
    if args.sampler == "eager":
        return eager_token_sampler(llm, item)
    if args.sampler == "topk":
        return topk_token_sampler(llm, item, K=args.top_k)
    condition = item.coerce(llm, f=b"".join)
    if args.sampler == "direct":
        return direct_token_sampler(llm * condition)
    return AWRS(llm, condition)


def _check(args: argparse.Namespace) -> None:
    """Every numeric option within its documented range (`BOUNDS`, [0, 1])."""
    for name, (lo, hi) in BOUNDS.items():
        value = getattr(args, name)
        if value is not None and not lo <= value <= hi:
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} must be an integer in [{lo}, {hi}], got {value}")
    if not 0.0 <= args.ess_threshold <= 1.0:  # also false for NaN
        raise UsageError(f"--ess-threshold must lie in [0, 1], got {args.ess_threshold}")


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _check_record(args: argparse.Namespace, model: str) -> None:
    """`--record` names a writable path (see `record_file.check_output_path`) that is
    none of this invocation's inputs: the grammar or schema file, or a file of the
    model's folder."""
    if args.record is None:
        return
    try:
        check_output_path(args.record, what="--record")
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    for flag in ("lark", "json_schema"):
        source = getattr(args, flag)
        if source is not None and _same_file(args.record, source):
            option = "--" + flag.replace("_", "-")
            raise UsageError(f"--record {args.record!r} is the {option} input file; refusing to overwrite it")
    folder = resolve(model)
    if os.path.isdir(folder):
        inside = os.path.realpath(os.path.dirname(os.path.abspath(args.record)))
        root = os.path.realpath(folder)
        if os.path.commonpath([inside, root]) == root:
            raise UsageError(f"--record {args.record!r} is inside the model's folder; refusing to write there")


def _offline() -> str | None:
    """The environment variable that turns downloads off, if one does."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"}:
            return name
    return None


def _in_hf_cache(name: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        files = ("config.json", "tokenizer_config.json", "tokenizer.json")
        return any(isinstance(try_to_load_from_cache(name, f), str) for f in files)
    except Exception:  # an invalid repository id, or no huggingface_hub: not cached
        return False


def _check_model(model: str) -> None:
    """Offline, a model must be the embedded one, a local folder, or in the HF cache:
    fail at once rather than after the hub client's retries."""
    offline = _offline()
    if model in ALIASES or os.path.isdir(model) or offline is None or _in_hf_cache(model):
        return
    raise UsageError(
        f"model {model!r} is not available offline: it is not the embedded model "
        f"({EMBEDDED_MODEL!r}), a local model folder, or in the Hugging Face cache "
        f"({offline} is set)"
    )


def preflight(args: argparse.Namespace) -> str:
    """Check the arguments before any model is loaded; return the model's name.

    Raises:
        UsageError: naming the first bad argument.
    """
    model = args.model or EMBEDDED_MODEL
    _check(args)
    _check_record(args, model)
    _check_model(model)
    return model


_FROM_ARGS = object()


async def generate(args: argparse.Namespace, item: Any = _FROM_ARGS) -> dict:
    """Run the generation described by `args` and return the result as a dict.

    Args:
        item: the byte-level constraint, when already built from `args` (None: none).

    A record that cannot be written after the run is reported by a
    `RecordNotWrittenWarning` (the result is returned all the same)."""
    model = preflight(args)
    if item is _FROM_ARGS:
        item = _item_constraint(args)
    with one_torch_thread(model, args.backend):
        return await _generate(args, model, item)


async def _generate(args: argparse.Namespace, model: str, item: Any) -> dict:
    llm = _load(model, args.backend)
    llm.set_prompt_from_str(args.prompt)
    sampler = _sampler(args, llm, item)
    try:
        seqs = await sampler.smc(
            n_particles=args.particles,
            ess_threshold=args.ess_threshold,
            max_tokens=args.max_tokens,
            resampling_method=args.resampling,
            seed=args.seed,
            json_path=args.record,
        )
        return {
            "model": model,
            "prompt": args.prompt,
            "log_ml": float(seqs.log_ml),
            "ess": float(seqs.ess_before_resample),  # the run's diagnostic, not N after a resample
            "deaths": seqs.deaths.as_dict(),
            "posterior": [{"text": text, "probability": float(p)} for text, p in seqs.finished_texts()],
            "particles_without_mass": seqs.n_without_mass,
        }
    finally:
        sampler.cleanup()
        # a backend that holds an engine (vLLM: its driver thread, its engine core) is
        # shut down here, not by the interpreter's teardown, where a thread still in
        # the engine's native code aborted the process now and then
        close = getattr(llm.model, "close", None)
        if callable(close):
            close()


def render_table(result: dict) -> str:
    """The finished texts with mass, heaviest first, then one line counting the
    particles left out (weight zero or unfinished)."""
    lines = [f"log_ml = {result['log_ml']:.4f}   ESS = {result['ess']:.2f}", "", "probability  text"]
    for row in result["posterior"]:
        lines.append(f"{row['probability']:11.4f}  {row['text']!r}")
    rest = result.get("particles_without_mass", 0)
    if not result["posterior"]:
        lines.append("(no particle completed with positive weight)")
    elif rest:
        lines.append(f"({rest} more particle{'s' if rest != 1 else ''} with weight zero or unfinished, not shown)")
    return "\n".join(lines)


def _quiet_backends() -> None:
    """Keep stderr for our progress bar and errors: no weight-loading bars or
    deprecation notices from the model libraries."""
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover - transformers is a dependency
        pass


def _run(args: argparse.Namespace, item: Any) -> tuple[dict, str | None]:
    """The result, and why the record was not written (None when it was, or none was asked)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RecordNotWrittenWarning)
        result = asyncio.run(generate(args, item))
    failure = None
    for w in caught:
        if issubclass(w.category, RecordNotWrittenWarning):
            failure = f"the record was not written to {w.message.path!r}: {w.message.reason}"
        else:
            # the user's line is the command: no file, line or source of ours
            print(f"genlm-control: warning: {w.message}", file=sys.stderr)
    return result, failure


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `genlm-control` console script.

    Called without `argv` (as the console script and `python -m genlm.control` call
    it) after a run of the embedded model's plain-torch forward (`EmbeddedTransformer`),
    it ends the process itself once the output is flushed (`_cli_embedded.end_process`).

    Returns:
        0 on success; 1 when the result was printed but the record could not be
        written; 2 for bad input (one line on stderr); 130 when interrupted.
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout is the result's
    args = build_parser().parse_args(argv)
    one_thread_before_torch(args.model or EMBEDDED_MODEL, args.backend)
    try:
        # Every argument and the constraint are checked before the model libraries
        # (torch, transformers) are imported: bad input fails in a blink.
        preflight(args)
        item = _item_constraint(args)
        if not os.environ.get("GENLM_CONTROL_DEBUG"):
            _quiet_backends()
        result, failure = _run(args, item)
    except (UsageError, ValueError, TypeError, OSError, ImportError, RuntimeError) as exc:
        if os.environ.get("GENLM_CONTROL_DEBUG"):
            raise
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"genlm-control: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("genlm-control: interrupted", file=sys.stderr)
        return 130
    print(json.dumps(result, indent=2) if args.json else render_table(result), flush=True)
    code = 0
    if failure is not None:
        print(f"genlm-control: error: {failure}", file=sys.stderr)
        code = 1
    if argv is None and ran_embedded_forward(args.model or EMBEDDED_MODEL, args.backend):
        end_process(code)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
