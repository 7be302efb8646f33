"""Every public name and import path that SPEC.md promises."""

import importlib

import pytest

TOP_LEVEL = [
    "EOS", "EOT", "SMC", "set_draw_method", "DRAW_METHODS", "Potential", "PromptedLLM",
    "ByteLLM", "WCFG", "BoolCFG", "WFSA", "BoolFSA", "JsonSchema", "CanonicalTokenization",
    "Ensemble", "AWRS", "direct_token_sampler", "eager_token_sampler", "topk_token_sampler",
    "InferenceVisualizer", "GuidedConstraint", "run", "HarmonyPotential", "HarmonyChat",
    "ThinkPotential",
]  # fmt: skip

PATHS = {
    "genlm.control.potential": [
        "Potential", "Product", "Tempered", "Normalized", "Coerced", "AutoBatchedPotential",
        "MultiProcPotential", "PromptedLLM", "WFSA", "BoolFSA", "WCFG", "BoolCFG", "JsonSchema",
        "CanonicalTokenization", "ByteLLM", "Ensemble", "GuidedConstraint", "HarmonyPotential",
        "HarmonyChat", "ThinkPotential",
    ],
    "genlm.control.reasoning": [
        "HarmonyPotential", "HarmonyChat", "ThinkPotential", "ThinkTags", "answer_posterior",
        "answer_text",
    ],
    "genlm.control.potential.built_in": [
        "PromptedLLM", "WFSA", "BoolFSA", "WCFG", "BoolCFG", "JsonSchema",
        "CanonicalTokenization", "ByteLLM", "Ensemble", "GuidedConstraint",
    ],
    "genlm.control.potential.autobatch": ["AutoBatchedPotential"],
    "genlm.control.sampler": [
        "DirectTokenSampler", "SetTokenSampler", "EagerSetSampler", "TopKSetSampler",
        "TrieSetSampler", "AWRS", "MultiTokenUnitSampler", "TokenSetBoundary",
        "FixedLengthBoundary", "CFGBoundary", "direct_token_sampler", "eager_token_sampler",
        "topk_token_sampler",
    ],
    "genlm.control.sampler.smc": ["SequenceModel", "smc_standard"],
    "genlm.control.sampler.sequence": ["SMC", "Sequences"],
    "genlm.control.sampler.resampling": [],
    "genlm.control.util": [
        "flatten_units", "draw_from", "set_draw_method", "DRAW_METHODS", "BatchAbandoned",
        "LazyWeights", "counting_readbacks",
    ],
    "genlm.control.constant": ["EOS", "EOT"],
    "genlm.control.testing": ["check_potential"],
    "genlm.control.distributed": ["Pool", "Result", "ProblemFailed", "SetupFailed", "problem_seeds"],
}  # fmt: skip


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_top_level_export(name):
    module = importlib.import_module("genlm.control")
    assert name in module.__all__
    assert getattr(module, name) is not None


@pytest.mark.parametrize(
    "path,name", [(p, n) for p, names in PATHS.items() for n in names or [None]]
)
def test_import_path(path, name):
    module = importlib.import_module(path)
    if name is not None:
        assert getattr(module, name) is not None


def test_set_draw_method_is_shared_between_paths():
    import genlm.control as top
    import genlm.control.util as util

    assert top.set_draw_method is util.set_draw_method
    assert top.DRAW_METHODS == ("gumbel_max", "multinomial", "inverse_cdf")


# genlm-control 0.4.1 compatibility ---------------------------------------------------
# Every (module, name) pair of SPEC.md's "Public import paths", top-level and
# `genlm.control.sampler` export lists, and "Also importable from their 0.4.1 modules".

SPEC_0_4_1 = {
    "genlm.control": [
        "EOS", "EOT", "SMC", "set_draw_method", "DRAW_METHODS", "Potential", "PromptedLLM",
        "ByteLLM", "WCFG", "BoolCFG", "WFSA", "BoolFSA", "JsonSchema", "CanonicalTokenization",
        "Ensemble", "AWRS", "direct_token_sampler", "eager_token_sampler", "topk_token_sampler",
        "InferenceVisualizer",
    ],
    "genlm.control.potential": [],
    "genlm.control.potential.built_in": [],
    "genlm.control.potential.autobatch": ["autobatched"],
    "genlm.control.sampler": [
        "AWRS", "direct_token_sampler", "eager_token_sampler", "topk_token_sampler",
        "DirectTokenSampler", "EagerSetSampler", "TopKSetSampler", "SetTokenSampler",
        "TokenSampler", "SMC", "MultiTokenUnitSampler", "BoundaryPredicate",
        "TokenSetBoundary", "FixedLengthBoundary", "CFGBoundary", "flatten_units",
    ],
    "genlm.control.sampler.smc": ["SequenceModel", "smc_standard"],
    "genlm.control.sampler.sequence": ["SMC", "Sequences"],
    "genlm.control.sampler.token": ["TokenSampler", "DirectTokenSampler", "SetTokenSampler", "AWRS"],
    "genlm.control.sampler.set": ["SetSampler", "TrieSetSampler"],
    "genlm.control.sampler.resampling": [
        "RESAMPLING_METHODS", "get_resampling_fn", "multinomial_resample", "stratified_resample",
        "systematic_resample", "residual_resample",
    ],
    "genlm.control.util": [
        "flatten_units", "draw_from", "set_draw_method", "DRAW_METHODS", "LazyWeights",
        "logsumexp", "BatchAbandoned",
    ],
    "genlm.control.constant": ["EOS", "EOT", "EndOfSequence"],
    "genlm.control.potential.base": ["EOS"],
    "genlm.control.potential.built_in.llm": ["load_model_by_name"],
    "genlm.control.potential.harmony": ["HarmonyPotential", "HarmonyChat"],
    "genlm.control.potential.stateful": ["StatefulPotential", "ParticleState", "make_immutable"],
    "genlm.control.potential.streaming": [
        "AsyncStreamingPotential", "AsyncSource", "PING_TOKEN", "KEEP_ALIVE_SET",
    ],
}  # fmt: skip

