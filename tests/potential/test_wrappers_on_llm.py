"""The `genlm.control.testing` contract for every wrapper over the embedded model."""

import pytest

from genlm.control import BoolFSA, PromptedLLM
from genlm.control.embedded import EMBEDDED_MODEL
from genlm.control.potential import (
    AutoBatchedPotential,
    Coerced,
    MultiProcPotential,
    Normalized,
    Product,
    Tempered,
)
from genlm.control.testing import check_potential


@pytest.fixture(scope="module")
def llm():
    llm = PromptedLLM.from_name(EMBEDDED_MODEL)
    llm.set_prompt_from_str("The value of x is")
    return llm


@pytest.fixture(scope="module")
def contexts(llm):
    return [[], llm.tokenize(" 4"), llm.tokenize(" 42."), llm.tokenize(" the value")]


def digits(llm):
    return BoolFSA.from_regex(r" [0-9]+\.").coerce(llm, f=b"".join)


WRAPPERS = {
    "product": lambda llm: llm * digits(llm),
    "tempered": lambda llm: llm**0.5,
    "normalized": lambda llm: (llm**2).normalize(),
    "coerced": digits,
    "coerced-generic": lambda llm: BoolFSA.from_regex(r" [0-9]+\.").coerce(
        llm, f=b"".join, engine=False
    ),
    "autobatched": lambda llm: llm.to_autobatched(),
}
KINDS = {
    "product": Product,
    "tempered": Tempered,
    "normalized": Normalized,
    "coerced": Coerced,
    "coerced-generic": Coerced,
    "autobatched": AutoBatchedPotential,
}


@pytest.mark.parametrize("name", sorted(WRAPPERS))
async def test_wrapper_keeps_the_contract(llm, contexts, name):
    p = WRAPPERS[name](llm)
    assert isinstance(p, KINDS[name])
    await check_potential(p, contexts, top=40, rtol=1e-4, atol=1e-4)


async def test_prompted_llm_keeps_the_contract(llm, contexts):
    await check_potential(llm, contexts, top=40, rtol=1e-4, atol=1e-4)


async def test_multiprocess_llm_keeps_the_contract_and_matches(llm, contexts):
    mp = llm.to_multiprocess(num_workers=2)
    try:
        assert isinstance(mp, MultiProcPotential)
        for c in contexts:
            assert await mp.prefix(c) == pytest.approx(await llm.prefix(c), abs=1e-5)
        await check_potential(mp, contexts[:2], top=20, rtol=1e-4, atol=1e-4)
    finally:
        mp.cleanup()
