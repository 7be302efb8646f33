"""The bad-input catalogue of docs/bad-input.md: one case per row, each a clear
`ValueError`/`TypeError` naming the problem (or the documented -inf)."""

import math
import os

import pytest
from toys.reliability import AB, Flat, NoBB, ab_lm, assert_clear_error, undocumented

from genlm.control import (
    AWRS,
    EOS,
    SMC,
    BoolCFG,
    BoolFSA,
    JsonSchema,
    PromptedLLM,
    direct_token_sampler,
    set_draw_method,
)
from genlm.control.embedded import EMBEDDED_MODEL
from genlm.control.sampler.token import DirectTokenSampler

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _smc(**kw):
    args = dict(n_particles=2, ess_threshold=0.5, max_tokens=3)
    args.update(kw)
    return direct_token_sampler(ab_lm()).smc(**args)


_MOCK = {}


def _mock_llm():
    if "llm" not in _MOCK:
        _MOCK["llm"] = PromptedLLM.from_name(EMBEDDED_MODEL, backend="mock")
    return _MOCK["llm"]


# (row id, thunk, error type, message pattern); keep in the order of docs/bad-input.md
ROWS = [
    # Vocabularies
    ("vocab-empty", lambda: Flat([]), ValueError, "vocabulary is empty"),
    ("vocab-none", lambda: Flat(None), ValueError, "needs a vocabulary"),
    ("vocab-str", lambda: Flat("ab"), TypeError, "sequence of tokens"),
    ("vocab-int", lambda: Flat(5), TypeError, "sequence of tokens"),
    ("vocab-mixed-types", lambda: Flat([b"a", "a"]), TypeError, "mixes token types"),
    ("vocab-duplicates", lambda: Flat([b"a", b"a"]), ValueError, "duplicate"),
    ("vocab-contains-eos", lambda: Flat([b"a", EOS]), TypeError, "end marker"),
    # Products, powers, coercions
    ("product-not-potential", lambda: ab_lm() * 3, TypeError, "unsupported operand"),
    ("product-token-types", lambda: ab_lm() * Flat([1, 2]), TypeError, "different token types"),
    ("product-disjoint", lambda: ab_lm() * Flat([b"c"]), ValueError, "share no token"),
    ("power-inf", lambda: ab_lm() ** math.inf, ValueError, "exponent"),
    ("power-nan", lambda: ab_lm() ** math.nan, ValueError, "exponent"),
    ("power-str", lambda: ab_lm() ** "a", ValueError, "exponent"),
    ("coerce-f-not-callable", lambda: NoBB().coerce(ab_lm(), 3), TypeError, "callable f"),
    ("coerce-other-not-vocab", lambda: NoBB().coerce(5, b"".join), TypeError, "Potential or a vocabulary"),
    (
        "coerce-no-token-maps",
        lambda: Flat([b"x"]).coerce(ab_lm(), lambda xs: [b"z" + x for x in xs]),
        ValueError,
        "no token of the target vocabulary",
    ),
    # Samplers
    ("sampler-not-potential", lambda: direct_token_sampler(3), TypeError, "must be a Potential"),
    ("proposal-not-potential", lambda: DirectTokenSampler(ab_lm(), 3), TypeError, "proposal must be"),
    ("proposal-vocab-mismatch", lambda: DirectTokenSampler(ab_lm(), Flat([b"a"])), ValueError, "vocabulary must equal"),
    ("awrs-condition-not-potential", lambda: AWRS(ab_lm(), 3), TypeError, "condition must be"),
    ("awrs-condition-vocab-mismatch", lambda: AWRS(ab_lm(), Flat([b"a", b"x"])), ValueError, "subset of the potential's"),
    ("awrs-max-accepts", lambda: AWRS(ab_lm(), NoBB(), max_accepts=0), ValueError, "max_accepts"),
    ("smc-not-sampler", lambda: SMC(ab_lm()), TypeError, "TokenSampler"),
    ("critic-not-potential", lambda: SMC(direct_token_sampler(ab_lm()), "x"), TypeError, "critic must be"),
    ("critic-token-type", lambda: SMC(direct_token_sampler(ab_lm()), Flat([1])), ValueError, "token type"),
    ("critic-disjoint", lambda: SMC(direct_token_sampler(ab_lm()), Flat([b"x"])), ValueError, "shares no token"),
    # SMC arguments
    ("n-particles-zero", lambda: _smc(n_particles=0), ValueError, "n_particles"),
    ("n-particles-negative", lambda: _smc(n_particles=-1), ValueError, "n_particles"),
    ("n-particles-float", lambda: _smc(n_particles=2.5), ValueError, "n_particles"),
    ("n-particles-str", lambda: _smc(n_particles="4"), ValueError, "n_particles"),
    ("ess-below-zero", lambda: _smc(ess_threshold=-0.1), ValueError, "ess_threshold"),
    ("ess-above-one", lambda: _smc(ess_threshold=1.1), ValueError, "ess_threshold"),
    ("ess-nan", lambda: _smc(ess_threshold=math.nan), ValueError, "ess_threshold"),
    ("ess-str", lambda: _smc(ess_threshold="0.5"), ValueError, "ess_threshold"),
    ("max-tokens-zero", lambda: _smc(max_tokens=0), ValueError, "max_tokens"),
    ("max-tokens-negative", lambda: _smc(max_tokens=-3), ValueError, "max_tokens"),
    ("max-tokens-float", lambda: _smc(max_tokens=2.0), ValueError, "max_tokens"),
    ("resampling-unknown", lambda: _smc(resampling_method="bogus"), ValueError, "resampling method"),
    ("seed-negative", lambda: _smc(seed=-1), ValueError, "seed"),
    ("seed-float", lambda: _smc(seed=1.5), ValueError, "seed"),
    ("terminate-when-not-callable", lambda: _smc(terminate_when=3), TypeError, "terminate_when"),
    ("verbosity-str", lambda: _smc(verbosity="x"), TypeError, "verbosity"),
    ("json-path-int", lambda: _smc(json_path=5), TypeError, "json_path"),
    ("draw-method-unknown", lambda: set_draw_method("bogus"), ValueError, "unknown draw method"),
    # Constraints
    ("regex-invalid", lambda: BoolFSA.from_regex("(a"), ValueError, "invalid regex"),
    ("regex-not-str", lambda: BoolFSA.from_regex(5), TypeError, "must be a str"),
    ("lark-invalid", lambda: BoolCFG.from_lark("start: (("), ValueError, "invalid Lark grammar"),
    ("lark-not-str", lambda: BoolCFG.from_lark(5), TypeError, "Lark grammar must be a str"),
    ("cfg-string-invalid", lambda: BoolCFG.from_string("S -> ("), ValueError, "invalid grammar"),
    ("schema-invalid", lambda: JsonSchema({"type": "nonsense"}), ValueError, "invalid JSON schema"),
    ("schema-not-dict", lambda: JsonSchema(5), TypeError, "JSON schema is a dict"),
    ("schema-as-str", lambda: JsonSchema('{"type": "string"}'), TypeError, "JSON schema is a dict"),
    # Contexts with tokens outside the vocabulary
    ("fsa-foreign-token", lambda: BoolFSA.from_regex("ab").prefix([b"zz"]), TypeError, "not a byte value"),
    ("fsa-out-of-range-byte", lambda: BoolFSA.from_regex("ab").logw_next([300]), TypeError, "not a byte value"),
    ("cfg-foreign-token", lambda: BoolCFG.from_lark('start: "a"').prefix([300]), TypeError, "not a byte value"),
    ("schema-foreign-token", lambda: JsonSchema({"type": "string"}).prefix([b'"']), TypeError, "not a byte value"),
    ("llm-foreign-token", lambda: _mock_llm().prefix([b"\xff\xfe not a token"]), ValueError, "not in the language model"),
    ("llm-eos-token-in-context", lambda: _mock_llm().logw_next([_mock_llm().token_maps.eos_tokens[0]]), ValueError, "not in the language model"),
    ("llm-prompt-id-out-of-range", lambda: setattr(_mock_llm().spawn(), "prompt_ids", [10**9]), ValueError, "outside the vocabulary"),
    ("llm-eos-not-a-token", lambda: _mock_llm().spawn_new_eos([b"\xff\xfe not a token"]), ValueError, "not a token"),
    ("llm-eos-empty", lambda: _mock_llm().spawn_new_eos([]), ValueError, "empty"),
    ("llm-temperature", lambda: PromptedLLM.from_name(EMBEDDED_MODEL, backend="mock", temperature=0), ValueError, "temperature"),
    ("llm-backend-unknown", lambda: PromptedLLM.from_name(EMBEDDED_MODEL, backend="tpu"), ValueError, "unknown backend"),
]


