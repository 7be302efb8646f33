"""`Ensemble`: exact values against probability-space formulas, the contract, bad inputs."""

import itertools
import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from genlm.control import EOS, Ensemble, Potential  # noqa: E402
from genlm.control.embedded import EMBEDDED_MODEL  # noqa: E402
from genlm.control.lm.ensemble import op_exponent, power_mean  # noqa: E402
from genlm.control.testing import check_potential  # noqa: E402

MODEL = os.environ.get("GENLM_TEST_MODEL", EMBEDDED_MODEL)

VOCAB = [b"a", b"b", b"c"]


class Bigram(Potential):
    """A locally normalized bigram model: `T[prev, x]`, row 0 the start state, last column EOS."""

    def __init__(self, table, tables=None):
        super().__init__(VOCAB, tables=tables)
        self.table = np.asarray(table, dtype=np.float64)
        self.batch_calls = 0

    def _logp(self, context, finished):
        prev, total = 0, 0.0
        for t in list(context) + ([EOS] if finished else []):
            col = len(VOCAB) if t == EOS else VOCAB.index(t)
            p = self.table[prev, col]
            if p == 0:
                return float("-inf")
            total += math.log(p)
            prev = col + 1
        return total

    async def prefix(self, context):
        return self._logp(context, False)

    async def complete(self, context):
        return self._logp(context, True)

    async def logw_next(self, context):
        """The conditional row `T[last token]`, defined after any context (as an LM's is)."""
        prev = VOCAB.index(context[-1]) + 1 if context else 0
        with np.errstate(divide="ignore"):
            return self.make_lazy_weights(np.log(self.table[prev]))

    async def batch_logw_next(self, contexts):
        self.batch_calls += 1
        return await super().batch_logw_next(contexts)

    def spawn(self):
        return Bigram(self.table, tables=self.tables)


def random_table(rng, zeros=False):
    t = rng.random((len(VOCAB) + 1, len(VOCAB) + 1)) + 0.05
    if zeros:
        t[rng.random(t.shape) < 0.3] = 0.0
        t[:, -1] = np.maximum(t[:, -1], 0.1)  # every state can stop
    return t / t.sum(axis=1, keepdims=True)


def reference_mean(p, q, op, a, r=None):
    """The weighted mean in probability space, written out per operation."""
    with np.errstate(divide="ignore"):
        if op in ("sum", "mixture", "arithmetic"):
            return a * p + (1 - a) * q
        if op in ("prod", "geometric"):
            return p**a * q ** (1 - a)
        if op == "harmonic":
            return np.where(
                (p > 0) & (q > 0),
                1 / (a / np.where(p > 0, p, 1) + (1 - a) / np.where(q > 0, q, 1)),
                0.0,
            )
        if op == "min":
            return np.minimum(p, q)
        if op == "max":
            return np.maximum(p, q)
        return (a * p**r + (1 - a) * q**r) ** (1 / r)


def reference_logw(t1, t2, op, a, prev, r=None):
    m = reference_mean(t1[prev], t2[prev], op, a, r)
    with np.errstate(divide="ignore"):
        return np.log(m / m.sum())


OPS = ["sum", "mixture", "arithmetic", "prod", "geometric", "harmonic", "min", "max"]


def contexts_upto(n):
    return [list(c) for k in range(n + 1) for c in itertools.product(VOCAB, repeat=k)]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("a", [0.0, 0.3, 0.5, 1.0])
async def test_exact_rows_and_paths(op, a):
    rng = np.random.default_rng(hash((op, a)) % 2**32)
    t1, t2 = random_table(rng), random_table(rng)
    ens = Ensemble(Bigram(t1), Bigram(t2), op, a)
    if a in (0.0, 1.0):  # one model alone, whatever the operation
        ref_rows = [np.log((t1 if a == 1.0 else t2)[prev]) for prev in range(4)]
    else:
        ref_rows = [reference_logw(t1, t2, op, a, prev) for prev in range(4)]
    for ctx in contexts_upto(3):
        prev = 0 if not ctx else VOCAB.index(ctx[-1]) + 1
        np.testing.assert_allclose(
            (await ens.logw_next(ctx)).weights, ref_rows[prev], rtol=1e-12, atol=1e-12
        )
        want, state = 0.0, 0
        for tok in ctx:
            want += ref_rows[state][VOCAB.index(tok)]
            state = VOCAB.index(tok) + 1
        assert await ens.prefix(ctx) == pytest.approx(want, rel=1e-12, abs=1e-12)
        assert await ens.complete(ctx) == pytest.approx(
            want + ref_rows[state][-1], rel=1e-12, abs=1e-12
        )


