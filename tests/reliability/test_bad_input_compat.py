"""Bad input at the API's edges (0.4.1 compatibility and clear errors): one case per
row of docs/bad-input.md, each a clear `TypeError`/`ValueError`/`AttributeError`
naming the problem, raised before any hang or silent wrong answer."""

import math
import os
from unittest import mock

import numpy as np
import pytest
from toys.reliability import AB, Flat, NoBB, ab_lm, assert_clear_error, undocumented

from genlm.control import (
    BoolFSA,
    Potential,
    PromptedLLM,
    direct_token_sampler,
    eager_token_sampler,
    topk_token_sampler,
)
from genlm.control.embedded import EMBEDDED_MODEL
from genlm.control.sampler import FixedLengthBoundary, MultiTokenUnitSampler
from genlm.control.sampler.set import EagerSetSampler
from genlm.control.weights import LazyWeights

os.environ.setdefault("HF_HUB_OFFLINE", "1")


class TablesBefore(Flat):
    def __init__(self):
        self.tables = Potential.build_tables(AB)
        super().__init__(AB)


class TablesAfter(Flat):
    def __init__(self):
        super().__init__(AB)
        self.tables = Potential.build_tables(AB)


class Bad(Potential):
    """Each method returns what `values` gives for its name (a flat potential otherwise)."""

    def __init__(self, **values):
        super().__init__(AB)
        self.values = values

    def _get(self, name, default):
        return self.values[name] if name in self.values else default

    async def prefix(self, context):
        return self._get("prefix", 0.0)

    async def complete(self, context):
        return self._get("complete", 0.0)

    async def logw_next(self, context):
        return self._get("logw_next", self.make_lazy_weights(np.zeros(3)))

    async def batch_prefix(self, contexts):
        return self._get("batch_prefix", [0.0] * len(contexts))

    async def batch_logw_next(self, contexts):
        default = [self.make_lazy_weights(np.zeros(3)) for _ in contexts]
        return self._get("batch_logw_next", default)


class ForgotAwait(Flat):
    async def prefix(self, context):
        return ab_lm().prefix(context)


class SyncPrefix(Flat):
    def prefix(self, context):
        return 0.0


_MOCK = {}


def _mock_llm():
    if "llm" not in _MOCK:
        _MOCK["llm"] = PromptedLLM.from_name(EMBEDDED_MODEL, backend="mock")
    return _MOCK["llm"].spawn()


def _smc(sampler=None, critic=None, **kw):
    # seeded, 8 particles: some particle draws a token before EOS, so every method runs
    args = dict(n_particles=8, ess_threshold=0.5, max_tokens=3, seed=0)
    args.update(kw)
    return (sampler or direct_token_sampler(ab_lm())).smc(critic=critic, **args)


def _unit(**kw):
    return MultiTokenUnitSampler(direct_token_sampler(ab_lm()), FixedLengthBoundary(2), **kw)


def _offline_unknown_model():
    with mock.patch.dict(os.environ, {"HF_HUB_OFFLINE": "1"}):
        return PromptedLLM.from_name("no-such-org/no-such-model", backend="mock")


async def _async_pred(context):
    return True


def _fsa():
    return BoolFSA.from_regex(" [a-z]+")


