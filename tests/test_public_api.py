"""Every public name and import path that SPEC.md promises."""

import importlib

import pytest

TOP_LEVEL = [
    "EOS", "EOT", "SMC", "set_draw_method", "DRAW_METHODS", "Potential", "PromptedLLM",
    "ByteLLM", "WCFG", "BoolCFG", "WFSA", "BoolFSA", "JsonSchema", "CanonicalTokenization",
    "Ensemble", "AWRS", "direct_token_sampler", "eager_token_sampler", "topk_token_sampler",
    "InferenceVisualizer",
]  # fmt: skip

PATHS = {
    "genlm.control.potential": [
        "Potential", "Product", "Tempered", "Normalized", "Coerced", "AutoBatchedPotential",
        "MultiProcPotential", "PromptedLLM", "WFSA", "BoolFSA", "WCFG", "BoolCFG", "JsonSchema",
        "CanonicalTokenization", "ByteLLM", "Ensemble",
    ],
    "genlm.control.potential.built_in": [
        "PromptedLLM", "WFSA", "BoolFSA", "WCFG", "BoolCFG", "JsonSchema",
        "CanonicalTokenization", "ByteLLM", "Ensemble",
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
        "LazyWeights",
    ],
    "genlm.control.constant": ["EOS", "EOT"],
    "genlm.control.testing": ["check_potential"],
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
