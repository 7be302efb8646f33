"""Rows held as torch tensors: arithmetic stays on the tensor, draws are exact and
read back once per group, and mixing with NumPy rows moves the NumPy side.

On a CPU the tensors live on the CPU; the code paths are the ones a GPU takes
(`genlm.control._device` counts every read-back, the quantity that costs a host-device
synchronisation on a GPU).
"""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
import torch
from toys.rows import FixedRow

from genlm.control import AWRS, Potential, direct_token_sampler
from genlm.control.draw import counting_readbacks, draw_many, set_draw_method
from genlm.control.potential.reweight import Normalized
from genlm.control.weights import LazyWeights

V = 9  # 8 tokens and EOS


def weights(row, **kw) -> LazyWeights:
    decode = list(range(len(row) - 1)) + ["EOS"]
    return LazyWeights(row, {t: i for i, t in enumerate(decode)}, decode, **kw)


def test_half_precision_rows_are_upcast_once_and_stay_tensors():
    w = weights(torch.zeros(V, dtype=torch.float16))
    assert isinstance(w.weights, torch.Tensor) and w.weights.dtype == torch.float32
    w64 = weights(torch.zeros(V, dtype=torch.float64))
    assert w64.weights.dtype == torch.float64


def test_tensor_arithmetic_matches_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=V), rng.normal(size=V)
    a[2] = -np.inf
    ta, tb = weights(torch.tensor(a, dtype=torch.float64)), weights(torch.tensor(b, dtype=torch.float64))
    na, nb = weights(a), weights(b)
    for got, want in [
        (ta * tb, na * nb),
        (ta + tb, na + nb),
        (ta.normalize(), na.normalize()),
        (ta.exp().log(), na.exp().log()),
        (ta * nb, na * nb),  # mixed: the NumPy side moves to the tensor
        (na * tb, na * nb),
    ]:
        assert isinstance(got.weights, torch.Tensor)
        np.testing.assert_allclose(got.host(), want.weights)
    assert ta.sum() == pytest.approx(na.sum())
    assert ta.argmax() == na.argmax()
    assert ta.materialize(top=3) == pytest.approx(na.materialize(top=3))
    assert ta[3] == pytest.approx(na[3]) and ta[2] == -math.inf
    assert list(ta.items())[4][1] == pytest.approx(a[4])


def test_tensor_draws_follow_the_row():
    """χ² over 4000 draws per method: the empirical law is the row's."""
    p = np.array([0.05, 0.3, 0.0, 0.15, 0.2, 0.0, 0.1, 0.15, 0.05])
    with np.errstate(divide="ignore"):
        row = torch.tensor(np.log(p), dtype=torch.float32)
    for method in ("inverse_cdf", "gumbel_max", "multinomial"):
        set_draw_method(method)
        try:
            rngs = [np.random.default_rng(k) for k in range(40)]
            rows = [weights(r) for r in row.repeat(40, 1)]
            counts = np.zeros(V)
            for _ in range(100):
                for d in asyncio.run(draw_many(rows, rngs)):
                    counts[rows[0].index(d.token)] += 1
                    assert d.logp == pytest.approx(math.log(p[rows[0].index(d.token)]), abs=1e-6)
        finally:
            set_draw_method("inverse_cdf")
        assert counts[2] == counts[5] == 0
        live = p > 0
        expected = p[live] * counts.sum()
        chi2 = float((((counts[live] - expected) ** 2) / expected).sum())
        assert chi2 < 30, (method, chi2)  # 6 degrees of freedom: P(χ² > 30) ≈ 4e-5


def test_no_zero_mass_entry_is_drawn_from_float32_rows():
    """Rows of 4096 entries where most entries are zero and the live ones tiny beside
    one large entry: float32 cumulative sums have flat steps at zero entries; the
    draw never lands on one."""
    assert_only_live_entries_drawn(sparse_rows(np.random.default_rng(1), 4096, 40))


def sparse_rows(rng: np.random.Generator, vocab: int, size: int, extra: tuple = ()) -> np.ndarray:
    """64 rows over `vocab` tokens and EOS, each with `size` random live entries (and
    those at `extra`) between -30 and -10 beside one at 0, the rest zero."""
    block = np.full((64, vocab + 1), -np.inf)
    for r in block:
        live = np.concatenate([rng.choice(vocab, size=size, replace=False), np.array(extra, dtype=int)])
        r[live] = rng.uniform(-30, -10, size=len(live))
        r[live[0]] = 0.0
    return block


