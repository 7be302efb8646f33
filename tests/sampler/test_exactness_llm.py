"""Exactness of the direct sampler and AWRS on the embedded model, against exact enumeration.

Target: prompt "The value is", `t(x) = LM(x) · c(x)` with `c` the regex
`" (a|an|the)( (a|an|the)){0,2}\\."` coerced to the LM's tokens, and `max_tokens = 8`:
SMC draws at most 7 tokens and forces EOS after them with the sampler's
`logw_eos = t.logw_next(x)[EOS]`, so it targets

    Z = Σ_{|x| ≤ 7} exp(t.prefix(x) + t.logw_next(x)[EOS]) = Σ_{|x| ≤ 7} t.complete(x).

The language is finite (39 strings), so the live token sequences can be enumerated
breadth first, one batched LM call per level. Each seeded SMC run's `exp(log_ml)` is
an unbiased estimate of `Z`; over `RUNS` runs the mean of `Ẑ/Z` must be within
`4σ + 0.05` of 1, with σ the standard error of that mean.

The runs use `ess_threshold=0` (importance sampling, no resampling), and
`ess_threshold=0.5` with SMC's default end twist. After "." only EOS is allowed and
the LM gives it ≈ e^-10.5, so without a twist finished particles are resampled away
in favour of longer prefixes, most of which never complete; the mean weight they
inherit comes back only in rare runs, and the mean of `Ẑ/Z` over 240 runs at 0.5 is
0.24 ± 0.06 (`end_twist=False`; see `benchmarks/awrs_exactness.py`). The default twist
charges each unfinished particle the LM's cost of ending after its own context
(given back when it finishes, so `Ẑ` stays unbiased), and the runs at 0.5 meet the
same bound as those at 0: see the test of that name.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import re

import numpy as np
import pytest
import torch
from toys import Searched, segmentations

from genlm.control import AWRS, BoolFSA, PromptedLLM, direct_token_sampler
from genlm.control.draw import counting_readbacks
from genlm.control.embedded import EMBEDDED_MODEL
from genlm.control.engine._guided_engine import EngineVocab, mask_allowed
from genlm.control.testing import ExactTarget, enumerate_target

PROMPT = "The value is"
PATTERN = r" (a|an|the)( (a|an|the)){0,2}\."
WORDS = (b"a", b"an", b"the")
MAX_TOKENS = 8
RUNS = 240
GROUP = 60  # runs gathered together: their LM forwards batch
N_PARTICLES = 6


def token_bytes(token) -> bytes:
    return getattr(token, "byte_string", token)


async def enumerate_exact(llm: PromptedLLM, condition, max_tokens: int) -> ExactTarget:
    """The target through `condition`'s rows (`genlm.control.testing.enumerate_target`)."""
    return await enumerate_target(llm, max_tokens, condition=condition)


def language() -> list[bytes]:
    """The regex's 39 strings."""
    return [
        b"".join(b" " + w for w in words) + b"."
        for n in (1, 2, 3)
        for words in itertools.product(WORDS, repeat=n)
    ]


async def brute_force(llm: PromptedLLM, max_tokens: int, chunk: int = 128) -> ExactTarget:
    """The target from the language and the LM's `batch_complete` alone (no condition)."""
    pieces: dict[bytes, list[int]] = {}
    for i, token in enumerate(llm.vocab):
        pieces.setdefault(token_bytes(token), []).append(i)
    seqs = [s for text in language() for s in segmentations(text, pieces, max_tokens - 1)]
    weights: list[float] = []
    tokens = [tuple(llm.vocab_eos[i] for i in ids) for ids in seqs]
    for start in range(0, len(tokens), chunk):
        weights += [float(w) for w in await llm.batch_complete([list(x) for x in tokens[start : start + chunk]])]
    log_z = float(np.logaddexp.reduce(weights))
    posterior: dict[bytes, float] = {}
    for x, logw in zip(tokens, weights):
        text = b"".join(token_bytes(t) for t in x)
        posterior[text] = posterior.get(text, 0.0) + math.exp(logw - log_z)
    return ExactTarget(log_z, dict(zip(tokens, weights)), posterior, len(tokens))


@pytest.fixture(scope="module")
def llm() -> PromptedLLM:
    model = PromptedLLM.from_name(EMBEDDED_MODEL)
    model.set_prompt_from_str(PROMPT)
    return model


