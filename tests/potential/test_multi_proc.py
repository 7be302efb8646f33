import numpy as np
import pytest
from core_toys import random_tabular

from genlm.control.potential import MultiProcPotential
from genlm.control.testing import check_potential


@pytest.fixture(scope="module")
def pair():
    p = random_tabular(["a", "b"], np.random.default_rng(7), p_zero=0.1)
    mp = p.to_multiprocess(num_workers=2)
    yield p, mp
    mp.cleanup()


async def test_values_equal_the_in_process_potential(pair):
    p, mp = pair
    assert isinstance(mp, MultiProcPotential)
    assert mp.vocab_eos == p.vocab_eos
    contexts = [[], ["a"], ["b", "a"], ["a", "b", "b"]]
    np.testing.assert_allclose(await mp.batch_prefix(contexts), await p.batch_prefix(contexts))
    np.testing.assert_allclose(
        await mp.batch_complete(contexts), await p.batch_complete(contexts)
    )
    for c in contexts:
        if await p.prefix(c) > -np.inf:
            np.testing.assert_allclose(
                (await mp.logw_next(c)).weights, (await p.logw_next(c)).weights
            )
    live = [c for c in contexts if await p.prefix(c) > -np.inf]
    await check_potential(mp, live)


def test_num_workers_must_be_positive():
    with pytest.raises(ValueError, match="num_workers"):
        MultiProcPotential(lambda: None, (), num_workers=0)