def assert_only_live_entries_drawn(block: np.ndarray) -> None:
    """50 draws from each float32 row of `block` land on entries with mass."""
    rows = [weights(torch.tensor(r, dtype=torch.float32)) for r in block]
    rngs = [np.random.default_rng(k) for k in range(len(rows))]
    for _ in range(50):
        for row, d in zip(rows, asyncio.run(draw_many(rows, rngs))):
            assert row[d.token] > -math.inf


def test_nan_entries_are_zero_and_posinf_is_an_error():
    row = torch.tensor([float("nan"), 0.0, float("nan")] + [-math.inf] * (V - 3))
    for d in asyncio.run(draw_many([weights(row)] * 20, [np.random.default_rng(k) for k in range(20)])):
        assert d.token == 1 and d.logp == 0.0
    bad = torch.tensor([0.0, float("inf")] + [0.0] * (V - 2))
    with pytest.raises(ValueError, match=r"\+inf"):
        asyncio.run(draw_many([weights(bad)], [np.random.default_rng(0)]))


def test_rows_with_nan_draw_alike_on_tensor_and_numpy_rows():
    """A row holding NaN is one draw from the folded row on either path: the same
    tokens, and each generator left where one uniform leaves it (the next draws agree)."""
    gen = np.random.default_rng(5)
    rows = gen.normal(size=(24, V))
    rows[::2, gen.integers(V, size=12)] = np.nan
    for _ in range(2):
        rngs_t = [np.random.default_rng(k) for k in range(24)]
        rngs_n = [np.random.default_rng(k) for k in range(24)]
        for _step in range(3):
            t = asyncio.run(draw_many([weights(torch.tensor(r)) for r in rows], rngs_t))
            n = asyncio.run(draw_many([weights(r.copy()) for r in rows], rngs_n))
            assert [d.token for d in t] == [d.token for d in n]
        assert [r.random() for r in rngs_t] == [r.random() for r in rngs_n]


def test_empty_tensor_row_draws_eos():
    d = asyncio.run(draw_many([weights(torch.full((V,), -math.inf))], [np.random.default_rng(0)]))[0]
    assert d.token == "EOS" and d.logw == -math.inf


def test_importance_draw_weighs_under_a_tensor_or_numpy_target():
    q = torch.log(torch.tensor([0.5, 0.5] + [0.0] * (V - 2)))
    with np.errstate(divide="ignore"):
        t = np.log(np.array([0.2, 0.6] + [0.0] * (V - 2)))
    rng = [np.random.default_rng(3)]
    for target in (weights(t), weights(torch.tensor(t))):
        d = asyncio.run(draw_many([weights(q)], rng, targets=[target]))[0]
        assert d.logw == pytest.approx(t[d.token] - math.log(0.5), abs=1e-6)


def Fixed(n: int, tensor: bool = True, seed: int = 0) -> FixedRow:
    """A fixed standard normal row over `n` tokens: a float32 tensor (as a model on a
    device hands over) or NumPy."""
    return FixedRow.random(n, tensor, seed)


class EvenOnly(Potential):
    """A Boolean condition: even tokens (and EOS) allowed; no cheap rows."""

    def __init__(self, n: int):
        super().__init__(list(range(n)))

    async def prefix(self, context):
        return 0.0 if all(x % 2 == 0 for x in context) else -math.inf

    async def complete(self, context):
        return await self.prefix(context)


@pytest.mark.parametrize("n_particles", [1, 8, 64])
@pytest.mark.parametrize("vocab", [16, 4096])
def test_direct_step_reads_back_once(n_particles, vocab):
    """One `batch_sample` of the direct sampler (the SMC step) makes exactly one
    read-back, whatever the number of particles and the vocabulary size."""
    sampler = direct_token_sampler(Fixed(vocab))
    contexts = [[] for _ in range(n_particles)]
    rngs = [np.random.default_rng(k) for k in range(n_particles)]
    with counting_readbacks() as n:
        out = asyncio.run(sampler.batch_sample(contexts, rngs))
    assert n.value == 1 and len(out) == n_particles


