"""genlm-control: controlled generation from language models by sequential Monte Carlo.

Multiply potentials (a language model, a regex, a grammar, a JSON schema, your own
scoring code), choose a token sampler, and run SMC to get weighted sequences from
the posterior `p(x) ∝ LM(x) · φ(x)`.
"""

from genlm.control._lazy import lazy_exports
from genlm.control.constant import EOS, EOT

_EXPORTS = {
    "SMC": "genlm.control.sampler.sequence",
    "Sequences": "genlm.control.sampler.sequence",
    "set_draw_method": "genlm.control.draw",
    "DRAW_METHODS": "genlm.control.draw",
    "Potential": "genlm.control.potential.base",
    "Product": "genlm.control.potential.product",
    "Tempered": "genlm.control.potential.reweight",
    "Normalized": "genlm.control.potential.reweight",
    "Coerced": "genlm.control.potential.coerce",
    "AutoBatchedPotential": "genlm.control.potential.autobatch",
    "MultiProcPotential": "genlm.control.potential.multi_proc",
    "PromptedLLM": "genlm.control.potential.built_in.llm",
    "ByteLLM": "genlm.control.potential.built_in.bytelm",
    "WCFG": "genlm.control.potential.built_in.wcfg",
    "BoolCFG": "genlm.control.potential.built_in.wcfg",
    "WFSA": "genlm.control.potential.built_in.wfsa",
    "BoolFSA": "genlm.control.potential.built_in.wfsa",
    "JsonSchema": "genlm.control.potential.built_in.json",
    "CanonicalTokenization": "genlm.control.potential.built_in.canonical",
    "Ensemble": "genlm.control.potential.built_in.ensemble",
    "AWRS": "genlm.control.sampler.awrs",
    "direct_token_sampler": "genlm.control.sampler.token",
    "eager_token_sampler": "genlm.control.sampler.set",
    "topk_token_sampler": "genlm.control.sampler.set",
    "InferenceVisualizer": "genlm.control.viz",
    "EMBEDDED_MODEL": "genlm.control.embedded",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = ["EOS", "EOT", *_EXPORTS]
__version__ = "0.5.0"
