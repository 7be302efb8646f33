"""genlm-control: controlled generation from language models by sequential Monte Carlo.

Multiply potentials (a language model, a regex, a grammar, a JSON schema, your own
scoring code), choose a token sampler, and run SMC to get weighted sequences from
the posterior `p(x) ∝ LM(x) · φ(x)`.
"""

from genlm.control._lazy import lazy_exports
from genlm.control.constant import EOS, EOT
from genlm.control.potential import _EXPORTS as _POTENTIAL_EXPORTS

_EXPORTS = {
    "SMC": "genlm.control.sampler.sequence",
    "Sequences": "genlm.control.sampler.sequence",
    "set_draw_method": "genlm.control.draw",
    "DRAW_METHODS": "genlm.control.draw",
    **{k: v for k, v in _POTENTIAL_EXPORTS.items() if k not in ("SparseLogws", "VocabTables")},
    "AWRS": "genlm.control.sampler.awrs",
    "direct_token_sampler": "genlm.control.sampler.token",
    "eager_token_sampler": "genlm.control.sampler.set",
    "topk_token_sampler": "genlm.control.sampler.set",
    "InferenceVisualizer": "genlm.control.viz",
    "EMBEDDED_MODEL": "genlm.control.embedded",
    "run": "genlm.control.blocking",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = ["EOS", "EOT", *_EXPORTS]
__version__ = "0.5.0"