@pytest.mark.parametrize("n_particles", [1, 8, 64])
def test_awrs_search_step_reads_back_once(n_particles):
    """AWRS with a condition that has no cheap rows: the race is drawn on the device
    and every particle's first 64 arrivals come back in one read-back, which holds
    every token of these 65-entry rows, so no walk asks for more."""
    sampler = AWRS(Fixed(64), EvenOnly(64))
    assert not sampler.exact
    contexts = [[] for _ in range(n_particles)]
    rngs = [np.random.default_rng(k) for k in range(n_particles)]
    with counting_readbacks() as n:
        out = asyncio.run(sampler.batch_sample(contexts, rngs))
    assert n.value == 1
    eos = sampler.condition.eos
    assert all(tok == eos or tok % 2 == 0 for tok, _, _ in out)


def test_tensor_and_numpy_rows_give_the_same_direct_draws():
    """A seeded step draws the same tokens from tensor and NumPy copies of the rows."""
    for seed in range(3):
        rngs = [np.random.default_rng(seed * 100 + k) for k in range(16)]
        rngs2 = [np.random.default_rng(seed * 100 + k) for k in range(16)]
        a = asyncio.run(direct_token_sampler(Fixed(300, tensor=True)).batch_sample([[]] * 16, rngs))
        b = asyncio.run(direct_token_sampler(Fixed(300, tensor=False)).batch_sample([[]] * 16, rngs2))
        assert [x[0] for x in a] == [x[0] for x in b]
        np.testing.assert_allclose([x[1] for x in a], [x[1] for x in b], rtol=1e-5)


def test_normalized_and_tempered_tensor_rows():
    p = Fixed(50)
    w = asyncio.run(Normalized(p).logw_next([]))
    assert isinstance(w.weights, torch.Tensor)
    assert w.sum() == pytest.approx(0.0, abs=1e-5)
    t = asyncio.run((p**2).batch_logw_next([[], []]))
    np.testing.assert_allclose(t[1].host(), 2 * p.row.double().numpy(), rtol=1e-6)


def test_product_of_tensor_and_numpy_rows_is_a_tensor():
    a, b = Fixed(40, tensor=True, seed=1), Fixed(40, tensor=False, seed=2)
    rows = asyncio.run((a * b).batch_logw_next([[], []]))
    assert isinstance(rows[0].weights, torch.Tensor)
    np.testing.assert_allclose(rows[0].host(), a.row.double().numpy() + b.row, rtol=1e-6)


def _masked_pair(rows: np.ndarray, mask: np.ndarray, seed: int):
    """Draws with `allowed=mask` and draws from the rows masked to -inf, same uniforms."""
    t = torch.tensor(rows, dtype=torch.float32)
    lw = [weights(r) for r in t]
    got = asyncio.run(
        draw_many(lw, [np.random.default_rng(seed + k) for k in range(len(rows))], allowed=torch.tensor(mask))
    )
    ref_rows = [weights(r) for r in t.where(torch.tensor(mask), -math.inf)]
    want = asyncio.run(draw_many(ref_rows, [np.random.default_rng(seed + k) for k in range(len(rows))]))
    return got, want


def test_masked_draw_is_the_draw_from_the_masked_rows():
    """`draw_many(..., allowed=mask)` (masses multiplied by the mask) draws what the
    rows set to -inf outside the mask draw: same tokens under the same uniforms (up to
    a float32 CDF boundary, here never), same `logp` and `logw`, never a masked token."""
    rng = np.random.default_rng(5)
    rows = rng.normal(scale=3.0, size=(64, 513))
    mask = rng.random((64, 513)) < 0.3
    mask[:, 0] = True
    for seed in range(3):
        got, want = _masked_pair(rows, mask, 100 * seed)
        assert [d.token for d in got] == [d.token for d in want]
        for r, d in enumerate(got):
            assert mask[r, weights(rows[r]).index(d.token)]
        np.testing.assert_allclose([d.logp for d in got], [d.logp for d in want], atol=2e-5)
        np.testing.assert_allclose([d.logw for d in got], [d.logw for d in want], atol=2e-5)


def test_masked_draw_of_an_allowed_set_far_below_the_peak_is_exact():
    """Allowed tokens 200 nats under the row's peak underflow against it in float32;
    such a row is drawn again from the masked row: the exact law and `log Σ` allowed."""
    rows = np.full((2, 9), -1.0)
    rows[:, 0] = 0.0
    rows[:, 3], rows[:, 5] = -200.0, -201.0
    mask = np.zeros((2, 9), dtype=bool)
    mask[:, [3, 5]] = True
    mask[1] = False  # nothing allowed: EOS with weight zero
    counts = {3: 0, 5: 0}
    for seed in range(400):
        got, _ = _masked_pair(rows, mask, seed)
        counts[got[0].token] += 1
        assert got[0].logw == pytest.approx(np.logaddexp(-200.0, -201.0), abs=1e-4)
        assert got[1].token == "EOS" and got[1].logw == -math.inf
    p3 = 1 / (1 + math.exp(-1))
    assert abs(counts[3] / 400 - p3) < 4 * math.sqrt(p3 * (1 - p3) / 400)