# (row id, thunk, error type, message pattern); keep in the order of docs/bad-input.md
ROWS = [
    # Vocabularies
    ("tables-assigned-before-init", TablesBefore, AttributeError, "TablesBefore.tables is read-only"),
    ("tables-assigned-after-init", TablesAfter, AttributeError, "TablesAfter.tables is read-only"),
    ("tables-not-vocabtables", lambda: Flat(tables={"vocab": AB}), TypeError, "tables must be VocabTables"),
    # What a potential returns
    ("return-none-prefix", lambda: Bad(prefix=None).prefix([]), TypeError, r"Bad\.prefix returned None"),
    ("return-none-complete", lambda: Bad(complete=None).complete([]), TypeError, r"Bad\.complete returned None"),
    ("return-str-prefix", lambda: Bad(prefix="0.0").prefix([]), TypeError, r"Bad\.prefix returned a str"),
    ("return-none-logw-next", lambda: Bad(logw_next=None).logw_next([]), TypeError, r"Bad\.logw_next returned None"),
    ("return-dict-logw-next", lambda: Bad(logw_next={b"a": 0.0}).logw_next([]), TypeError, r"Bad\.logw_next returned a dict"),
    (
        "return-short-row",
        lambda: Bad(logw_next=LazyWeights(np.zeros(1), {b"a": 0}, [b"a"])).logw_next([]),
        TypeError,
        "with 1 entries; expected LazyWeights over vocab",
    ),
    ("return-none-batch-prefix", lambda: Bad(batch_prefix=None).batch_prefix([[]]), TypeError, r"Bad\.batch_prefix returned None"),
    ("return-batch-wrong-count", lambda: Bad(batch_prefix=[0.0]).batch_prefix([[], []]), TypeError, "1 values for 2 contexts"),
    ("return-none-in-batch", lambda: Bad(batch_prefix=[0.0, None]).batch_prefix([[], []]), TypeError, "one of its values"),
    ("return-none-batch-logw-next", lambda: Bad(batch_logw_next=None).batch_logw_next([[]]), TypeError, r"Bad\.batch_logw_next returned None"),
    ("return-coroutine", lambda: ForgotAwait(AB).prefix([]), TypeError, "a missing `await`"),
    ("sync-method", lambda: SyncPrefix(AB).prefix([]), TypeError, r"SyncPrefix\.prefix must be a coroutine function"),
    ("return-none-critic-in-smc", lambda: _smc(critic=Bad(prefix=None)), TypeError, r"Bad\.prefix returned None"),
    ("return-none-target-in-smc", lambda: _smc(direct_token_sampler(Bad(logw_next=None, batch_logw_next=None))), TypeError, r"Bad\.batch_logw_next returned None"),
    ("return-dict-in-product", lambda: _smc(direct_token_sampler(ab_lm() * Bad(logw_next={}, batch_logw_next={}))), TypeError, r"Bad\.batch_logw_next returned a dict"),
    ("sampler-returns-none", lambda: _sampler_returning(None).smc(2, 0.5, 3), TypeError, r"SamplerReturns\.sample returned None"),
    # Products, powers and coercions
    ("power-bool", lambda: ab_lm() ** True, TypeError, "a bool"),
    # Samplers and SMC
    ("eager-item-not-potential", lambda: eager_token_sampler(_mock_llm(), 3), TypeError, "item_potential must be a Potential"),
    ("eager-iter-not-potential", lambda: eager_token_sampler(3, _fsa()), TypeError, "iter_potential must be a Potential"),
    ("topk-item-over-tokens", lambda: topk_token_sampler(_mock_llm(), _mock_llm(), K=None), TypeError, "item_potential over bytes"),
    ("topk-k-bool", lambda: topk_token_sampler(_mock_llm(), _fsa(), K=True), TypeError, "K must be a number"),
    ("topk-k-float", lambda: topk_token_sampler(_mock_llm(), _fsa(), K=2.5), TypeError, "K must be an integer"),
    ("topk-k-zero", lambda: topk_token_sampler(_mock_llm(), _fsa(), K=0), ValueError, "K must be an integer"),
    ("set-memo-size-zero", lambda: EagerSetSampler(_mock_llm(), _fsa(), memo_size=0), ValueError, "memo_size"),
    ("unit-max-subunits-bool", lambda: _unit(max_subunits_per_unit=True), TypeError, "max_subunits_per_unit must be a number"),
    ("unit-max-subunits-zero", lambda: _unit(max_subunits_per_unit=np.int64(0)), ValueError, "max_subunits_per_unit must be a positive integer"),
    ("fixed-length-bool", lambda: FixedLengthBoundary(True), TypeError, "FixedLengthBoundary length must be a number"),
    ("n-particles-bool", lambda: _smc(n_particles=True), TypeError, "n_particles must be a number"),
    ("ess-bool", lambda: _smc(ess_threshold=True), TypeError, "ess_threshold must be a number"),
    ("max-tokens-bool", lambda: _smc(max_tokens=True), TypeError, "max_tokens must be a number"),
    ("seed-bool", lambda: _smc(seed=False), TypeError, "seed must be a number"),
    ("terminate-when-async", lambda: _smc(terminate_when=_async_pred), TypeError, "terminate_when must be a plain function"),
    (
        "terminate-when-returns-coroutine",
        lambda: _smc(terminate_when=lambda ctx: _async_pred(ctx)),
        TypeError,
        "terminate_when must be a plain function",
    ),
    # Language models
    ("llm-name-none", lambda: PromptedLLM.from_name(None), TypeError, "name must be a model name"),
    ("llm-name-empty", lambda: PromptedLLM.from_name(""), ValueError, "name must be a non-empty"),
    ("llm-unknown-model-offline", _offline_unknown_model, ValueError, "'no-such-org/no-such-model' is not available offline"),
    ("llm-not-a-model-name", lambda: PromptedLLM.from_name("/no/such/dir/model"), ValueError, "could not be found locally"),
    ("llm-prompt-lone-surrogate", lambda: _mock_llm().set_prompt_from_str("a\ud800b"), ValueError, "lone surrogate .* at position 1"),
    ("llm-prompt-ids-str", lambda: setattr(_mock_llm(), "prompt_ids", "123"), TypeError, "prompt_ids must be a list of token ids"),
    ("llm-prompt-ids-float", lambda: setattr(_mock_llm(), "prompt_ids", [1, 2.0]), TypeError, "got 2.0 at position 1"),
    ("llm-prompt-ids-batch", lambda: setattr(_mock_llm(), "prompt_ids", [[1], [2]]), TypeError, "prompt_ids must be a list"),
]  # fmt: skip