# Names that 0.4.1 exported from two modules must be the same object in both.
SAME_OBJECT = [
    ("genlm.control.sampler.token", "AWRS", "genlm.control", "AWRS"),
    ("genlm.control.sampler.token", "SetTokenSampler", "genlm.control.sampler", "SetTokenSampler"),
    ("genlm.control.sampler", "flatten_units", "genlm.control.util", "flatten_units"),
    ("genlm.control.potential.base", "EOS", "genlm.control", "EOS"),
    ("genlm.control.sampler.set", "TrieSetSampler", "genlm.control.sampler", "TrieSetSampler"),
    ("genlm.control.sampler", "SequenceModel", "genlm.control.sampler.smc", "SequenceModel"),
    ("genlm.control", "GuidedConstraint", "genlm.control.potential.built_in.guided", "GuidedConstraint"),
    ("genlm.control.potential.harmony", "HarmonyPotential", "genlm.control.potential", "HarmonyPotential"),
    ("genlm.control.potential.harmony", "HarmonyChat", "genlm.control", "HarmonyChat"),
]


@pytest.mark.parametrize(
    "path,name", [(p, n) for p, names in SPEC_0_4_1.items() for n in names or [None]]
)
def test_spec_0_4_1_import_path(path, name):
    module = importlib.import_module(path)
    if name is not None:
        assert getattr(module, name) is not None
        assert name in dir(module) or hasattr(module, name)


@pytest.mark.parametrize("path_a,name_a,path_b,name_b", SAME_OBJECT)
def test_0_4_1_aliases_are_the_same_objects(path_a, name_a, path_b, name_b):
    a = getattr(importlib.import_module(path_a), name_a)
    b = getattr(importlib.import_module(path_b), name_b)
    assert a is b


# Modules whose home is lm/, constraints/ or engine/: the 0.4 path under
# potential/built_in/ is an alias re-exporting the same objects.
MOVED = {
    "llm": "lm.llm", "bytelm": "lm.bytelm", "canonical": "lm.canonical",
    "ensemble": "lm.ensemble", "wfsa": "constraints.fsa.wfsa", "wcfg": "constraints.cfg.wcfg",
    "json": "constraints.json_schema.json", "guided": "engine.guided",
}  # fmt: skip


@pytest.mark.parametrize("old,new", sorted(MOVED.items()))
def test_moved_module_old_path_re_exports_the_same_objects(old, new):
    alias = importlib.import_module(f"genlm.control.potential.built_in.{old}")
    module = importlib.import_module(f"genlm.control.{new}")
    assert alias.__all__ and set(alias.__all__) <= set(module.__all__)
    for name in alias.__all__:
        assert getattr(alias, name) is getattr(module, name)


def test_unknown_name_of_a_0_4_1_module_is_an_attribute_error():
    import genlm.control.sampler.token as token

    with pytest.raises(AttributeError, match="no attribute 'Importance'"):
        token.Importance  # noqa: B018


@pytest.mark.parametrize(
    "name", ["multinomial", "stratified", "systematic", "residual"]
)
def test_get_resampling_fn_gives_unbiased_0_4_1_functions(name):
    """`get_resampling_fn(name)(weights)` returns `len(weights)` ancestor indices whose
    offspring counts have mean `N W_i` (within 4σ over 3000 seeded calls)."""
    import numpy as np

    from genlm.control.sampler.resampling import get_resampling_fn

    f = get_resampling_fn(name)
    assert f is getattr(importlib.import_module("genlm.control.sampler.resampling"), f"{name}_resample")
    w = np.array([0.1, 0.0, 0.6, 0.3])
    np.random.seed(0)
    counts = np.stack([np.bincount(f(w), minlength=4) for _ in range(3000)])
    assert counts.shape == (3000, 4) and np.all(counts.sum(axis=1) == 4)
    assert counts[:, 1].max() == 0  # a zero weight is never chosen
    sem = counts.std(axis=0, ddof=1) / np.sqrt(len(counts))
    assert np.all(np.abs(counts.mean(axis=0) - 4 * w) <= 4 * sem + 1e-12)