@pytest.fixture(scope="module")
def conditions(llm):
    fsa = BoolFSA.from_regex(PATTERN)
    return {engine: fsa.coerce(llm, f=b"".join, engine=engine) for engine in (None, False)}


@pytest.fixture(scope="module")
def exact(llm, conditions) -> ExactTarget:
    """The target enumerated through the byte automaton's coercion (see the tests below
    for why not through the engine's)."""
    return asyncio.run(enumerate_exact(llm, conditions[False], MAX_TOKENS))


@pytest.fixture(scope="module")
def brute(llm) -> ExactTarget:
    return asyncio.run(brute_force(llm, MAX_TOKENS))


async def run_smc(sampler, runs: int, ess_threshold: float, group: int = GROUP, **extra) -> list:
    """`runs` seeded runs, `group` of them gathered at a time (`extra`: more keywords
    of `smc`)."""
    out = []
    for start in range(0, runs, group):
        seeds = range(start, min(start + group, runs))
        out += await asyncio.gather(
            *(
                sampler.smc(
                    n_particles=N_PARTICLES,
                    ess_threshold=ess_threshold,
                    max_tokens=MAX_TOKENS,
                    seed=s,
                    **extra,
                )
                for s in seeds
            )
        )
    return out


def summarize(runs: list, exact: ExactTarget) -> tuple[np.ndarray, dict[bytes, float], set[bytes]]:
    """`Ẑ/Z` per run; the Ẑ-weighted mass of each string over `Z`; strings off the language."""
    ratios = np.array([math.exp(seqs.log_ml - exact.log_z) for seqs in runs])
    mass: dict[bytes, float] = {}
    outside: set[bytes] = set()
    for seqs in runs:
        for context, logw in zip(seqs.contexts, seqs.log_weights):
            if logw == -math.inf:
                continue
            text = b"".join(token_bytes(t) for t in context[:-1])
            if re.fullmatch(PATTERN.encode(), text) is None:
                outside.add(text)
            share = math.exp(logw - exact.log_z) / (len(seqs.log_weights) * len(runs))
            mass[text] = mass.get(text, 0.0) + share
    return ratios, mass, outside


def make_sampler(name: str, llm, condition):
    return direct_token_sampler(llm * condition) if name == "direct" else AWRS(llm, condition)


def check_unbiased(runs: list, exact: ExactTarget) -> None:
    ratios, mass, outside = summarize(runs, exact)
    sigma = ratios.std(ddof=1) / math.sqrt(len(ratios))
    top = sorted(exact.posterior, key=exact.posterior.get, reverse=True)[:4]
    report = ", ".join(f"{s!r}: {mass.get(s, 0.0):.3f} vs {exact.posterior[s]:.3f}" for s in top)
    print(f"E[Ẑ/Z] = {ratios.mean():.3f} ± {sigma:.3f}; posterior mass {report}")
    assert not outside, f"strings off the language with positive weight: {sorted(outside)[:5]}"
    assert abs(ratios.mean() - 1.0) < 4 * sigma + 0.05, (
        f"E[Ẑ/Z] = {ratios.mean():.3f} ± {sigma:.3f}"
    )


def assert_same_target(got: ExactTarget, want: ExactTarget) -> None:
    assert got.sequences.keys() == want.sequences.keys()
    for ids, logw in want.sequences.items():
        assert got.sequences[ids] == pytest.approx(logw, abs=1e-4)


def test_enumeration_matches_brute_force(exact, brute):
    """The enumeration through the automaton's coercion equals the sum over the
    language's tokenizations scored by `LM.complete`, and pins the model's values."""
    assert_same_target(exact, brute)
    assert len(brute.sequences) == 1497
    assert exact.log_z == pytest.approx(-19.0345, abs=1e-3)
    assert exact.posterior[b" an."] == pytest.approx(0.5767, abs=1e-3)
    assert exact.posterior[b" a."] == pytest.approx(0.3573, abs=1e-3)
    assert exact.posterior[b" the."] == pytest.approx(0.0582, abs=1e-3)