@pytest.mark.parametrize("thunk, err, match", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
async def test_bad_input_gives_a_clear_error(thunk, err, match):
    await assert_clear_error(thunk, err, match)


def test_every_row_is_documented():
    missing = undocumented(r[0] for r in ROWS)
    assert not missing, f"rows without a line in docs/bad-input.md: {missing}"


# Rows whose answer is a value, not an error -----------------------------------


async def test_foreign_token_in_lazy_weights_has_weight_zero():
    row = await ab_lm().logw_next([])
    assert row[b"z"] == -math.inf


async def test_user_potential_sees_foreign_tokens_itself():
    # the base class cannot validate contexts for every subclass: the toy's own lookup raises
    with pytest.raises(KeyError):
        await ab_lm().prefix([b"z"])


async def test_samplers_never_produce_foreign_tokens():
    seqs = await SMC(AWRS(ab_lm(), NoBB()))(8, 0.5, 6, seed=0)
    assert {t for ctx in seqs.contexts for t in ctx[:-1]} <= set(AB)


def test_partial_critic_vocabulary_warns():
    with pytest.warns(UserWarning, match="lacks 1"):
        SMC(direct_token_sampler(ab_lm()), Flat([b"a"]))


def test_partial_product_vocabulary_warns():
    with pytest.warns(UserWarning, match="shared"):
        ab_lm() * Flat([b"a", b"c"])