def test_0_4_1_resampling_is_reproducible_under_np_random_seed():
    import numpy as np

    from genlm.control.sampler.resampling import multinomial_resample

    w = np.full(16, 1 / 16)
    np.random.seed(3)
    a = multinomial_resample(w)
    np.random.seed(3)
    b = multinomial_resample(w)
    np.testing.assert_array_equal(a, b)
    rng = np.random.default_rng(5)
    c = multinomial_resample(w, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(c, multinomial_resample(w, rng=rng))


def test_resampling_methods_keep_both_signatures():
    import numpy as np

    from genlm.control.sampler.resampling import RESAMPLING_METHODS, get_resampler

    assert sorted(RESAMPLING_METHODS) == ["multinomial", "residual", "stratified", "systematic"]
    scheme = RESAMPLING_METHODS["systematic"]
    assert get_resampler("systematic") is scheme
    # ours: n ancestors from (rng, weights, n); systematic gives floor/ceil of n W
    out = scheme(np.random.default_rng(0), np.array([0.5, 0.5]), 6)
    np.testing.assert_array_equal(out, [0, 0, 0, 1, 1, 1])
    with pytest.raises(TypeError, match=r"\(rng, weights, n\)"):
        scheme(np.array([0.5, 0.5]), 3)
    with pytest.raises(ValueError, match="Unknown resampling method 'bogus'"):
        importlib.import_module("genlm.control.sampler.resampling").get_resampling_fn("bogus")


def test_0_4_1_logsumexp_of_an_array():
    import math

    import numpy as np

    from genlm.control.util import logsumexp

    assert logsumexp(np.log([0.25, 0.25, 0.5])) == pytest.approx(0.0, abs=1e-12)
    assert logsumexp(np.array([1000.0, 1000.0])) == pytest.approx(1000.0 + math.log(2))
    assert logsumexp(np.array([-np.inf, -np.inf])) == -np.inf


def test_0_4_1_lazy_weights_call_shapes():
    import numpy as np

    from genlm.control.constant import EOS
    from genlm.control.util import LazyWeights

    decode = [b"a", b"b", EOS]
    encode = {x: i for i, x in enumerate(decode)}
    lw = LazyWeights(np.log([0.2, 0.3, 0.5]), encode, decode)  # log=True by default
    assert lw.is_log and len(lw) == 3 and list(lw.keys()) == decode
    assert lw[b"b"] == pytest.approx(np.log(0.3)) and lw[EOS] == pytest.approx(np.log(0.5))
    assert lw[b"zz"] == -np.inf
    assert lw.sum() == pytest.approx(0.0, abs=1e-12)
    assert [k for k, _ in lw.items()] == decode
    p = lw.exp()
    assert not p.is_log and p[b"a"] == pytest.approx(0.2) and p[b"zz"] == 0
    doubled = lw.spawn(2 * lw.weights)
    assert doubled.is_log and doubled[b"a"] == pytest.approx(2 * np.log(0.2))
    assert lw.spawn(np.array([1.0, 1.0, 2.0]), log=False).normalize()[EOS] == pytest.approx(0.5)
    lw.assert_equal(lw.spawn(lw.weights.copy()))
    shuffled = LazyWeights(lw.weights[::-1].copy(), {x: 2 - i for x, i in encode.items()}, decode[::-1])
    lw.assert_equal_unordered(shuffled)


def test_0_4_1_end_of_sequence():
    from genlm.control.constant import EOS, EOT, EndOfSequence

    assert EndOfSequence("EOS") == EOS and EOS != EOT and EOS.type_ == "EOS"
    assert [b"a"] + EOS == [b"a", EOS]
    assert (1, 2) + EOS == (1, 2, EOS)
    assert b"ab" + EOS == [97, 98, EOS]
    with pytest.raises(TypeError):
        3 + EOS


def test_0_4_1_helpers_call_shapes():
    from genlm.control.lm._llm_loading import load_model
    from genlm.control.potential.built_in.llm import load_model_by_name
    from genlm.control.sampler import BoundaryPredicate, FixedLengthBoundary, TokenSetBoundary
    from genlm.control.util import flatten_units

    assert load_model_by_name is load_model
    assert flatten_units([[b"a", b"b"], [b"c"], b"d"]) == [b"a", b"b", b"c", b"d"]
    assert isinstance(FixedLengthBoundary(2), BoundaryPredicate)
    assert isinstance(TokenSetBoundary([b" "]), BoundaryPredicate)

    class Never(BoundaryPredicate):
        def __call__(self, unit_context, subunits):
            return False

    assert Never()([], [b"a"]) is False
    with pytest.raises(TypeError):
        BoundaryPredicate()  # abstract: __call__ must be defined