def test_engine_enumeration_matches_brute_force(llm, conditions, brute):
    """`logw_next(x)[y] = prefix(x + [y]) - prefix(x)` holds for the compiled engine's
    coercion too, so enumerating through its rows finds every tokenization."""
    assert_same_target(asyncio.run(enumerate_exact(llm, conditions[None], MAX_TOKENS)), brute)


def test_enumeration_respects_max_tokens(llm, conditions):
    """With `max_tokens=3` only sequences of at most 2 tokens count: the three one-word
    strings, each as its word's token and "."."""
    short = asyncio.run(enumerate_exact(llm, conditions[False], 3))
    brute = asyncio.run(brute_force(llm, 3))
    assert short.sequences.keys() == brute.sequences.keys()
    assert all(len(ids) <= 2 for ids in short.sequences)
    assert set(short.posterior) == {b" a.", b" an.", b" the."}
    assert short.log_z == pytest.approx(brute.log_z, abs=1e-4)


def test_direct_sampler_unbiased_on_embedded_model(llm, conditions, exact):
    sampler = make_sampler("direct", llm, conditions[None])
    check_unbiased(asyncio.run(run_smc(sampler, RUNS, ess_threshold=0.0)), exact)


def test_awrs_search_unbiased_on_embedded_model(llm, conditions, exact):
    """AWRS's search path (no cheap rows: tokens drawn without replacement and checked
    in blocks, Horvitz-Thompson weights) on the real model: E[Ẑ/Z] = 1 and nothing
    off the language."""
    sampler = AWRS(llm, Searched(conditions[False]))
    assert not sampler.exact
    check_unbiased(asyncio.run(run_smc(sampler, RUNS, ess_threshold=0.0)), exact)


@pytest.mark.slow
@pytest.mark.parametrize("engine", [None, False], ids=["engine", "automaton"])
@pytest.mark.parametrize("name", ["direct", "awrs"])
def test_sampler_unbiased_on_embedded_model(llm, conditions, exact, name, engine):
    sampler = make_sampler(name, llm, conditions[engine])
    check_unbiased(asyncio.run(run_smc(sampler, RUNS, ess_threshold=0.0)), exact)


@pytest.mark.parametrize("name", ["direct", "awrs"])
def test_resampling_with_the_default_end_twist_unbiased_on_embedded_model(llm, conditions, exact, name):
    """ESS 0.5 with the default end twist (the LM's EOS cost after each unfinished
    particle's context): finished particles (which paid that cost) no longer lose every
    resampling to unfinished ones, and the mean of `Ẑ/Z` over 240 runs is within
    4σ + 0.05 of 1 (with `end_twist=False` it is 0.24 ± 0.06)."""
    sampler = make_sampler(name, llm, conditions[None])
    check_unbiased(asyncio.run(run_smc(sampler, RUNS, ess_threshold=0.5)), exact)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["direct", "awrs"])
def test_resampling_with_a_constant_end_twist_unbiased_on_embedded_model(llm, conditions, exact, name):
    """`end_twist=1e-3`, a constant charge, meets the same bound at ESS 0.5."""
    sampler = make_sampler(name, llm, conditions[None])
    check_unbiased(asyncio.run(run_smc(sampler, RUNS, ess_threshold=0.5, end_twist=1e-3)), exact)


# Rows on the device (torch tensors): the same target, drawn on the torch path ----------


@pytest.fixture(scope="module")
def device_llm(llm) -> PromptedLLM:
    """The same model and prompt with its rows kept as torch tensors (`rows="device"`),
    which on a CPU is the path a GPU takes: products, masks and draws on tensors."""
    return PromptedLLM(llm.model, prompt_ids=llm.prompt_ids, rows="device")


@pytest.fixture(scope="module")
def device_conditions(device_llm):
    fsa = BoolFSA.from_regex(PATTERN)
    return {engine: fsa.coerce(device_llm, f=b"".join, engine=engine) for engine in (None, False)}


def test_device_rows_are_host_rows_in_float32(llm, device_llm):
    """`rows="device"` gives float32 tensors equal to the host rows, which are NumPy
    float32 (the model's own precision): the same values."""
    contexts = [[], [llm.vocab[5]], [llm.vocab[17], llm.vocab[3]]]
    host = asyncio.run(llm.batch_logw_next(contexts))
    dev = asyncio.run(device_llm.batch_logw_next(contexts))
    for h, d in zip(host, dev):
        assert isinstance(d.weights, torch.Tensor) and d.weights.dtype == torch.float32
        assert isinstance(h.weights, np.ndarray) and h.weights.dtype == np.float32
        np.testing.assert_array_equal(d.host(), h.weights)


