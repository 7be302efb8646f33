"""Why SMC: the exact posterior, SMC's, and local masking's, side by side.

For a few small languages after a prompt, on the embedded model:

- the exact posterior `p(s) ∝ Σ_{x spells s} LM(x) · 1[s ∈ L]` and `log Z`, by
  `genlm.control.testing.enumerate_target`;
- the local-masking distribution `q`, computed exactly: at each step the LM's
  next-token distribution renormalised over the tokens the constraint allows (EOS
  included), `q(x) = Π_i LM(x_i | x_<i) 1[x_≤i allowed] / Σ_{t allowed} LM(t | x_<i)`,
  which is what a token-masking engine samples; its samples converge to `q`, not `p`;
- SMC (AWRS, `ess_threshold=0.5`) over seeds and particle counts `N`: the total
  variation distance `TV(p̂, p) = ½ Σ_s |p̂(s) - p(s)|` of each run's posterior, the
  TV of `n` samples drawn from `q` for comparison, and `Ẑ / Z = exp(log_ml - log Z)`.

Every language is finite and `max_tokens` exceeds its longest string in bytes, so no
tokenization is cut by the budget: SMC's target is the whole language, as masking's is.

    python benchmarks/why_smc.py [--seeds 20] [--particles 1,3,10,30,100] [--only digits]
                                 [--json why_smc.json] [--plots docs/img]
    python benchmarks/why_smc.py --from-json docs/img/why-smc.json [--plots docs/img]

prints one markdown table per language; `--plots` writes `why-smc-tv.svg`,
`why-smc-logz.svg` and `why-smc-posterior.svg` there (needs matplotlib: `pip install -e
".[bench]"`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import time
from dataclasses import dataclass

import numpy as np

from genlm.control import AWRS, BoolFSA, PromptedLLM
from genlm.control._device import to_host
from genlm.control.embedded import EMBEDDED_MODEL
from genlm.control.testing import enumerate_target
from genlm.control.testing.exact import text_of


@dataclass(frozen=True)
class Language:
    name: str
    prompt: str
    regex: str
    max_tokens: int


LANGUAGES = [
    Language("digits", "The value of x is", r" [0-9]{1,2}\.", 5),
    Language("answers", "The answer is", r" (yes|no|maybe|true|false)\.", 8),
    Language("keywords", "The keyword is", r" (def|class|return|import|from)", 8),
]


async def masking_distribution(
    potential, condition, max_tokens: int, chunk: int = 64
) -> dict[bytes, float]:
    """`q(s)`: the law of local masking's samples, by enumeration.

    At a context `x` the product row `potential.logw_next(x) + condition.logw_next(x)`
    is the LM's row where the (Boolean) condition allows a token and `-inf` elsewhere;
    masking draws from it renormalised, so `log q(x t) = log q(x) + row[t] - logsumexp(row)`.

    Raises:
        ValueError: the condition's rows are not Boolean (0 or `-inf`), or the budget
            cuts a path (a context of `max_tokens - 1` tokens still allows a token).
    """
    target = potential * condition
    vocab_eos = target.vocab_eos
    eos = len(vocab_eos) - 1
    level, out = [((), 0.0)], {}
    while level:
        deeper = []
        for at in range(0, len(level), chunk):
            part = level[at : at + chunk]
            contexts = [list(x) for x, _ in part]
            rows = await target.batch_logw_next(contexts)
            checks = await condition.batch_logw_next(contexts)
            for (x, logq), row, check in zip(part, rows, checks):
                values = np.asarray(to_host(check.weights), dtype=np.float64)
                if not np.all((values == 0) | (values == -np.inf)):
                    raise ValueError("masking needs a Boolean condition (rows of 0 and -inf)")
                row = np.asarray(to_host(row.weights), dtype=np.float64)
                logq_next = row - np.logaddexp.reduce(row)
                if row[eos] > -np.inf:
                    key = text_of(x)
                    out[key] = out.get(key, 0.0) + math.exp(logq + logq_next[eos])
                allowed = np.flatnonzero(row[:eos] > -np.inf)
                if len(x) == max_tokens - 1 and len(allowed):
                    raise ValueError(
                        f"max_tokens={max_tokens} cuts the language after {text_of(x)!r}"
                    )
                deeper += [(x + (vocab_eos[i],), logq + float(logq_next[i])) for i in allowed]
        level = deeper
    return out


def tv(p: dict, q: dict) -> float:
    """`½ Σ_s |p(s) - q(s)|` over the union of supports."""
    return 0.5 * sum(abs(p.get(s, 0.0) - q.get(s, 0.0)) for s in set(p) | set(q))


def empirical(q: dict, n: int, rng: np.random.Generator) -> dict:
    """The empirical law of `n` draws from `q`."""
    keys = list(q)
    probs = np.array([q[k] for k in keys])
    counts = rng.multinomial(n, probs / probs.sum())
    return {k: c / n for k, c in zip(keys, counts) if c}


def smc_posterior(seqs) -> dict[bytes, float]:
    """A run's posterior over the finished texts, keyed by bytes like the exact one."""
    return {text.encode(): p for text, p in seqs.finished_texts()}