def test_masked_draw_of_numpy_rows_masks_them_first():
    rows = np.log(np.array([[0.5, 0.25, 0.25, 1e-9]]))
    mask = np.array([[False, True, True, True]])
    d = asyncio.run(draw_many([weights(rows[0])], [np.random.default_rng(0)], allowed=mask))[0]
    assert d.token in (1, 2, "EOS") and d.token != 0
    assert d.logw == pytest.approx(math.log(0.5 + 1e-9))


def test_draws_in_threads_do_not_share_scratch_blocks():
    """CPU draws reuse a scratch block per thread: draws of different blocks in two
    threads at once give exactly the draws each block gives alone, and a smaller
    block drawn after a larger one reads none of the larger one's values."""
    from concurrent.futures import ThreadPoolExecutor

    gen = np.random.default_rng(3)
    blocks = [gen.normal(scale=3.0, size=(n, v)) for n, v in [(32, 2049), (8, 513), (32, 2049), (4, 17)]]

    def run(block: np.ndarray, seed: int) -> list:
        rows = [weights(r) for r in torch.tensor(block, dtype=torch.float32)]
        out = []
        for k in range(20):
            rngs = [np.random.default_rng([seed, k, i]) for i in range(len(rows))]
            out.append([(d.token, d.logw) for d in asyncio.run(draw_many(rows, rngs))])
        return out

    alone = [run(b, s) for s, b in enumerate(blocks)]
    with ThreadPoolExecutor(max_workers=len(blocks)) as pool:
        together = list(pool.map(run, blocks, range(len(blocks))))
    assert together == alone


@pytest.mark.parametrize("vocab", [8192, 8192 + 300, 40000])
def test_long_rows_are_drawn_by_blocks_with_the_law_of_the_row(vocab):
    """Rows of at least 8192 entries are drawn through block sums and one block's scan
    (`_blocked_inverse_cdf`): over 6400 draws the mass falling in each of 8 groups of
    entries (spread over many blocks, the last one partial) matches the row (χ², 7
    degrees of freedom), and for the same uniforms the index is the one a float64
    scan of the row gives, but for a rare float32 boundary."""
    from genlm.control._draw_torch import _blocked_inverse_cdf

    gen = np.random.default_rng(vocab)
    row = gen.normal(scale=2.0, size=vocab)
    row[gen.random(vocab) < 0.2] = -np.inf
    p = np.exp(row - np.logaddexp.reduce(row[np.isfinite(row)]))
    probs = torch.tensor(np.exp(row - row[np.isfinite(row)].max()), dtype=torch.float32)
    u = gen.random(6400)
    got, total = _blocked_inverse_cdf(probs.repeat(6400, 1), torch.tensor(u))
    got = got.numpy()
    assert np.all(p[got] > 0)
    assert float(total[0]) == pytest.approx(float(probs.double().sum()), rel=1e-5)
    exact = np.minimum(np.searchsorted(np.cumsum(p), u, side="right"), vocab - 1)
    assert np.mean(got == exact) > 0.995
    group = (np.arange(vocab) * 8) // vocab
    counts = np.bincount(group[got], minlength=8)
    expected = np.bincount(group, weights=p, minlength=8) * len(u)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 30, chi2  # P(χ²₇ > 30) ≈ 1e-4


def test_long_rows_never_draw_a_zero_mass_entry():
    """Long rows (two partial blocks' worth past 8192) whose live entries are few and
    tiny beside one large one, some at block edges: the blocked draw never lands on
    a zero entry."""
    vocab = 8192 + 700
    block = sparse_rows(np.random.default_rng(2), vocab, 30, (511, 512, 8191, 8192, vocab))
    assert_only_live_entries_drawn(block)
    from genlm.control._draw_torch import _blocked_inverse_cdf

    # u = 0 finds each row's first live entry, past any number of empty blocks
    probs = torch.tensor(np.exp(block), dtype=torch.float32)
    idx, _ = _blocked_inverse_cdf(probs, torch.zeros(64, dtype=torch.float64))
    assert idx.tolist() == [int(np.flatnonzero(np.isfinite(r))[0]) for r in block]