@pytest.mark.parametrize("name", ["direct", "awrs", "awrs-search", "awrs-search-race"])
def test_sampler_unbiased_on_device_rows(device_llm, device_conditions, exact, name):
    """E[Ẑ/Z] = 1 and nothing off the language when rows, masks and draws are tensors."""
    condition = device_conditions[None]
    if name == "direct":
        sampler = direct_token_sampler(device_llm * condition)
    elif name == "awrs":
        sampler = AWRS(device_llm, condition)
        assert sampler.exact
    else:
        sampler = AWRS(device_llm, Searched(device_conditions[False]))
        assert not sampler.exact
        # on a CPU the race is drawn on the host unless asked (a GPU's default)
        sampler.device_race = name == "awrs-search-race"
    check_unbiased(asyncio.run(run_smc(sampler, RUNS, ess_threshold=0.0)), exact)


@pytest.mark.parametrize("name", ["direct", "awrs"])
def test_seeded_runs_draw_alike_on_host_and_device_rows(llm, device_llm, conditions, device_conditions, name):
    """Inverse-CDF draws use the same uniform on both paths, so a seeded run picks the
    same tokens from float32 NumPy rows and float32 tensor rows (they could differ only
    where rounding moves a CDF boundary across the uniform), and its weights agree to
    float32 precision."""

    def sampler(model, conds):
        cond = conds[None]
        return direct_token_sampler(model * cond) if name == "direct" else AWRS(model, cond)

    for seed in range(5):
        a = asyncio.run(sampler(llm, conditions).smc(6, 0.5, MAX_TOKENS, seed=seed))
        b = asyncio.run(sampler(device_llm, device_conditions).smc(6, 0.5, MAX_TOKENS, seed=seed))
        assert [[token_bytes(t) for t in c] for c in a.contexts] == [[token_bytes(t) for t in c] for c in b.contexts]
        np.testing.assert_allclose(b.log_weights, a.log_weights, rtol=1e-5, atol=1e-4)
        again = asyncio.run(sampler(device_llm, device_conditions).smc(6, 0.5, MAX_TOKENS, seed=seed))
        assert again.log_weights.tolist() == b.log_weights.tolist()


@pytest.mark.parametrize("n_particles", [2, 16])
def test_engine_step_reads_back_once(device_llm, device_conditions, n_particles):
    """A step of the direct sampler over `llm * engine_condition` and of AWRS with the
    engine condition: the engine's packed masks go to the rows' device and the whole
    step reads back once, for any number of particles."""
    condition = device_conditions[None]
    contexts = [[] for _ in range(n_particles)]
    for sampler in (direct_token_sampler(device_llm * condition), AWRS(device_llm, condition)):
        asyncio.run(sampler.batch_sample(contexts, [np.random.default_rng(0)] * n_particles))  # warm the cache
        rngs = [np.random.default_rng(k) for k in range(n_particles)]
        with counting_readbacks() as n:
            asyncio.run(sampler.batch_sample(contexts, rngs))
        assert n.value == 1, type(sampler).__name__


