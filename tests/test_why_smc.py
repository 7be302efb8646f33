"""The pieces of `benchmarks/why_smc.py` on a bigram LM small enough to do by hand."""

import asyncio
import sys
from pathlib import Path

import numpy as np
import pytest
from toys import ab_lm

from genlm.control import BoolFSA
from genlm.control.testing import enumerate_target

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from why_smc import empirical, masking_distribution, tv  # noqa: E402

# ab_lm: p(a), p(b), p(EOS) = .5 .3 .2 at the start, .3 .4 .3 after a, .5 .1 .4 after b.
# The language {a, bb}: p ∝ (.5 · .3, .3 · .1 · .4) = (.15, .012); masking draws a or b
# from (.5, .3) renormalised, then has one allowed token at every later step.
EXACT = {b"a": 0.15 / 0.162, b"bb": 0.012 / 0.162}
MASKING = {b"a": 0.5 / 0.8, b"bb": 0.3 / 0.8}


def _condition(lm, pattern):
    return BoolFSA.from_regex(pattern).coerce(lm, f=b"".join)


def test_masking_distribution_in_closed_form_and_its_distance_to_the_posterior():
    lm = ab_lm()
    condition = _condition(lm, "a|bb")
    q = asyncio.run(masking_distribution(lm, condition, 4))
    exact = asyncio.run(enumerate_target(lm, 4, condition=condition))
    assert set(q) == set(EXACT) == set(exact.posterior)
    for s in EXACT:
        assert q[s] == pytest.approx(MASKING[s], abs=1e-12)
        assert exact.posterior[s] == pytest.approx(EXACT[s], abs=1e-12)
    assert sum(q.values()) == pytest.approx(1.0, abs=1e-12)
    # masking moves 0.301 of the mass from "a" to "bb"
    assert tv(q, exact.posterior) == pytest.approx(EXACT[b"a"] - MASKING[b"a"], abs=1e-12)


def test_masking_is_the_posterior_when_one_path_spells_the_language():
    lm = ab_lm()
    condition = _condition(lm, "ab")
    q = asyncio.run(masking_distribution(lm, condition, 3))
    assert q == pytest.approx({b"ab": 1.0})


def test_a_budget_that_cuts_the_language_is_an_error():
    lm = ab_lm()
    with pytest.raises(ValueError, match="cuts the language"):
        asyncio.run(masking_distribution(lm, _condition(lm, "(a|b)*"), 3))


def test_tv_and_empirical_laws():
    assert tv({"x": 1.0}, {"y": 1.0}) == 1.0
    assert tv(MASKING, MASKING) == 0.0
    rng = np.random.default_rng(0)
    draws = empirical(MASKING, 40_000, rng)
    # σ of an empirical frequency: sqrt(q(1-q)/n) ≈ 0.0024; 5σ
    assert abs(draws[b"a"] - MASKING[b"a"]) < 0.013


def test_the_docs_page_shows_what_the_saved_benchmark_prints():
    import json

    from why_smc import table

    root = Path(__file__).resolve().parent.parent
    results = json.loads((root / "docs/img/why-smc.json").read_text())
    page = (root / "docs/why-smc.md").read_text()
    assert len(results) >= 3
    for result in results:
        assert table(result, result["seeds"]) in page, result["language"]["name"]
    for name in ("tv", "logz", "posterior"):
        assert (
            f"img/why-smc-{name}.svg" in page and (root / f"docs/img/why-smc-{name}.svg").exists()
        )
