"""genlm-control 0.4.1's forms of the samplers, draws, weights and visualizer, beside ours.

Each test pins one 0.4.1 usage (an unpacking, an exception type, a constructor that
serves) together with the form of ours it sits beside.
"""

import asyncio
import json
import math
import subprocess
import sys
import warnings

import numpy as np
import pytest
from toys.tables import NextTable, item_potential, random_rows

from genlm.control import EOS, InferenceVisualizer
from genlm.control.sampler import DirectTokenSampler, FixedLengthBoundary
from genlm.control.sampler.sequence import Sequences
from genlm.control.sampler.set import EagerSetSampler, TopKSetSampler, TrieSetSampler
from genlm.control.util import LazyWeights, draw_from, logsumexp

VOCAB = [b"a", b"ab", b"b"]


def llm(seed=0, vocab=VOCAB):
    return NextTable(vocab, random_rows(len(vocab), seed, 0.0))


# -- SMC results and draws -----------------------------------------------------


def test_sequences_length_mismatch_is_value_and_assertion_error():
    for kind in (ValueError, AssertionError):
        with pytest.raises(kind, match="1 contexts but 2 log weights"):
            Sequences(contexts=[[b"a"]], log_weights=[0.0, 0.0])


async def test_draw_unpacks_as_token_logw_logp():
    vocab = ["a", "b", "c", EOS]
    enc = {t: i for i, t in enumerate(vocab)}
    values = np.array([1.0, 2.0, 3.0, 0.0])
    log_z = float(logsumexp(values))
    tok, logw, logp = await draw_from(LazyWeights(values, enc, vocab), draw=lambda chart: "c")
    assert tok == "c" and logw == pytest.approx(log_z) and logp == pytest.approx(3.0 - log_z)
    d = await draw_from(LazyWeights(values, enc, vocab), draw=lambda chart: "b")
    assert (d.token, d.logw, d.logp) == tuple(d)
    # an importance draw: weighed under the target, `logw = target[token] - logp`
    target = np.array([0.0, -1.0, -5.0, -2.0])
    tok, logw, logp = await draw_from(
        LazyWeights(values, enc, vocab), draw=lambda chart: "a", target=LazyWeights(target, enc, vocab)
    )
    assert logp == pytest.approx(1.0 - log_z) and logw == pytest.approx(0.0 - logp)


# -- set samplers ----------------------------------------------------------------


async def test_sample_set_unpacks_as_weights_and_logp():
    items = item_potential(b"ab", 3, 0.3)
    sampler = TopKSetSampler(llm(), items, len(VOCAB))  # every token exact: a deterministic set
    s = await sampler.sample_set([])
    weights, logp = s
    assert logp == s.logp == 0.0 and len(s) == 2
    assert isinstance(weights, LazyWeights) and list(weights.decode) == list(sampler.target.vocab_eos)
    weights.assert_equal(await sampler.target.logw_next([]), rtol=1e-9, atol=1e-12)
    for token, logw in zip(s.tokens, s.logws):  # the pair is the same set as the lists
        assert weights[token] == pytest.approx(logw)
    eager = await EagerSetSampler(llm(), items).sample_set([b"a"])
    row, lp = eager
    assert lp == eager.logp and row[EOS] == pytest.approx(eager.logws[0])


def test_trie_set_sampler_is_constructible_and_draws_no_sets():
    sampler = TrieSetSampler(llm(), item_potential(b"ab", 3, 0.3))
    with pytest.raises(NotImplementedError, match="EagerSetSampler"):
        asyncio.run(sampler.sample_set([]))


@pytest.mark.parametrize("how", ["default", "keyword", "041-positional"])
async def test_set_samplers_take_041s_autobatch_argument(how):
    """0.4.1's `autobatch=`: by default only the iter potential is wrapped in its
    autobatched view; `autobatch=False` (or 0.4.1's positional `False`) leaves both as
    given. The sets drawn are the same either way."""
    from genlm.control.potential.autobatch import AutoBatchedPotential

    lm, items = llm(), item_potential(b"ab", 3, 0.3)
    args = {"default": ((), {}), "keyword": ((), {"autobatch": False}), "041-positional": ((False,), {})}
    extra, kw = args[how]
    sampler = TopKSetSampler(lm, items, None, *extra, **kw)
    wrapped = how == "default"
    assert isinstance(sampler.iter_potential, AutoBatchedPotential) is wrapped
    assert (sampler.iter_potential.potential if wrapped else sampler.iter_potential) is lm
    assert sampler.item_potential is items
    assert sampler.memo_size == 256
    got = await sampler.sample_set([b"a"])
    want = await TopKSetSampler(lm, items, None).sample_set([b"a"])
    assert got.tokens == want.tokens and got.logws == pytest.approx(want.logws)
    eager = EagerSetSampler(lm, items, *extra, **kw)
    assert isinstance(eager.iter_potential, AutoBatchedPotential) is wrapped
    sampler.cleanup()
    eager.cleanup()


