"""One planner (`genlm.control.potential.planner.compile_for`) serves every `coerce`:
the class it picks for each input, the engine-backed coercion as a proper `Coerced`
(no symbol trie), the fast paths of the engine's potentials, and `engine=` on a
potential without an engine form."""

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytest.importorskip("llguidance")

from genlm.control import WFSA, BoolCFG, BoolFSA, CanonicalTokenization, JsonSchema, Potential  # noqa: E402
from genlm.control.constraints.cfg._cfg_budget import CoercedCFG  # noqa: E402
from genlm.control.constraints.fsa._fsa_coerce import CoercedDFA  # noqa: E402
from genlm.control.constraints.json_schema._json_coerce import CoercedJson  # noqa: E402
from genlm.control.engine.guided import GuidedCoerced, GuidedConstraint  # noqa: E402
from genlm.control.potential import fast_paths  # noqa: E402
from genlm.control.potential.coerce import Coerced, SymbolTrie  # noqa: E402
from genlm.control.potential.planner import EngineSource, compile_for  # noqa: E402
from genlm.control.weights import NEG_INF  # noqa: E402

# maximal munch differs, and a terminal over non-ASCII bytes is not lowered: generic by default
AMBIGUOUS_LARK = 'start: A B\nA: /é+/\nB: /é/\n'


class Digits(Potential):
    """Byte strings of digits, with a declared engine form (the regex `[0-9]+`)."""

    def __init__(self):
        super().__init__(list(range(256)))

    async def prefix(self, context):
        return 0.0 if all(48 <= b <= 57 for b in context) else NEG_INF

    async def complete(self, context):
        return 0.0 if context and await self.prefix(context) == 0.0 else NEG_INF

    def engine_source(self):
        return EngineSource("regex", "[0-9]+")


def _plans():
    join = b"".join
    return [
        ("regex-onto-llm", lambda llm: BoolFSA.from_regex(r"[0-9]+"), "llm", join, None, GuidedCoerced),
        ("regex-engine-off", lambda llm: BoolFSA.from_regex(r"[0-9]+"), "llm", join, False, CoercedDFA),
        ("regex-onto-a-list", lambda llm: BoolFSA.from_regex(r"[0-9]+"), "list", join, None, CoercedDFA),
        ("regex-not-join", lambda llm: BoolFSA.from_regex(r"[0-9]+"), "llm", lambda xs: join(xs), None, Coerced),
        ("weighted-regex", lambda llm: WFSA.from_regex(r"[0-9]+"), "llm", join, None, CoercedDFA),
        ("lark-exact", lambda llm: BoolCFG.from_lark('start: "1" start | "2"'), "llm", join, None, GuidedCoerced),
        ("lark-inexact", lambda llm: BoolCFG.from_lark(AMBIGUOUS_LARK), "llm", join, None, CoercedCFG),
        ("lark-inexact-forced", lambda llm: BoolCFG.from_lark(AMBIGUOUS_LARK), "llm", join, True, GuidedCoerced),
        ("cfg-from-string", lambda llm: BoolCFG.from_string("1: S -> a"), "llm", join, None, CoercedCFG),
        ("json-exact", lambda llm: JsonSchema({"type": "integer"}), "llm", join, None, GuidedCoerced),
        # a pattern beside a length bound has no engine grammar of exactly its strings
        ("json-inexact", lambda llm: JsonSchema({"type": "string", "pattern": "^a+$", "maxLength": 3}), "llm", join, None, CoercedJson),
        ("json-inexact-forced", lambda llm: JsonSchema({"type": "string", "pattern": "^a+$"}), "llm", join, True, GuidedCoerced),
        ("user-engine-form", lambda llm: Digits(), "llm", join, None, GuidedCoerced),
        ("user-engine-off", lambda llm: Digits(), "llm", join, False, Coerced),
    ]


PLANS = _plans()


@pytest.mark.parametrize("name, make, target, f, engine, cls", PLANS, ids=[p[0] for p in PLANS])
def test_the_planner_picks_one_class_per_input(llm, name, make, target, f, engine, cls):
    other = llm if target == "llm" else list(llm.vocab)
    p = make(llm)
    assert type(p.coerce(other, f, engine=engine)) is cls
    assert type(compile_for(p, other, f, engine=engine)) is cls


def test_the_engine_coercion_is_a_coerced_without_a_trie(llm, monkeypatch):
    def no_trie(*args, **kwargs):
        raise AssertionError("the engine-backed coercion built a symbol trie")

    monkeypatch.setattr(SymbolTrie, "build", no_trie)
    fsa = BoolFSA.from_regex(r"[0-9]+")
    c = fsa.coerce(llm, b"".join)
    assert isinstance(c, Coerced) and type(c) is GuidedCoerced
    assert c.potential is fsa and c.f == b"".join and c.homomorphic and c.prune
    assert c.trie is None and c.tables is llm.tables
    assert repr(c).startswith("Coerced(GuidedConstraint(regex=")