@pytest.mark.parametrize("thunk, err, match", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
async def test_bad_input_gives_a_clear_error(thunk, err, match):
    await assert_clear_error(thunk, err, match)


def test_every_row_is_documented():
    missing = undocumented(r[0] for r in ROWS + VALUE_ROWS)
    assert not missing, f"rows without a line in docs/bad-input.md: {missing}"


# Rows whose answer is a value, not an error ------------------------------------------

VALUE_ROWS = [
    ("numpy-scalars-accepted", None),
    ("llm-temperature-tiny", None),
    ("topk-k-none", None),
]


async def test_numpy_scalars_accepted():
    seqs = await _smc(n_particles=np.int64(4), ess_threshold=np.float32(0.5), max_tokens=np.int32(3), seed=np.int64(0))
    assert len(seqs) == 4 and all(len(c) <= 3 for c in seqs.contexts)
    seqs = await _smc(n_particles=2, ess_threshold=np.float64(1.0))
    assert len(seqs) == 2
    tempered = ab_lm() ** np.float32(2)
    assert await tempered.prefix([b"a"]) == pytest.approx(2 * math.log(0.5))


async def test_llm_temperature_tiny():
    llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend="mock", temperature=1e-300)
    with np.errstate(all="raise"):
        row = (await llm.logw_next([])).weights
    assert not np.isnan(row).any() and row.max() == 0.0


async def test_topk_k_none():
    # 0.4.1's K=None weighs every token exactly: the set is the whole live vocabulary
    from genlm.control.sampler.set import TopKSetSampler

    llm = _mock_llm()
    llm.set_prompt_from_str("The")
    sampler = TopKSetSampler(llm, _fsa(), K=None)
    s = await sampler.sample_set([])
    live = {bytes(t) for t, w in zip(s.tokens, s.logws) if t != llm.eos and w > -math.inf}
    assert len(s.tokens) >= len(llm.vocab)  # every token was weighed
    import re

    want = {bytes(t) for t in llm.vocab if re.fullmatch(rb" [a-z]*", bytes(t))}
    assert want and live == want  # exactly the tokens the constraint allows as a prefix


async def test_critic_without_await_does_not_warn(recwarn):
    with pytest.raises(TypeError, match="missing `await`"):
        await _smc(critic=ForgotAwait(AB))
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


async def test_samplers_still_run_after_a_bad_return():
    # the error leaves no stranded batch behind: the same sampler runs again
    target = Bad()
    sampler = direct_token_sampler(target)
    target.values["logw_next"] = None
    target.values["batch_logw_next"] = None
    with pytest.raises(TypeError, match="returned None"):
        await sampler.smc(2, 0.5, 3)
    target.values.clear()
    seqs = await sampler.smc(2, 0.5, 3, seed=0)
    assert len(seqs) == 2


def test_no_bb_is_a_plain_potential():
    # the shared toys are user-style subclasses, so they are checked like a user's
    assert NoBB.prefix.__genlm_checked__


class SamplerReturns(direct_token_sampler(ab_lm()).__class__):
    """A user's token sampler whose `sample` returns `self.out`."""

    out = None

    async def sample(self, context, draw=None):
        return self.out


def _sampler_returning(out):
    sampler = SamplerReturns(ab_lm(), autobatch=False)
    sampler.out = out
    return sampler


@pytest.mark.parametrize(
    "out, said",
    [(None, "returned None"), ((b"a", 0.0), "returned a tuple"), ((b"a", None, 0.0), "returned a tuple")],
)
async def test_sampler_sample_return_is_checked(out, said):
    sampler = SamplerReturns(ab_lm(), autobatch=False)
    sampler.out = out
    with pytest.raises(TypeError, match=rf"SamplerReturns\.sample {said}.*\(token, logw, logp\)"):
        await sampler.smc(2, 0.5, 3)
    sampler.out = (b"a", 0.0, 0.0)
    assert (await sampler.sample([])) == (b"a", 0.0, 0.0)