def test_set_sampler_token_types_are_type_and_value_errors():
    ints = NextTable([0, 1], random_rows(2, 0, 0.0))
    for kind in (TypeError, ValueError):
        with pytest.raises(kind, match="must be an iterable of token type of `item_potential`"):
            EagerSetSampler(ints, item_potential(b"ab", 3, 0.3))
        with pytest.raises(kind, match="item_potential over bytes"):
            EagerSetSampler(llm(), llm())


# -- messages that lead with 0.4.1's words -----------------------------------------


def test_messages_carry_041_wording():
    with pytest.raises(TypeError, match=r"Cannot concatenate <class 'int'> with <class '.*EndOfSequence'>"):
        _ = 42 + EOS
    assert [1] + EOS == [1, EOS] and (1,) + EOS == (1, EOS)
    with pytest.raises(ValueError, match="Length must be positive"):
        FixedLengthBoundary(0)
    with pytest.raises(TypeError, match="bool"):
        FixedLengthBoundary(True)
    with pytest.raises(ValueError, match="different tokenizers"):
        DirectTokenSampler(llm(), proposal=llm(vocab=[b"a", b"b"]))


# -- LazyWeights -----------------------------------------------------------------


class _Tok:
    """A token object with a `byte_string`, as genlm-backend's `Token`."""

    def __init__(self, i, b):
        self.token_id, self.byte_string = i, b

    def __hash__(self):
        return hash((self.token_id, self.byte_string))

    def __eq__(self, other):
        return isinstance(other, _Tok) and (self.token_id, self.byte_string) == (other.token_id, other.byte_string)


def test_lazy_weights_041_checks():
    lw = LazyWeights(np.array([1.0, 2.0]), {"a": 0, "b": 1}, ["a", "b"])
    with pytest.raises(NotImplementedError, match=r"\.weights"):
        np.array(lw)
    assert lw.host().tolist() == [1.0, 2.0]
    for kind in (ValueError, AssertionError):
        with pytest.raises(kind, match="already in log space"):
            lw.log()
        with pytest.raises(kind, match="not in log space"):
            LazyWeights(np.array([1.0, 2.0]), {"a": 0, "b": 1}, ["a", "b"], log=False).exp()
    other = LazyWeights(np.array([1.0, 2.0]), {"a": 0, "c": 1}, ["a", "c"])
    with pytest.raises(AssertionError, match="keys do not match"):
        lw.assert_equal_unordered(other)


def test_lazy_weights_over_tokens_take_plain_bytes_with_a_warning():
    toks = [_Tok(0, b"hi"), _Tok(1, b"hi"), _Tok(2, b"yo")]
    lw = LazyWeights(np.array([-1.0, -2.0, -3.0]), {t: i for i, t in enumerate(toks)}, toks)
    with pytest.warns(DeprecationWarning, match="Indexing LazyWeights by bytes is deprecated"):
        assert lw[b"hi"] == -1.0  # the first token with those bytes
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lw[toks[1]] == -2.0  # a Token is looked up directly, silently
        assert lw[b"missing"] == -math.inf
    # an explicit fallback map is consulted instead, without a warning
    plain = LazyWeights(np.array([-1.0, -2.0]), {"x": 0, "y": 1}, ["x", "y"], fallback={b"y": 1})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plain[b"y"] == -2.0 and plain[b"x"] == -math.inf


# -- InferenceVisualizer -----------------------------------------------------------

RECORD = [{"step": 1, "mode": "init", "particles": [{"contents_incr": "h", "logweight": "-1.5", "weight_incr": "-1.5"}]}]


def _get(url):
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as r:
        return r.status, r.read()


def test_visualizer_serves_from_its_constructor(tmp_path):
    viz = InferenceVisualizer(port=0, serve_dir=tmp_path)  # 0.4.1's form (on a free port)
    try:
        assert viz.serving
        (tmp_path / "rec.json").write_text(json.dumps(RECORD))
        status, body = _get(f"http://127.0.0.1:{viz.port}/rec.json")  # written straight into serve_dir
        assert status == 200 and json.loads(body) == RECORD
    finally:
        viz.shutdown_server()
    assert not viz.serving and (tmp_path / "rec.json").exists()
    with pytest.raises(RuntimeError, match="Server is not running"):
        viz.visualize(tmp_path / "missing.json")  # checked before the file, as in 0.4.1
    # our forms start nothing: a record to render, or serve=False
    lazy = InferenceVisualizer(port=0, serve=False)
    assert not lazy.serving
    assert not InferenceVisualizer(tmp_path / "rec.json").serving
    lazy.shutdown_server()