def test_engine_masks_unpack_alike_on_host_and_device(device_conditions):
    """Packed engine masks unpacked on a tensor's device equal the host unpacking:
    for the condition's own masks (which also equal its `logw_next` rows) and for
    random words, where every bit position, bit 31 (the int32 sign) included, is set
    and clear somewhere."""
    guided = device_conditions[None].guided
    ref = torch.zeros(1)
    on_device = asyncio.run(guided.batch_allowed([[]], like=ref))
    on_host = asyncio.run(guided.batch_allowed([[]]))
    rows = np.stack([r.weights for r in asyncio.run(guided.batch_logw_next([[]]))])
    assert isinstance(on_device, torch.Tensor) and on_device.dtype == torch.bool
    np.testing.assert_array_equal(on_device.numpy(), on_host)
    np.testing.assert_array_equal(on_host, rows == 0)
    assert 0 < on_host[0].sum() < on_host.shape[1]
    vocab = guided.engine
    words = np.random.default_rng(0).integers(-(2**31), 2**31, size=(3, vocab.n_words)).astype(np.int32)
    accepting = np.array([True, False, True])
    dev = mask_allowed(vocab, words, accepting, ref).numpy()
    host = mask_allowed(vocab, words, accepting)
    np.testing.assert_array_equal(dev, host)
    # against the bits read one by one, and in row-major order (a column-major block
    # makes every pass of the draw over it slow)
    ids = np.asarray(vocab.vocab_ids)
    bits = (words[:, ids // 32].astype(np.int64) >> (ids % 32)) & 1
    np.testing.assert_array_equal(host[:, :-1], bits.astype(bool))
    np.testing.assert_array_equal(host[:, -1], accepting)
    assert host.flags.c_contiguous
    bit31 = vocab.vocab_ids % 32 == 31
    assert host[:, :-1][:, bit31].any() and not host[:, :-1][:, bit31].all()
    # scattered ids (more runs than are copied run by run) are gathered instead
    rng = np.random.default_rng(1)
    scattered = EngineVocab(None, np.sort(rng.choice(vocab.n_words * 32, 500, replace=False)), (), vocab.n_words)
    np.testing.assert_array_equal(
        mask_allowed(scattered, words, accepting, ref).numpy(), mask_allowed(scattered, words, accepting)
    )
    ids = np.asarray(scattered.vocab_ids)
    bits = (words[:, ids // 32].astype(np.int64) >> (ids % 32)) & 1
    np.testing.assert_array_equal(mask_allowed(scattered, words, accepting)[:, :-1], bits.astype(bool))


def test_product_with_engine_mask_applies_it_on_the_rows_device(llm, device_llm, conditions, device_conditions):
    """`device_llm * engine_condition` masks the tensor rows on their device; its rows
    equal the host product's (`llm * condition`, a sum with a 0/-inf row)."""
    contexts = [[], [llm.vocab[9]]]
    dev = asyncio.run((device_llm * device_conditions[None]).batch_logw_next(contexts[:1]))
    host = asyncio.run((llm * conditions[None]).batch_logw_next(contexts[:1]))
    assert isinstance(dev[0].weights, torch.Tensor)
    got, want = dev[0].host(), host[0].weights
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_allclose(got[np.isfinite(want)], want[np.isfinite(want)], rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize(
    "ids",
    [
        np.delete(np.arange(131072), 2),  # tekken: every id but EOS (2), in two runs
        np.arange(1000, 131072),  # the first 1000 ids (special tokens) left out: a shift of 15 words
        np.concatenate([np.arange(5), np.arange(7, 100), np.arange(1000, 40001)]),  # three runs, odd words
        np.arange(65536),  # no id left out: the last column is past the packed bits
        np.delete(np.arange(70000), 63),  # a run that ends on a word's last bit
    ],
    ids=["tekken", "specials-first", "three-runs", "all-ids", "gap-at-bit-63"],
)
def test_large_host_masks_unpacked_in_the_vocabularys_order_equal_the_bits(ids):
    """Host masks of 2^18 bits or more are moved into the vocabulary's order while
    packed (word and bit shifts per run of ids) and unpacked once: every entry equals
    the mask's bit of that id read one by one, EOS is the accepting flag, and each
    row is contiguous (row-major, as the draw's passes need)."""
    from genlm.control.engine import _guided_engine as engine

    n_words = -(-(int(ids[-1]) + 1) // 32)
    vocab = EngineVocab(None, ids, (), n_words)
    rng = np.random.default_rng(len(ids))
    words = rng.integers(-(2**31), 2**31, size=(8, n_words)).astype(np.int32)
    accepting = np.array([True, False, True, True, False, False, True, False])
    assert words.size * 32 >= engine._SHIFT_BITS
    got = mask_allowed(vocab, words, accepting)
    bits = (words[:, ids // 32].astype(np.int64) >> (ids % 32)) & 1
    assert got.shape == (8, len(ids) + 1) and got.dtype == bool
    np.testing.assert_array_equal(got[:, :-1], bits.astype(bool))
    np.testing.assert_array_equal(got[:, -1], accepting)
    assert got.strides[1] == 1
    np.testing.assert_array_equal(mask_allowed(vocab, words, accepting, torch.zeros(1)).numpy(), got)
