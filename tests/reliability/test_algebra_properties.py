"""Property tests: product, tempering, normalization and coercion of random tiny
potentials keep the `genlm.control.testing` contract."""

import itertools
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from genlm.control import Potential
from genlm.control.testing import check_potential

SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


class Table(Potential):
    """A finite language: `complete(xs) = log w[xs]`, `prefix(xs) = log Σ_{ys ⊒ xs} w[ys]`."""

    def __init__(self, vocab, weights: dict):
        super().__init__(vocab)
        self.weights = weights

    @staticmethod
    def _log(x):
        return math.log(x) if x > 0 else -math.inf

    async def prefix(self, context):
        n, ctx = len(context), tuple(context)
        return self._log(sum(w for k, w in self.weights.items() if k[:n] == ctx))

    async def complete(self, context):
        return self._log(self.weights.get(tuple(context), 0.0))


def _sequences(vocab, max_len):
    for n in range(max_len + 1):
        yield from itertools.product(vocab, repeat=n)


weight = st.one_of(st.just(0.0), st.floats(0.05, 1.0))


@st.composite
def tables(draw, vocab, max_len=3):
    weights = {seq: draw(weight) for seq in _sequences(vocab, max_len)}
    weights[()] = max(weights[()], 0.01)  # the empty context keeps some weight
    return Table(vocab, weights)


AB = [b"a", b"b"]
CONTEXTS = [list(c) for c in _sequences(AB, 2)]


@SETTINGS
@given(tables(AB), tables(AB))
async def test_product_keeps_the_contract(p, q):
    await check_potential(p * q, CONTEXTS)


@SETTINGS
@given(tables(AB), st.floats(0.1, 4.0))
async def test_tempering_keeps_the_contract(p, a):
    await check_potential(p**a, CONTEXTS)


@SETTINGS
@given(tables(AB))
async def test_normalization_keeps_the_contract_and_sums_to_one(p):
    n = p.normalize()
    await check_potential(n, CONTEXTS)
    for c in CONTEXTS:
        if await p.prefix(c) > -math.inf:
            row = (await n.logw_next(c)).weights
            total = math.fsum(math.exp(x) for x in row)
            assert total == 0.0 or abs(total - 1.0) < 1e-9


@SETTINGS
@given(tables(AB), tables(AB), st.floats(0.2, 3.0))
async def test_composite_expressions_keep_the_contract(p, q, a):
    await check_potential((p * q**a).normalize() * p, CONTEXTS)


BYTES = [97, 98]  # byte values of "a" and "b"
TOKENS = [b"a", b"b", b"ab", b"ba"]


@SETTINGS
@given(tables(BYTES, max_len=4), st.booleans())
async def test_coercion_keeps_the_contract(p, homomorphic):
    coerced = p.coerce(TOKENS, b"".join, homomorphic=homomorphic or None)
    contexts = [list(c) for c in _sequences(TOKENS, 2)]
    await check_potential(coerced, contexts)


@SETTINGS
@given(tables(BYTES, max_len=4), tables(BYTES, max_len=4))
async def test_product_of_coercions_keeps_the_contract(p, q):
    vocab = TOKENS[:3]
    both = p.coerce(vocab, b"".join) * q.coerce(vocab, b"".join)
    await check_potential(both, [list(c) for c in _sequences(vocab, 2)])