def test_visualizer_bind_failure_raises_from_the_constructor_and_cleans_up(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with InferenceVisualizer(port=0) as first:
        made = list(tmp_path.glob("smc_viz_*"))
        assert len(made) == 1  # the running visualizer's folder
        with pytest.raises(OSError, match=f"Port {first.port} is already in use"):
            InferenceVisualizer(port=first.port)
        assert list(tmp_path.glob("smc_viz_*")) == made, "the failed one's folder is removed"
    assert list(tmp_path.glob("smc_viz_*")) == []


def test_importing_the_visualizer_starts_no_server():
    code = (
        "import threading, genlm.control, genlm.control.viz;"
        "assert not [t for t in threading.enumerate() if t.name == 'genlm-viz']"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# -- resampling ----------------------------------------------------------------------


async def test_a_041_style_resampling_entry_is_used(monkeypatch):
    from genlm.control.sampler import SMC, direct_token_sampler, resampling

    calls = []

    def mine(weights):  # 0.4.1's form: normalized weights in, len(weights) ancestors out
        calls.append(np.asarray(weights).copy())
        return np.zeros(len(weights), dtype=int)  # every particle copies the first

    monkeypatch.setitem(resampling.RESAMPLING_METHODS, "mine", mine)
    seqs = await SMC(direct_token_sampler(llm()))(4, 1.0, 4, resampling_method="mine", seed=0)
    assert calls and all(w.shape == (4,) and w.sum() == pytest.approx(1.0) for w in calls)
    assert len(seqs.contexts) == 4
    assert resampling.get_resampling_fn("mine")(np.full(3, 1 / 3)).tolist() == [0, 0, 0]
    monkeypatch.setitem(resampling.RESAMPLING_METHODS, "short", lambda w: np.zeros(1, dtype=int))
    with pytest.raises(ValueError, match="one ancestor index per particle"):
        await SMC(direct_token_sampler(llm()))(4, 1.0, 4, resampling_method="short", seed=0)


def _ending_critic():
    """A critic that is flat on prefixes and weighs only how a sequence ends: `EOS`
    after `a` by e^3, after `b` by e^-3 (after `()` and `ab` by 1)."""
    ends = {(): 0.0, (b"a",): 3.0, (b"ab",): 0.0, (b"b",): -3.0}
    return NextTable(VOCAB, lambda ctx: np.array([0.0, 0.0, 0.0, ends.get(ctx, 0.0)]))


async def test_a_finished_population_with_low_ess_is_resampled_once_more(tmp_path):
    """0.4.1 decided the step in which the last particles finish like every other. With
    `max_tokens=2` every particle ends by step 2 and the critic's weight differs only
    there, so the last decision is the run's only resample: the returned particles
    all carry the mean weight, and `log_ml` and the draws are those of the run that
    never resamples (same seed)."""
    from genlm.control.sampler import SMC, direct_token_sampler
    from genlm.control.smc.record import RunRecord

    smc = SMC(direct_token_sampler(llm()), _ending_critic())
    path = tmp_path / "run.json"
    kept = await smc(16, 0.0, 2, seed=3)
    assert len(set(np.round(kept.log_weights, 9))) > 1  # the ending weights differ
    got = await smc(16, 0.9, 2, seed=3, json_path=path)
    steps = RunRecord.from_json(path).steps
    assert [s.resampled for s in steps] == [False] * (len(steps) - 1) + [True]
    assert np.allclose(got.log_weights, got.log_ml, rtol=0, atol=1e-12)
    assert got.log_ml == pytest.approx(kept.log_ml, abs=1e-12)
    assert {tuple(c) for c in got.contexts} <= {tuple(c) for c in kept.contexts}


async def test_a_041_resampling_entry_is_called_after_the_last_step(monkeypatch):
    from genlm.control.sampler import SMC, direct_token_sampler, resampling

    calls = []
    real = resampling.RESAMPLING_METHODS["multinomial"]

    def spy(weights):
        calls.append(np.asarray(weights).copy())
        return real(weights)

    monkeypatch.setitem(resampling.RESAMPLING_METHODS, "multinomial", spy)
    await SMC(direct_token_sampler(llm()), _ending_critic())(16, 0.9, 2, seed=3)
    assert len(calls) == 1  # the final decision's
    # a population whose weights are all zero is not resampled
    calls.clear()
    never = NextTable(VOCAB, lambda ctx: np.array([-np.inf, -np.inf, -np.inf, 0.0 if ctx else -np.inf]))
    with pytest.warns(UserWarning):
        seqs = await SMC(direct_token_sampler(llm()), never)(4, 0.9, 3, seed=0)
    assert seqs.log_ml == -math.inf and calls == []


# -- AWRS ----------------------------------------------------------------------------


def test_awrs_041_forms():
    """`vocab_eos_set` (0.4.1's attribute), `n_monte_carlo_samples` with 0.4.1's
    `DeprecationWarning`, and 0.4.1's words for a proposal over another vocabulary."""
    from genlm.control import BoolFSA
    from genlm.control.sampler import AWRS

    target = llm()
    sampler = AWRS(target, BoolFSA.from_regex("a*").coerce(target, f=b"".join))
    assert sampler.vocab_eos_set == set(sampler.target.vocab_eos)
    with pytest.warns(DeprecationWarning, match="n_monte_carlo_samples"):
        AWRS(target, target, n_monte_carlo_samples=5)
    with pytest.raises(ValueError, match="different tokenizers"):
        AWRS(target, target, proposal=llm(vocab=[b"a", b"b"]))


def test_token_set_boundary_matches_token_subunits_by_their_bytes():
    """0.4.1: plain bytes in the set match a `Token` subunit with those bytes; a `Token`
    in the set names its id only; EOS by identity."""
    from genlm.control.sampler import TokenSetBoundary
    from genlm.control.util import Token

    boundary = TokenSetBoundary({b" ", EOS, Token(7, b"!")})
    word, space, other_space = Token(1, b"hi"), Token(220, b" "), Token(221, b" ")
    assert boundary([], [word, space]) and boundary([], [word, other_space])
    assert boundary([], [word, b" "]) and boundary([], [word, EOS])
    assert boundary([], [Token(7, b"!")]) and not boundary([], [Token(8, b"!")])
    assert not boundary([], [word]) and not boundary([], []) and not boundary([], [b"!"])


class _Fixed:
    """A potential whose next-token log weights are `row` after every context."""

    @staticmethod
    def make(vocab, row):
        from genlm.control import Potential

        row = np.asarray(row, dtype=float)

        class Fixed(Potential):
            async def prefix(self, context):
                return float(sum(row[vocab.index(t)] for t in context))

            async def complete(self, context):
                return await self.prefix(context) + float(row[-1])

        return Fixed(vocab)


@pytest.mark.parametrize("enumerate_at", [0, 16])
async def test_awrs_improper_weights_are_zero_or_minus_inf_as_in_041(enumerate_at):
    """`proper_weights=False`: log weight 0 on an accept, `-inf` when nothing was
    accepted, whatever the potential's mass and the proposal (0.4.1's contract), on
    the search path and the enumerated one; the token is an allowed one."""
    from genlm.control.sampler import AWRS

    vocab = [bytes([i]) for i in range(4)]
    potential = _Fixed.make(vocab, np.log([0.5, 0.9, 0.3, 0.6, 0.2]))  # unnormalized
    proposal = _Fixed.make(vocab, np.log([0.4, 0.1, 0.1, 0.3, 0.1]))
    condition = _Fixed.make(vocab, [0.0, 0.0, -np.inf, -np.inf, 0.0])
    sampler = AWRS(potential, condition, proposal=proposal, proper_weights=False, seed=0)
    sampler.enumerate_at = enumerate_at  # 0: the search path; 16: every support enumerated
    seen = set()
    for _ in range(60):
        token, logw, _ = await sampler.sample([])
        assert logw == 0.0
        seen.add(token)
    assert seen <= {vocab[0], vocab[1], EOS} and len(seen) > 1
    # a condition that allows nothing gives -inf
    nothing = _Fixed.make(vocab, [-np.inf] * 5)
    _, logw, _ = await AWRS(potential, nothing, proper_weights=False, seed=0).sample([])
    assert logw == -np.inf


async def test_awrs_improper_weights_honour_max_rejects():
    """With `proper_weights=False`, `max_rejects=1` tries one token: when it is
    refused the weight is `-inf` (0.4.1's `improper_sample`); the rate of that is
    the proposal's mass on refused tokens."""
    from genlm.control.sampler import AWRS

    vocab = [bytes([i]) for i in range(4)]
    potential = _Fixed.make(vocab, np.log([0.1, 0.3, 0.3, 0.2, 0.1]))
    condition = _Fixed.make(vocab, [0.0, -np.inf, -np.inf, -np.inf, -np.inf])  # only token 0
    sampler = AWRS(potential, condition, proper_weights=False, max_rejects=1, seed=1)
    sampler.enumerate_at = 0  # the search path
    n = 400
    fails = 0
    for _ in range(n):
        token, logw, _ = await sampler.sample([])
        assert logw in (0.0, -np.inf)
        fails += logw == -np.inf
        if logw == 0.0:
            assert token == vocab[0]
    p = 0.9  # the proposal's mass off token 0
    assert abs(fails / n - p) < 4 * math.sqrt(p * (1 - p) / n)