def pooled_posterior(runs: list, ratio: np.ndarray) -> dict:
    """The runs' posteriors pooled by their `Ẑ` (`ratio = Ẑ / Z`): a consistent
    estimate of `p` as the seeds grow."""
    weights = ratio / ratio.sum() if ratio.sum() > 0 else ratio
    pooled: dict = {}
    for w, r in zip(weights, runs):
        for s, p in smc_posterior(r).items():
            pooled[s] = pooled.get(s, 0.0) + w * p
    return pooled


def row(n: int, runs: list, exact, q: dict, wall: float) -> tuple[dict, dict]:
    """The table's row for `n` particles, and the runs' pooled posterior."""
    seeds = len(runs)
    tvs = [tv(smc_posterior(r), exact.posterior) for r in runs]
    ratio = np.array([math.exp(r.log_ml - exact.log_z) for r in runs])
    rng = np.random.default_rng(n)
    masked = [tv(empirical(q, n, rng), exact.posterior) for _ in range(seeds)]
    pooled = pooled_posterior(runs, ratio)
    out = dict(
        n=n,
        tv_mean=float(np.mean(tvs)),
        tv_sd=float(np.std(tvs, ddof=1)) if seeds > 1 else 0.0,
        masking_tv_mean=float(np.mean(masked)),
        ratio_mean=float(ratio.mean()),
        ratio_se=float(ratio.std(ddof=1) / math.sqrt(seeds)) if seeds > 1 else 0.0,
        log_ml_minus_log_z_mean=float(np.mean([r.log_ml - exact.log_z for r in runs])),
        pooled_tv=tv(pooled, exact.posterior),
        wall_s=wall,
    )
    return out, pooled


async def study(lang: Language, particles: list[int], seeds: int) -> dict:
    """Every number of one language: the exact target, masking's law, SMC's rows."""
    llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
    llm.set_prompt_from_str(lang.prompt)
    condition = BoolFSA.from_regex(lang.regex).coerce(llm, f=b"".join)
    t0 = time.perf_counter()
    exact = await enumerate_target(llm, lang.max_tokens, condition=condition)
    q = await masking_distribution(llm, condition, lang.max_tokens)
    enumerate_s = time.perf_counter() - t0
    sampler = AWRS(llm, condition)
    rows, pooled = [], {}
    for n in particles:
        t0 = time.perf_counter()
        runs = await asyncio.gather(
            *(
                sampler.smc(n_particles=n, ess_threshold=0.5, max_tokens=lang.max_tokens, seed=s)
                for s in range(seeds)
            )
        )
        out, pooled = row(n, runs, exact, q, time.perf_counter() - t0)
        rows.append(out)
    top = sorted(exact.posterior, key=lambda s: -exact.posterior[s])[:8]
    return dict(
        language=lang.__dict__,
        seeds=seeds,
        log_z=exact.log_z,
        n_texts=len(exact.posterior),
        masking_tv=tv(q, exact.posterior),
        masking_mass=sum(q.values()),
        enumerate_s=enumerate_s,
        rows=rows,
        top=[
            dict(
                text=s.decode(),
                exact=exact.posterior[s],
                masking=q.get(s, 0.0),
                smc=pooled.get(s, 0.0),
            )
            for s in top
        ],
    )


def table(result: dict, seeds: int) -> str:
    lang = result["language"]
    lines = [
        f"### {lang['name']}: `{lang['regex']}` after {lang['prompt']!r} (max_tokens={lang['max_tokens']})",
        "",
        f"{result['n_texts']} texts; log Z = {result['log_z']:.4f}; TV(masking, exact) = {result['masking_tv']:.3f}",
        "",
        f"| N | TV of one SMC run (mean ± sd, {seeds} seeds) | TV of N masked samples | "
        f"TV of the {seeds} runs pooled | E[Ẑ/Z] ± s.e. | mean log_ml − log Z | wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['n']} | {r['tv_mean']:.3f} ± {r['tv_sd']:.3f} | {r['masking_tv_mean']:.3f} | {r['pooled_tv']:.3f} | "
            f"{r['ratio_mean']:.3f} ± {r['ratio_se']:.3f} | {r['log_ml_minus_log_z_mean']:.3f} | {r['wall_s']:.1f} |"
        )
    return "\n".join(lines)


