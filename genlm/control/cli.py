"""The `genlm-control` command line: constrained generation by SMC from a shell.

    genlm-control generate --prompt "Numbers: " --regex "[0-9]+( [0-9]+)*" --particles 10

The model defaults to the embedded one, so the command runs offline. Bad input exits
with status 2 and one line on stderr (set GENLM_CONTROL_DEBUG=1 for the traceback).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import warnings
from typing import Any, NoReturn, Sequence

SAMPLERS = ("awrs", "direct", "eager", "topk")
RESAMPLING = ("multinomial", "stratified", "systematic", "residual")


class UsageError(Exception):
    """Bad input that the command reports in one line."""


class _Parser(argparse.ArgumentParser):
    """An argument parser that reports bad arguments in one line (no usage block)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"genlm-control: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="genlm-control", description="Controlled generation from language models by SMC."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="sample from LM(x) · constraint(x) by SMC")
    gen.add_argument("--prompt", default="", help="text the model continues")
    constraint = gen.add_mutually_exclusive_group()
    constraint.add_argument("--regex", metavar="PATTERN", help="a regular expression the output matches")
    constraint.add_argument("--lark", metavar="FILE", help="a Lark grammar file the output parses under")
    constraint.add_argument("--json-schema", metavar="FILE", help="a JSON Schema file the output is valid under")
    gen.add_argument("--model", default=None, help="model name or path (default: the embedded model)")
    gen.add_argument("--backend", default=None, help="hf, vllm or mock (default: vllm with CUDA, else hf)")
    gen.add_argument("--sampler", choices=SAMPLERS, default="awrs", help="token sampler (default: awrs)")
    gen.add_argument("--top-k", type=int, default=5, help="K for --sampler topk")
    gen.add_argument("--particles", type=int, default=10, help="number of particles")
    gen.add_argument("--ess-threshold", type=float, default=0.5, help="resample when ESS/N falls below this")
    gen.add_argument("--max-tokens", type=int, default=32, help="maximum tokens per sequence, EOS included")
    gen.add_argument("--resampling", choices=RESAMPLING, default="multinomial")
    gen.add_argument("--seed", type=int, default=None, help="seed for a reproducible run")
    gen.add_argument("--record", metavar="FILE", help="write the run's record (JSON) here")
    gen.add_argument("--json", action="store_true", help="print the result as JSON")
    return parser


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path!r}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read {path!r}: not UTF-8 text ({exc.reason})") from exc


def _item_constraint(args: argparse.Namespace) -> Any:
    """The byte-level constraint named on the command line, or None."""
    from genlm.control import BoolCFG, BoolFSA, JsonSchema

    if args.regex is not None:
        return BoolFSA.from_regex(args.regex)
    if args.lark is not None:
        return BoolCFG.from_lark(_read(args.lark))
    if args.json_schema is not None:
        text = _read(args.json_schema)
        try:
            schema = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{args.json_schema!r} is not JSON: {exc}") from exc
        return JsonSchema(schema)
    return None


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
    if args.particles < 1:
        raise UsageError(f"--particles must be ≥ 1, got {args.particles}")
    if args.max_tokens < 1:
        raise UsageError(f"--max-tokens must be ≥ 1, got {args.max_tokens}")
    if not 0.0 <= args.ess_threshold <= 1.0:
        raise UsageError(f"--ess-threshold must lie in [0, 1], got {args.ess_threshold}")
    if args.top_k < 1:
        raise UsageError(f"--top-k must be ≥ 1, got {args.top_k}")


async def generate(args: argparse.Namespace) -> dict:
    """Run the generation described by `args` and return the result as a dict."""
    from genlm.control import PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    _check(args)
    item = _item_constraint(args)
    model = args.model or EMBEDDED_MODEL
    llm = PromptedLLM.from_name(model, backend=args.backend)
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
    finally:
        sampler.cleanup()
    live = [(text, p) for text, p in seqs.decoded_posterior.items() if p > 0]  # 0.0 entries: dead particles
    posterior = sorted(live, key=lambda kv: -kv[1])
    return {
        "model": model,
        "prompt": args.prompt,
        "log_ml": float(seqs.log_ml),
        "ess": float(seqs.ess),
        "posterior": [{"text": text, "probability": float(p)} for text, p in posterior],
    }


def render_table(result: dict) -> str:
    lines = [f"log_ml = {result['log_ml']:.4f}   ESS = {result['ess']:.2f}", "", "probability  text"]
    for row in result["posterior"]:
        lines.append(f"{row['probability']:11.4f}  {row['text']!r}")
    if not result["posterior"]:
        lines.append("(no particle completed with positive weight)")
    return "\n".join(lines)


def _quiet_backends() -> None:
    """Keep stderr for our progress bar and errors: no weight-loading bars or
    deprecation notices from the model libraries."""
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover - transformers is a dependency
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `genlm-control` console script."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not os.environ.get("GENLM_CONTROL_DEBUG"):
        _quiet_backends()
    args = build_parser().parse_args(argv)
    try:
        result = asyncio.run(generate(args))
    except (UsageError, ValueError, TypeError, OSError, ImportError, RuntimeError) as exc:
        if os.environ.get("GENLM_CONTROL_DEBUG"):
            raise
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"genlm-control: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("genlm-control: interrupted", file=sys.stderr)
        return 130
    print(json.dumps(result, indent=2) if args.json else render_table(result))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