@pytest.mark.parametrize(
    "op,r",
    [("power", 2.0), ("power", -0.5), ("p2", 2.0), ("pm2.5", -2.5), ("p-2", -2.0), ("p0.5", 0.5)],
)
async def test_power_means(op, r):
    rng = np.random.default_rng(7)
    t1, t2 = random_table(rng), random_table(rng)
    ens = Ensemble(Bigram(t1), Bigram(t2), op, 0.4, exponent=r if op == "power" else None)
    assert ens.exponent == r
    for ctx in [[], [b"a"], [b"a", b"b"], [b"c", b"c"]]:
        state = 0 if not ctx else VOCAB.index(ctx[-1]) + 1
        np.testing.assert_allclose(
            (await ens.logw_next(ctx)).weights,
            reference_logw(t1, t2, "power", 0.4, state, r),
            rtol=1e-12,
        )


def test_exponents_of_names():
    assert [op_exponent(o) for o in OPS] == [1, 1, 1, 0, 0, -1, -math.inf, math.inf]
    assert op_exponent("power", exponent=3) == 3.0
    assert (op_exponent("p5"), op_exponent("pm0.25"), op_exponent("p1.5")) == (5.0, -0.25, 1.5)


def test_power_mean_limits_and_zeros():
    """Large |r| approaches min/max; r < 0 sends a zero to zero, r > 0 keeps the other's mass."""
    with np.errstate(divide="ignore"):
        lp = np.log([0.2, 0.5, 0.0, 0.3])
        lq = np.log([0.4, 0.1, 0.5, 0.0])
    np.testing.assert_allclose(
        power_mean(lp, lq, 400.0, 0.5)[:2], np.maximum(lp, lq)[:2], atol=2e-3
    )
    np.testing.assert_allclose(
        power_mean(lp, lq, -400.0, 0.5)[:2], np.minimum(lp, lq)[:2], atol=2e-3
    )
    assert np.isneginf(power_mean(lp, lq, -1.0, 0.5)[2:]).all()
    assert np.isneginf(power_mean(lp, lq, 0.0, 0.5)[2:]).all()
    np.testing.assert_allclose(np.exp(power_mean(lp, lq, 1.0, 0.5)[2:]), [0.25, 0.15])
    np.testing.assert_allclose(np.exp(power_mean(lp, lq, 2.0, 0.5)[2:]), np.sqrt([0.125, 0.045]))


async def test_zeros_in_rows_and_dead_paths():
    """Zeros in the inner rows: `prod`, `harmonic` and `min` keep only the common support."""
    rng = np.random.default_rng(3)
    t1, t2 = random_table(rng, zeros=True), random_table(rng, zeros=True)
    for op in ["sum", "prod", "harmonic", "min", "max"]:
        ens = Ensemble(Bigram(t1), Bigram(t2), op, 0.5)
        rows = [reference_logw(t1, t2, op, 0.5, s) for s in range(4)]
        for ctx in contexts_upto(3):
            want, state = 0.0, 0
            for tok in ctx:
                want += rows[state][VOCAB.index(tok)]
                state = VOCAB.index(tok) + 1
            got = await ens.prefix(ctx)
            assert got == pytest.approx(want, rel=1e-12) if math.isfinite(want) else got == want
        await check_potential(ens, contexts_upto(2))


@pytest.mark.parametrize("op", ["sum", "prod", "harmonic", "min", "max", "p3"])
async def test_check_potential_toys(op):
    rng = np.random.default_rng(11)
    ens = Ensemble(Bigram(random_table(rng)), Bigram(random_table(rng)), op, 0.25)
    await check_potential(ens, contexts_upto(2) + [[b"a", b"b", b"c", b"a"]], rtol=1e-9, atol=1e-12)


async def test_one_batch_per_inner_potential():
    rng = np.random.default_rng(5)
    p1, p2 = Bigram(random_table(rng)), Bigram(random_table(rng))
    ens = Ensemble(p1, p2, "prod")
    await ens.batch_complete([[b"a", b"b", b"c"], [b"a", b"c"], []])
    await ens.batch_logw_next([[b"a"], [b"b"]])
    assert (p1.batch_calls, p2.batch_calls) == (2, 2)