async def test_the_engine_coercion_has_the_generic_values(llm):
    fsa = BoolFSA.from_regex(r"[0-9]+")
    engine, generic = fsa.coerce(llm, b"".join), fsa.coerce(llm, b"".join, engine=False)
    digit = next(t for t in llm.vocab if bytes(t) == b"7")
    for ctx in ([], [digit], [digit, digit]):
        e, g = (await engine.logw_next(ctx)).weights, (await generic.logw_next(ctx)).weights
        live = generic.vocab_eos
        row = np.array([e[llm.lookup[x]] if x in llm.lookup else e[-1] for x in live])
        assert (row > NEG_INF).tolist() == (g > NEG_INF).tolist()


def test_the_engine_potentials_declare_their_paths(llm):
    want = {"cheap_logw_next", "allowed_next", "batch_allowed"}
    guided = GuidedConstraint.from_regex(llm, r"[0-9]+")
    coerced = BoolFSA.from_regex(r"[0-9]+").coerce(llm, b"".join)
    for p in (guided, guided.to_autobatched()):
        assert fast_paths.declared(p) == frozenset(want), p
    # the regex's coercion also counts the tokens left to acceptance (its automaton's, with
    # the largest count per state)
    for p in (coerced, coerced.to_autobatched()):
        assert fast_paths.declared(p) == frozenset(want | {"tokens_to_finish", "most_tokens_to_finish"}), p
    # the engine route, and the EOS entries the end twist reads from the model's block
    offered = frozenset({"compiled_coercion", "eos_entries"})
    assert fast_paths.declared(llm) == offered
    assert fast_paths.declared(llm.to_autobatched()) == offered
    canonical = CanonicalTokenization.from_llm(llm)
    assert fast_paths.declared(canonical) == {"sparse_logw_next"}
    assert fast_paths.declared(canonical.to_autobatched()) == {"sparse_logw_next"}


async def test_the_forwarded_set_checks_answer_as_the_engine(llm):
    guided = GuidedConstraint.from_regex(llm, r"[0-9]+")
    coerced = BoolFSA.from_regex(r"[0-9]+").coerce(llm, b"".join).to_autobatched()
    indices = np.arange(len(llm.vocab_eos))
    for ctx in ([], [next(t for t in llm.vocab if bytes(t) == b"1")]):
        want = np.asarray(await guided.allowed_next(ctx, indices), dtype=bool)
        got = np.asarray(await fast_paths.allowed_next(coerced)(ctx, indices), dtype=bool)
        block = await fast_paths.batch_allowed(coerced)([ctx])
        assert got.tolist() == want.tolist() == np.asarray(block[0]).tolist()


def test_engine_true_without_an_engine_form_is_a_value_error(llm):
    with pytest.raises(ValueError, match="engine=True needs a BoolFSA.from_regex, BoolCFG.from_lark or JsonSchema"):
        CanonicalTokenization.from_llm(llm).coerce(llm, lambda xs: xs, engine=True)
    with pytest.raises(ValueError, match="engine=True needs a BoolFSA built by from_regex"):
        WFSA.from_regex("ab").coerce(llm, b"".join, engine=True)
    with pytest.raises(ValueError, match="engine=True needs a BoolCFG built by from_lark"):
        BoolCFG.from_string("1: S -> a").coerce(llm, b"".join, engine=True)


def test_the_built_in_constraints_hand_the_engine_their_raw_source():
    assert BoolFSA.from_regex(r"\d+").engine_source() == EngineSource("regex", r"\d+")
    cfg = BoolCFG.from_lark('start: "1" start | "2"')
    form = cfg.engine_source()
    assert (form.kind, form.source, form.parsed) == ("lark", 'start: "1" start | "2"', cfg.lark_parsed)
    schema = {"type": "integer"}
    assert JsonSchema(schema).engine_source() == EngineSource("json_schema", schema, spelling="any")


class DigitsForm(Digits):
    """`Digits` with a chosen engine form."""

    def __init__(self, form):
        super().__init__()
        self.form = form

    def engine_source(self):
        return self.form


def test_the_engine_reads_a_lark_form_without_a_parsed_grammar(llm):
    p = DigitsForm(EngineSource("lark", "start: N\nN: /[0-9]+/\n"))
    assert type(p.coerce(llm, b"".join)) is GuidedCoerced
    bad = DigitsForm(EngineSource("lark", "start: missing_rule\n"))
    assert type(bad.coerce(llm, b"".join)) is Coerced
    with pytest.raises(ValueError, match="not read as BoolCFG.from_lark reads it"):
        bad.coerce(llm, b"".join, engine=True)


def test_a_regex_form_means_what_it_means_to_from_regex(llm):
    # `\p{N}` is engine syntax that Python's `re` (and so `BoolFSA.from_regex`) refuses:
    # the engine never compiles a pattern with another meaning than ours.
    p = DigitsForm(EngineSource("regex", r"\p{N}+"))
    assert type(p.coerce(llm, b"".join)) is Coerced
    with pytest.raises(ValueError, match="does not express this constraint exactly"):
        p.coerce(llm, b"".join, engine=True)


def test_a_reason_the_form_gives_keeps_the_default_off_the_engine(llm):
    p = DigitsForm(EngineSource("regex", "[0-9]+", inexact="declared by the potential"))
    assert type(p.coerce(llm, b"".join)) is Coerced
    assert type(p.coerce(llm, b"".join, engine=True)) is GuidedCoerced