def plot(results: list[dict], folder: str, fmt: str = "svg") -> None:
    """Write the three figures (`fmt`: svg or png) into `folder`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "why-smc"  # stable ids: a rerun changes only the data
    plt.rcParams["svg.fonttype"] = "none"  # text as text: small files
    k = len(results)
    fig, axes = plt.subplots(1, k, figsize=(4.2 * k, 3.4), squeeze=False)
    for ax, res in zip(axes[0], results):
        ns = [r["n"] for r in res["rows"]]
        ax.errorbar(
            ns,
            [r["tv_mean"] for r in res["rows"]],
            yerr=[r["tv_sd"] for r in res["rows"]],
            marker="o",
            capsize=3,
            label="SMC (AWRS), one run",
        )
        ax.plot(
            ns, [r["masking_tv_mean"] for r in res["rows"]], marker="s", label="masking, N samples"
        )
        ax.axhline(res["masking_tv"], color="C1", ls="--", lw=1, label="masking's limit TV(q, p)")
        ax.set_xscale("log")
        ax.set_ylim(0, 1)
        ax.set_xlabel("particles / samples N")
        ax.set_title(res["language"]["name"])
    axes[0][0].set_ylabel("TV distance to the exact posterior")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    _save(fig, folder, "why-smc-tv", fmt)
    plt.close(fig)

    fig, axes = plt.subplots(1, k, figsize=(4.2 * k, 3.2), squeeze=False)
    for ax, res in zip(axes[0], results):
        ns = [r["n"] for r in res["rows"]]
        ax.errorbar(
            ns,
            [r["ratio_mean"] for r in res["rows"]],
            yerr=[2 * r["ratio_se"] for r in res["rows"]],
            marker="o",
            capsize=3,
        )
        ax.axhline(1.0, color="k", lw=1, ls="--")
        ax.set_xscale("log")
        ax.set_xlabel("particles N")
        ax.set_title(f"{res['language']['name']} (log Z = {res['log_z']:.2f})")
    axes[0][0].set_ylabel("mean of exp(log_ml − log Z) ± 2 s.e.")
    fig.tight_layout()
    _save(fig, folder, "why-smc-logz", fmt)
    plt.close(fig)

    res = results[0]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    texts = [row["text"] for row in res["top"]]
    x = np.arange(len(texts))
    for j, (key, label) in enumerate(
        [("exact", "exact p"), ("smc", "SMC, runs pooled"), ("masking", "masking q")]
    ):
        ax.bar(x + (j - 1) * 0.27, [row[key] for row in res["top"]], width=0.27, label=label)
    ax.set_xticks(x, [repr(t) for t in texts], fontsize=8)
    ax.set_ylabel("probability")
    ax.set_title(
        f"{res['language']['name']}: the {len(texts)} likeliest texts (N = {res['rows'][-1]['n']})"
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, folder, "why-smc-posterior", fmt)
    plt.close(fig)


def _save(fig, folder: str, name: str, fmt: str) -> None:
    path = os.path.join(folder, f"{name}.{fmt}")
    fig.savefig(path, metadata={"Date": None} if fmt == "svg" else None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--particles", default="1,3,10,30,100")
    ap.add_argument("--only", default=None, help="comma-separated language names")
    ap.add_argument("--json", default=None, help="write every number there")
    ap.add_argument("--plots", default=None, help="write the SVG figures into this folder")
    ap.add_argument(
        "--from-json", default=None, help="print and plot the results saved there; run nothing"
    )
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            results = json.load(f)
        for result in results:
            print(table(result, result["seeds"]), "\n")
        if args.plots:
            plot(results, args.plots)
        return
    particles = [int(n) for n in args.particles.split(",")]
    chosen = [lang for lang in LANGUAGES if args.only is None or lang.name in args.only.split(",")]
    print(
        f"load average before: {os.getloadavg()[0]:.2f}  ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})"
    )
    results = []
    for lang in chosen:
        results.append(asyncio.run(study(lang, particles, args.seeds)))
        print(table(results[-1], args.seeds), "\n", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.plots:
        plot(results, args.plots)


if __name__ == "__main__":
    main()