async def test_spawn_and_repr():
    rng = np.random.default_rng(9)
    ens = Ensemble(Bigram(random_table(rng)), Bigram(random_table(rng)), "power", 0.7, exponent=-3)
    copy = ens.spawn()
    assert (copy.op_name, copy.a, copy.exponent) == ("power", 0.7, -3.0)
    assert await copy.prefix([b"a", b"b"]) == await ens.prefix([b"a", b"b"])
    assert "power" in repr(ens)
    w1, w2 = await ens.logws_next([b"a"])
    np.testing.assert_allclose(np.exp(w1.weights).sum(), 1.0)


def test_bad_inputs():
    rng = np.random.default_rng(0)
    p1, p2 = Bigram(random_table(rng)), Bigram(random_table(rng))
    with pytest.raises(ValueError, match="unknown ensemble operation 'avg'.*'sum'.*'harmonic'"):
        Ensemble(p1, p2, "avg")
    with pytest.raises(TypeError, match="op must be a string"):
        Ensemble(p1, p2, None)
    with pytest.raises(ValueError, match=r"a must be in \[0, 1\]"):
        Ensemble(p1, p2, "sum", 1.5)
    with pytest.raises(ValueError, match=r"a must be in \[0, 1\]"):
        Ensemble(p1, p2, "sum", -0.1)
    with pytest.raises(TypeError, match="a must be a real number"):
        Ensemble(p1, p2, "sum", "half")
    with pytest.raises(ValueError, match="needs a real exponent"):
        Ensemble(p1, p2, "power")
    with pytest.raises(ValueError, match="finite exponent"):
        Ensemble(p1, p2, "power", exponent=math.inf)
    with pytest.raises(ValueError, match="only used with op='power'"):
        Ensemble(p1, p2, "sum", exponent=2)
    with pytest.raises(TypeError, match="two potentials"):
        Ensemble(p1, "p2", "sum")

    class Other(Bigram):
        def __init__(self, table):
            Potential.__init__(self, [b"a", b"b", b"d"])
            self.table = table

    with pytest.raises(ValueError, match="same vocabulary"):
        Ensemble(p1, Other(random_table(rng)), "sum")


async def test_unknown_token_in_context():
    rng = np.random.default_rng(1)
    ens = Ensemble(Bigram(random_table(rng)), Bigram(random_table(rng)), "sum")
    with pytest.raises(ValueError, match="not in the ensemble's vocabulary"):
        await ens.prefix([b"a", b"z"])


# On the embedded model --------------------------------------------------------


@pytest.fixture(scope="module")
def lm_pair():
    from genlm.control import PromptedLLM

    llm = PromptedLLM.from_name(MODEL, backend="hf")
    llm.set_prompt_from_str("The function returns")
    other = llm.spawn(temperature=0.7)
    other.set_prompt_from_str("A list of")
    return llm, other


@pytest.mark.parametrize("op", ["sum", "prod", "harmonic", "max"])
async def test_check_potential_on_the_model(lm_pair, op):
    llm, other = lm_pair
    ens = Ensemble(llm, other, op, 0.4)
    ctx = llm.tokenize(" the value of")
    await check_potential(ens, [[], ctx[:1], ctx], top=64)


async def test_weight_one_is_the_first_model(lm_pair):
    llm, other = lm_pair
    ctx = llm.tokenize(" a string")
    ens = Ensemble(llm, other, "harmonic", 1.0)
    np.testing.assert_allclose(
        (await ens.logw_next(ctx)).weights, (await llm.logw_next(ctx)).weights, atol=1e-6
    )
    assert await ens.complete(ctx) == pytest.approx(await llm.complete(ctx), abs=1e-5)


class DerivedBigram(Bigram):
    """A bigram whose `logw_next` is the base class's, undefined after a zero-weight prefix."""

    logw_next = Potential.logw_next


async def test_dead_prefix_of_an_inner_potential():
    """`prod` gives a prefix zero weight where an inner potential does; contexts through it
    score `-inf` even though that potential's `logw_next` raises there."""
    t1 = np.full((4, 4), 0.25)
    t2 = t1.copy()
    t2[0] = [0.0, 0.5, 0.25, 0.25]  # p2 never starts with b"a"
    ens = Ensemble(DerivedBigram(t1), DerivedBigram(t2), "prod")
    with pytest.raises(ValueError, match="weight zero"):
        await ens.p2.logw_next([b"a"])
    assert await ens.prefix([b"a", b"b"]) == float("-inf")
    assert list(await ens.batch_complete([[b"a", b"b"], [b"b"]]))[0] == float("-inf")
    assert await ens.complete([b"b"]) == pytest.approx(
        math.log(math.sqrt(0.125) / (math.sqrt(0.125) + 0.5)) + math.log(0.25)
    )
