"""`explain_coercion`: one decision per coercion (`EngineDecision`), the same one the
coercion takes: its exactness and reason for each outcome, the engine it serves, the
debug line and the `engine=True` error it produces."""

import logging
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytest.importorskip("llguidance")

from potential.test_planner import DigitsForm  # noqa: E402

from genlm.control import BoolCFG, BoolFSA, JsonSchema  # noqa: E402
from genlm.control.engine import EngineDecision, Exactness, explain_coercion  # noqa: E402
from genlm.control.engine.guided import GuidedCoerced  # noqa: E402
from genlm.control.potential import Coerced  # noqa: E402
from genlm.control.potential.planner import NO_ROUTE, EngineSource  # noqa: E402

BOUNDED = {"type": "number", "minimum": 1, "maximum": 5}
UNIQUE = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
PERSON = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
MUNCH = "start: A A\nA: /é+/"


def test_a_regex_is_exact(llm):
    d = explain_coercion(BoolFSA.from_regex(r"[ab]+c"), llm)
    assert isinstance(d, EngineDecision)
    assert (d.exactness, d.kind, d.reason) == (Exactness.EXACT, "regex", None)
    assert d.source is not None and d.takes_engine(None) and not d.takes_engine(False)
    assert isinstance(BoolFSA.from_regex(r"[ab]+c").coerce(llm, b"".join), GuidedCoerced)


def test_a_schema_off_the_whitelist_is_exact_as_its_written_grammar(llm):
    d = explain_coercion(JsonSchema(PERSON, spelling="any"), llm)
    assert (d.exactness, d.kind, d.reason) == (Exactness.EXACT, "lark", None)
    assert d.source.startswith("start: ")
    # with engine=True the schema goes to the engine as written, and may differ
    forced = explain_coercion(JsonSchema(PERSON, spelling="any"), llm, engine=True)
    assert (forced.exactness, forced.kind, forced.source) == (
        Exactness.INEXACT,
        "json_schema",
        PERSON,
    )
    assert forced.reason.startswith("the engine's language may differ: ")
    assert "objects: the engine writes declared properties" in forced.reason


def test_a_bounded_number_is_checked(llm):
    d = explain_coercion(JsonSchema(BOUNDED, spelling="any"), llm)
    assert (d.exactness, d.kind) == (Exactness.CHECKED, "json_checked")
    assert d.source.sub is not None and "checked exactly" in d.reason
    assert d.takes_engine(None)
    assert type(JsonSchema(BOUNDED, spelling="any").coerce(llm, b"".join)).__name__ != "Coerced"


def test_a_superset_on_prefixes_is_checked_at_eos(llm):
    d = explain_coercion(JsonSchema(UNIQUE, spelling="any"), llm)
    assert (d.exactness, d.kind) == (Exactness.CHECKED, "json_checked")
    assert d.source.sub is None and "checked at EOS" in d.reason


def test_a_lark_grammar_off_the_lexing_rule_is_inexact(llm, caplog):
    cfg = BoolCFG.from_lark(MUNCH)
    d = explain_coercion(cfg, llm)
    assert d.exactness is Exactness.INEXACT and d.kind == "lark"
    assert d.reason.startswith("the engine's language may differ: ") and "maximal munch" in d.reason
    assert not d.takes_engine(None) and d.takes_engine(True)
    with caplog.at_level(logging.DEBUG, logger="genlm.control.engine.guided"):
        assert type(cfg.coerce(llm, b"".join)) is not GuidedCoerced
    # the planner's debug line is the decision's reason, word for word
    assert f"coerce: the lark constraint takes the generic path: {d.reason}" in caplog.text
    assert isinstance(cfg.coerce(llm, b"".join, engine=True), GuidedCoerced)


def test_a_pattern_our_reader_refuses_is_unwritable(llm):
    p = DigitsForm(EngineSource("regex", r"\p{N}+"))
    d = explain_coercion(p, llm)
    assert (d.exactness, d.kind, d.source) == (Exactness.UNWRITABLE, "regex", None)
    assert d.reason.startswith("the engine does not express this constraint exactly: ")
    assert not d.takes_engine(True)
    assert type(p.coerce(llm, b"".join)) is Coerced
    with pytest.raises(ValueError) as info:
        p.coerce(llm, b"".join, engine=True)
    assert (
        str(info.value)
        == f"engine=True, but the compiled engine cannot serve this regex: {d.reason}"
    )


def test_a_grammar_the_engine_refuses_to_build_is_unwritable_with_its_message(llm):
    p = DigitsForm(EngineSource("nonsense", "x"))  # a kind the engine does not know
    d = explain_coercion(p, llm)
    assert (d.exactness, d.kind, d.source) == (Exactness.UNWRITABLE, "nonsense", None)
    with pytest.raises(ValueError) as info:
        p.coerce(llm, b"".join, engine=True)
    assert str(info.value).endswith(d.reason)


def test_targets_and_potentials_without_an_engine_form_are_unwritable(llm):
    fsa = BoolFSA.from_regex("ab")
    on_list = explain_coercion(fsa, list(llm.vocab))
    assert (on_list.exactness, on_list.kind, on_list.reason) == (
        Exactness.UNWRITABLE,
        "regex",
        NO_ROUTE,
    )
    mapped = explain_coercion(fsa, llm, f=lambda xs: b"".join(xs))
    assert mapped.exactness is Exactness.UNWRITABLE and mapped.reason == 'f is not b"".join'
    plain = explain_coercion(BoolFSA.from_regex("ab") * BoolFSA.from_regex("a."), llm)
    assert plain.exactness is Exactness.UNWRITABLE and "no engine form" in plain.reason


def test_engine_false_reports_what_the_default_decides(llm):
    fsa = BoolFSA.from_regex(r"[0-9]+")
    assert explain_coercion(fsa, llm, engine=False) == explain_coercion(fsa, llm)
    assert not explain_coercion(fsa, llm, engine=False).takes_engine(False)


def test_an_autobatched_model_is_explained_as_the_model(llm):
    fsa = BoolFSA.from_regex(r"[0-9]+")
    assert explain_coercion(fsa, llm.to_autobatched()) == explain_coercion(fsa, llm)
