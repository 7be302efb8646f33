import asyncio
import math
import warnings

import numpy as np
import pytest

import genlm.control.draw as draw_mod
from genlm.control import DRAW_METHODS, EOS, set_draw_method
from genlm.control._device import stack
from genlm.control.draw import using_rng
from genlm.control.util import draw_from
from genlm.control.weights import LazyWeights

VOCAB = ["a", "b", "c", EOS]
ENCODE = {t: i for i, t in enumerate(VOCAB)}


def row(values):
    with np.errstate(divide="ignore"):
        return LazyWeights(np.log(np.asarray(values, dtype=float)), ENCODE, VOCAB)


@pytest.fixture
def method():
    before = draw_mod.get_draw_method()
    yield
    set_draw_method(before)


def test_inverse_cdf_is_the_default():
    assert draw_mod.get_draw_method() == "inverse_cdf"


@pytest.mark.parametrize("v", [1, 5, 63, 64, 65, 200, 4096])
def test_two_level_inverse_cdf_equals_the_full_cdf(v):
    gen = np.random.default_rng(v)
    probs = gen.random((7, v)) * (gen.random((7, v)) < 0.6)
    probs[:, -1] += 0.1  # every row has mass
    u = gen.random(7)
    idx, total = draw_mod._locate(probs, u)
    cdf = np.cumsum(probs, axis=1)
    full = np.minimum((cdf <= (u * cdf[:, -1])[:, None]).sum(axis=1), v - 1)
    np.testing.assert_allclose(total, probs.sum(axis=1), rtol=1e-12)
    # Equal, except where u sits within rounding of an entry boundary.
    for r in range(7):
        if idx[r] != full[r]:
            assert abs(u[r] * cdf[r, -1] - cdf[r, min(idx[r], full[r])]) < 1e-12 * cdf[r, -1]
    assert np.all(probs[np.arange(7), idx] > 0)


def test_inverse_cdf_never_returns_an_entry_without_mass():
    v = 300
    probs = np.zeros((4, v))
    probs[0, 0] = 1.0  # mass only at the start
    probs[1, v - 1] = 1.0  # only at the end (in the short last block)
    probs[2, [63, 64]] = [1e-300, 1.0]  # across a block boundary
    probs[3, ::64] = 1.0
    for u in [0.0, 0.5, np.nextafter(1.0, 0.0)]:
        idx, _ = draw_mod._locate(probs, np.full(4, u))
        assert np.all(probs[np.arange(4), idx] > 0), (u, idx)


@pytest.mark.parametrize("name", DRAW_METHODS)
async def test_every_draw_method_draws_the_normalized_row(name, method):
    set_draw_method(name)
    probs = np.array([0.5, 0.3, 0.0, 0.2])
    w = row(probs * 7.0)  # unnormalized
    n = 4000
    with using_rng(np.random.default_rng(0)):
        draws = await asyncio.gather(*(draw_from(w) for _ in range(n)))
    counts = np.array([sum(d.token == t for d in draws) for t in VOCAB])
    sigma = np.sqrt(n * probs * (1 - probs))
    assert np.all(np.abs(counts - n * probs) <= 5 * sigma + 1e-9)
    assert counts[2] == 0
    d = draws[0]
    assert d.logw == pytest.approx(math.log(7.0))
    assert d.logp == pytest.approx(math.log(probs[ENCODE[d.token]]))


def test_unknown_draw_method_is_an_error():
    with pytest.raises(ValueError, match="unknown draw method 'fastest'"):
        set_draw_method("fastest")


async def test_draws_in_one_pass_are_one_stacked_reduction(monkeypatch):
    calls = []
    original = draw_mod._sample_rows

    def counting(rows, rngs, method, allowed=None, bad=None):
        calls.append(rows.shape)
        return original(rows, rngs, method, allowed, bad)

    monkeypatch.setattr(draw_mod, "_sample_rows", counting)
    other = LazyWeights(np.zeros(3), {"x": 0, "y": 1, EOS: 2}, ["x", "y", EOS])
    await asyncio.gather(*(draw_from(row([1, 1, 1, 1])) for _ in range(10)), draw_from(other))
    assert sorted(calls) == [(1, 3), (10, 4)]


async def test_seeded_draws_are_reproducible():
    async def run(seed):
        with using_rng(np.random.default_rng(seed)):
            return [d.token for d in await asyncio.gather(*(draw_from(row([1, 1, 1, 1])) for _ in range(50)))]

    assert await run(3) == await run(3)
    assert await run(3) != await run(4)


async def test_nan_weights_fold_to_zero_mass():
    w = LazyWeights(np.array([np.nan, 0.0, np.nan, np.nan]), ENCODE, VOCAB)
    for _ in range(20):
        d = await draw_from(w)
        assert d.token == "b" and d.logp == 0.0


async def test_positive_infinite_weight_is_an_error():
    w = LazyWeights(np.array([np.inf, 0.0, 0.0, 0.0]), ENCODE, VOCAB)
    with pytest.raises(ValueError, match=r"\+inf"):
        await draw_from(w)


def _odd_rows(dtype, v=300, n=6, seed=0):
    """Rows of log weights holding NaN here and there (row 2 all NaN, row 4 NaN
    only where a mask forbids), and the mask."""
    rng = np.random.default_rng(seed)
    rows = (rng.standard_normal((n, v)) * 2 - np.log(v)).astype(dtype)
    allowed = rng.random((n, v)) < 0.6
    rows[0, rng.choice(v, 40, replace=False)] = np.nan
    rows[2] = np.nan
    rows[4, np.flatnonzero(~allowed[4])[:5]] = np.nan
    rows[5, : v // 2] = np.nan
    return rows, allowed


def _gens(seed, n):
    return [np.random.default_rng(seed * 10 + i) for i in range(n)]


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("method", DRAW_METHODS)
def test_nan_entries_draw_as_the_folded_rows_without_writing_them(dtype, method, masked):
    """The draw is not handed folded rows: the NaN it meets have no mass, every index
    and log-sum equals the draw of the rows with NaN written as -inf, and the rows
    handed to it are left as they were."""
    rows, allowed = _odd_rows(dtype)
    mask = allowed if masked else None
    before = rows.copy()
    folded = np.where(np.isnan(rows), -np.inf, rows).astype(dtype)
    for seed in range(5):
        got_idx, got_z = draw_mod._sample_rows(rows, _gens(seed, len(rows)), method, mask)
        want_idx, want_z = draw_mod._sample_rows(folded, _gens(seed, len(rows)), method, mask)
        # a float32 row holding NaN is drawn in float64 against its own peak (as a
        # row whose mass the unshifted float32 pass cannot keep), so its log-sum may
        # move in the float32 rounding; float64 rows are drawn exactly alike
        np.testing.assert_allclose(got_z, want_z, rtol=1e-6 if dtype == np.float32 else 0)
        live = np.isfinite(want_z)
        np.testing.assert_array_equal(np.isfinite(got_z), live)
        np.testing.assert_array_equal(got_idx[live], want_idx[live])
        assert not live[2] and live[[0, 1, 3, 4, 5]].all()
        assert not np.isnan(rows[np.flatnonzero(live), got_idx[live]]).any()
    np.testing.assert_array_equal(rows, before)  # NaN where they were


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
async def test_a_plus_inf_row_fails_its_own_draw_and_no_other(dtype):
    """Rows drawn together in one window: the request holding +inf (even where its
    mask forbids) raises fold_nan's error; the others draw what they draw alone."""
    rows, allowed = _odd_rows(dtype)
    vocab = [f"t{i}" for i in range(rows.shape[1] - 1)] + [EOS]
    encode = {t: i for i, t in enumerate(vocab)}
    bad = rows[:2].copy()
    bad[1, np.flatnonzero(~allowed[1])[0]] = np.inf

    def weights(block):
        return [LazyWeights(r, encode, vocab) for r in block]

    async def draw(block, mask, seed):
        gens = [np.random.default_rng(seed + i) for i in range(len(block))]
        return await draw_mod.draw_many(weights(block), gens, allowed=mask)

    alone = await draw(rows[2:], allowed[2:], 7)
    failed, beside = await asyncio.gather(
        draw(bad, allowed[:2], 3), draw(rows[2:], allowed[2:], 7), return_exceptions=True
    )
    assert isinstance(failed, ValueError) and "+inf" in str(failed)
    assert [(d.token, d.logw, d.logp) for d in beside] == [(d.token, d.logw, d.logp) for d in alone]
    with pytest.raises(ValueError, match=r"\+inf"):
        draw_mod._sample_rows(bad, [np.random.default_rng(0)] * 2, "inverse_cdf", allowed[:2])


async def test_a_row_without_mass_draws_eos_with_zero_weight():
    d = await draw_from(row([0, 0, 0, 0]))
    assert d.token == EOS and d.logw == float("-inf") and d.logp == float("-inf")


async def test_importance_draw_is_weighed_under_the_target():
    proposal, target = row([0.25, 0.25, 0.25, 0.25]), row([0.1, 0.2, 0.3, 0.4])
    d = await draw_from(proposal, target=target)
    assert d.logw == pytest.approx(target[d.token] - math.log(0.25))


async def test_draw_callback_replaces_the_random_choice():
    seen = {}

    def choose(probs):
        seen.update(probs)
        return "c"

    d = await draw_from(row([1, 1, 2, 0]), draw=choose)
    assert d.token == "c" and d.logp == pytest.approx(math.log(0.5))
    assert seen == pytest.approx({"a": 0.25, "b": 0.25, "c": 0.5})


@pytest.mark.parametrize("name", DRAW_METHODS)
async def test_draws_over_many_blocks_follow_the_row(name, method):
    set_draw_method(name)
    v = 150  # three blocks of the inverse CDF, the last one short
    gen = np.random.default_rng(5)
    probs = gen.random(v) * (gen.random(v) < 0.5)
    probs /= probs.sum()
    vocab = [f"t{i}" for i in range(v - 1)] + [EOS]
    with np.errstate(divide="ignore"):
        w = LazyWeights(np.log(probs), {t: i for i, t in enumerate(vocab)}, vocab)
    n = 20000
    with using_rng(np.random.default_rng(1)):
        draws = await asyncio.gather(*(draw_from(w) for _ in range(n)))
    counts = np.bincount([vocab.index(d.token) for d in draws], minlength=v)
    sigma = np.sqrt(n * probs * (1 - probs))
    assert np.all(np.abs(counts - n * probs) <= 5 * sigma + 1e-9)
    assert np.all(counts[probs == 0] == 0)


@pytest.mark.parametrize("name", DRAW_METHODS)
async def test_draw_many_equals_one_draw_per_row(name, method):
    set_draw_method(name)
    gen = np.random.default_rng(2)
    rows = [row(gen.random(4) * (gen.random(4) < 0.8) + 1e-3) for _ in range(6)]
    many = await draw_mod.draw_many(rows, [np.random.default_rng(i) for i in range(6)], targets=rows[::-1])
    for i, w in enumerate(rows):
        with using_rng(np.random.default_rng(i)):
            one = await draw_from(w, target=rows[::-1][i])
        assert many[i] == one


async def test_draw_many_checks_its_arguments():
    w = row([1, 1, 1, 1])
    with pytest.raises(ValueError, match="one generator"):
        await draw_mod.draw_many([w, w], [np.random.default_rng(0)])
    with pytest.raises(ValueError, match="log weights"):
        await draw_mod.draw_many([LazyWeights(np.ones(4), ENCODE, VOCAB, log=False)], [np.random.default_rng(0)])
    assert await draw_mod.draw_many([], []) == []


def test_rows_of_one_block_are_drawn_in_place_and_others_are_stacked():
    block = np.arange(12, dtype=np.float64).reshape(3, 4)
    view = stack(list(block))
    assert np.shares_memory(view, block)
    np.testing.assert_array_equal(view, block)
    assert stack([block[2], block[0], block[1]]) is not block  # not in order
    np.testing.assert_array_equal(stack([block[2], block[0], block[1]]), block[[2, 0, 1]])
    np.testing.assert_array_equal(stack(list(block[:2])), block[:2])
    wide = np.zeros((3, 8))
    np.testing.assert_array_equal(stack([r[:4] for r in wide]), np.zeros((3, 4)))


def test_tensor_rows_of_one_block_are_read_in_place():
    """Consecutive rows of one block come back as a view of it; permuted whole rows as
    the block and their positions in it; views that straddle two rows are copied."""
    import torch

    from genlm.control._torch_rows import block_positions, tensor_block

    block = torch.arange(12.0).reshape(3, 4).clone()  # a block of its own (no base)
    view, at = block_positions(list(block[1:]))
    assert at is None and view.data_ptr() == block[1].data_ptr() and torch.equal(view, block[1:])
    same, at = block_positions([block[2], block[0], block[1]])
    assert same is block and at.tolist() == [2, 0, 1]
    assert torch.equal(tensor_block([block[2], block[0], block[1]]), block[[2, 0, 1]])
    flat = block.view(-1)
    straddling = [flat[2:6], flat[6:10]]  # not rows of `block`, though views of it
    copy, at = block_positions(straddling)
    assert at is None and copy.data_ptr() != block.data_ptr()
    assert torch.equal(copy, torch.stack(straddling))


def _masked_reference(rows, allowed, u):
    """The inverse-CDF draw and log-sum of `where(allowed, rows, -inf)`, by a full
    cumulative sum in float64 (no shortcut)."""
    out_idx, out_z = [], []
    for r, a, ui in zip(rows, allowed, u):
        x = np.where(a, r, -np.inf)
        top = x.max()
        if not np.isfinite(top):
            out_idx.append(None)
            out_z.append(-np.inf)
            continue
        p = np.exp(x - top)
        cdf = np.cumsum(p)
        out_idx.append(int(np.searchsorted(cdf, ui * cdf[-1], side="right")))
        out_z.append(math.log(cdf[-1]) + top)
    return out_idx, out_z


@pytest.mark.parametrize("seed", range(4))
def test_host_mask_draw_equals_drawing_the_masked_rows(seed):
    """The host draw multiplies masses by the mask instead of writing -inf; it draws
    the same index with the same log-sum as the masked row, including rows whose
    allowed entries lie 800 nats under the row's peak (redone against their own
    peak), rows with entries far below the peak, and a row with nothing allowed."""
    gen = np.random.default_rng(seed)
    n, v = 8, 300
    rows = gen.normal(scale=3.0, size=(n, v))
    allowed = gen.random((n, v)) < 0.5
    rows[1, ~allowed[1]] += 800.0  # the allowed mass is faint against the row's peak
    rows[2, ::3] -= 2000.0  # deep entries: exactly zero mass, never drawn
    rows[3, ::7] = -np.inf
    allowed[4] = False  # nothing allowed: no mass
    allowed[5] = False
    allowed[5, 17] = True  # one token allowed
    u = np.array([np.random.default_rng(100 + i).random() for i in range(n)])
    idx, log_z = draw_mod._sample_rows(rows, [np.random.default_rng(100 + i) for i in range(n)], "inverse_cdf", allowed)
    ref_idx, ref_z = _masked_reference(rows, allowed, u)
    for i in range(n):
        if ref_idx[i] is None:
            assert log_z[i] == -np.inf
            continue
        assert allowed[i, idx[i]]
        assert idx[i] == ref_idx[i]
        assert log_z[i] == pytest.approx(ref_z[i], rel=1e-12, abs=1e-9)
    assert idx[5] == 17 and log_z[5] == pytest.approx(rows[5, 17], abs=1e-12)


@pytest.mark.parametrize("name", ["inverse_cdf", "gumbel_max"])
def test_deep_entries_are_never_drawn(name):
    """Entries 1,000 nats under the peak (and -inf entries) have no mass: over many
    draws only the two entries near the peak come out, at their probabilities."""
    rows = np.full((1, 200), -1000.0)
    rows[0, ::2] = -np.inf
    rows[0, 5] = 0.0
    rows[0, 9] = math.log(3.0)
    rngs = [np.random.default_rng(7)]
    hits = [int(draw_mod._sample_rows(rows, rngs, name)[0][0]) for _ in range(4000)]
    assert set(hits) <= {5, 9}
    share = hits.count(9) / len(hits)
    sd = math.sqrt(0.75 * 0.25 / len(hits))
    assert abs(share - 0.75) < 5 * sd


async def test_draw_many_with_a_host_mask_equals_masking_first():
    gen = np.random.default_rng(3)
    rows = [row(gen.random(4) + 1e-3) for _ in range(6)]
    allowed = gen.random((6, 4)) < 0.6
    allowed[:, 1] = True
    masked_rows = [w.spawn(np.where(a, w.weights, -np.inf)) for w, a in zip(rows, allowed)]
    got = await draw_mod.draw_many(rows, [np.random.default_rng(i) for i in range(6)], allowed=allowed)
    want = await draw_mod.draw_many(masked_rows, [np.random.default_rng(i) for i in range(6)])
    for g, w in zip(got, want):
        assert g.token == w.token
        assert g.logw == pytest.approx(w.logw, abs=1e-12) and g.logp == pytest.approx(w.logp, abs=1e-12)


def _boundary_gap(rows64, allowed, u, i, j):
    """How far (relative to the row's mass) `u` lies from the CDF boundary between
    entries `i` and `j` of the masked float64 row."""
    x = np.where(allowed, rows64, -np.inf)
    p = np.exp(x - x.max())
    cdf = np.cumsum(p)
    return abs(u * cdf[-1] - cdf[min(i, j)]) / cdf[-1]


@pytest.mark.parametrize("seed", range(4))
def test_float32_rows_draw_as_their_float64_upcast(seed):
    """A model's float32 rows are drawn in float32 (half the memory traffic of every
    pass): the same index as the float64 draw of the same values, except where the
    uniform lies within float32 rounding of an entry boundary, and the same log-sum
    to float32 precision; masks, faint allowed mass (redone against the allowed
    peak), -inf entries and empty rows included."""
    gen = np.random.default_rng(seed)
    n, v = 11, 5000
    rows = gen.normal(scale=3.0, size=(n, v)).astype(np.float32)
    allowed = gen.random((n, v)) < 0.5
    rows[1, ~allowed[1]] += 120.0  # allowed mass e^-120 under the row's peak (0 in float32): redone
    rows[2, ::3] = -np.inf
    rows[3, ::5] -= 300.0  # underflows to zero mass in float32
    allowed[4] = False
    allowed[5] = False
    allowed[5, 17] = True
    # rows read unshifted only where their mass is in range; these are redone:
    rows[6] += 95.0  # every entry's exp overflows float32 (masked-out ones become NaN)
    rows[7] -= 140.0  # all mass under float32's smallest number
    rows[8] -= 70.0  # mass about e^-61: entries half-lost to subnormals
    rows[9, ~allowed[9]] += 80.0  # finite but the allowed mass is e^-80 of the row's
    rows[10, :7] = 100.0  # a few entries overflow, the rest are ordinary
    u = np.array([np.random.default_rng(100 + i).random() for i in range(n)])
    for mask in (None, allowed):
        with warnings.catch_warnings():  # overflowing rows are redone, not reported
            warnings.simplefilter("error", RuntimeWarning)
            got_idx, got_z = draw_mod._sample_rows(rows, [np.random.default_rng(100 + i) for i in range(n)], "inverse_cdf", mask)
        a = np.ones((n, v), dtype=bool) if mask is None else mask
        ref_idx, ref_z = _masked_reference(rows.astype(np.float64), a, u)
        for i in range(n):
            if ref_idx[i] is None:
                assert got_z[i] == -np.inf
                continue
            assert a[i, got_idx[i]] and np.isfinite(rows[i, got_idx[i]])
            if got_idx[i] != ref_idx[i]:
                assert _boundary_gap(rows[i].astype(np.float64), a[i], u[i], got_idx[i], ref_idx[i]) < 1e-5
            assert got_z[i] == pytest.approx(ref_z[i], abs=1e-5), (i, mask is None)
    assert got_idx[5] == 17 and got_z[5] == pytest.approx(float(rows[5, 17]), abs=1e-6)


def test_float32_rows_keep_their_dtype_through_stack_and_nan_folding():
    from genlm.control.weights import fold_nan

    block = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = stack(list(block))
    assert np.shares_memory(view, block) and view.dtype == np.float32
    folded = fold_nan(np.array([0.0, np.nan, -1.0], dtype=np.float32))
    assert folded.dtype == np.float32 and folded[1] == -np.inf
    assert fold_nan(np.array([1, 2])).dtype == np.float64


@pytest.mark.parametrize("name", DRAW_METHODS)
def test_float32_rows_follow_their_probabilities(name, method):
    """Every draw method on a float32 row: seeded frequencies within 5σ of the row's
    probabilities, and entries that underflow (300 nats down) or are -inf never drawn."""
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    rows = np.full((1, 64), -300.0, dtype=np.float32)
    rows[0, 1::2] = -np.inf
    rows[0, [3, 10, 20, 40]] = np.log(probs).astype(np.float32)
    rngs = [np.random.default_rng(11)]
    hits = [int(draw_mod._sample_rows(rows, rngs, name)[0][0]) for _ in range(3000)]
    assert set(hits) <= {3, 10, 20, 40}
    for k, p in zip([3, 10, 20, 40], probs):
        sd = math.sqrt(p * (1 - p) / len(hits))
        assert abs(hits.count(k) / len(hits) - p) < 5 * sd


@pytest.mark.parametrize("v", [1, 63, 64, 65, 200, 4097])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_block_sums_are_the_sums_of_each_block(v, dtype):
    """`_block_sums` (whole blocks through a view, the short last block apart) gives
    the sums of the blocks of `_BLOCK` entries that `np.add.reduceat` gives, to the
    masses' rounding; the draw locates the same entries from either."""
    gen = np.random.default_rng(v)
    probs = gen.random((3, v)).astype(dtype)
    probs[1, ::7] = 0.0
    got = draw_mod._block_sums(probs)
    want = np.add.reduceat(probs, np.arange(0, v, draw_mod._BLOCK), axis=1)
    assert got.shape == want.shape and got.dtype == probs.dtype
    assert np.allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-13, atol=0)
    u = gen.random(3)
    idx, total = draw_mod._locate(probs, u)
    cdf = np.cumsum(probs.astype(np.float64), axis=1)
    for r in range(3):
        assert total[r] == pytest.approx(cdf[r, -1], rel=1e-6)
        if total[r] == 0:  # a row without mass (v = 1 and its one entry zeroed)
            continue
        assert probs[r, idx[r]] > 0
        j = int(np.searchsorted(cdf[r], u[r] * cdf[r, -1], side="right"))
        assert idx[r] == j or abs(u[r] * cdf[r, -1] - cdf[r, min(idx[r], j)]) < 1e-5 * cdf[r, -1]


def _batch(block):
    from genlm.control.weights import LazyWeightsBatch

    return LazyWeightsBatch.of_block(block, ENCODE, VOCAB)


@pytest.mark.parametrize(
    "change",
    ["setitem", "reverse", "sort", "append", "pop", "insert", "delitem", "reassign", "none"],
)
def test_a_batch_answers_for_its_rows_after_any_change(change):
    """`LazyWeightsBatch.weights` (0.4.1's `[N, V+1]` block) is the rows' weights after
    the list or a row changes: the block it was made from answers only while every
    row still holds its row of the block, in order."""
    block = np.log(np.random.default_rng(0).dirichlet(np.ones(4), size=4))
    batch = _batch(block.copy())
    other = row([0.1, 0.2, 0.3, 0.4])
    if change == "setitem":
        batch[1] = other
    elif change == "reverse":
        batch.reverse()
    elif change == "sort":
        batch.sort(key=lambda r: float(r.weights[0]))
    elif change == "append":
        batch.append(other)
    elif change == "pop":
        batch.pop(0)
    elif change == "insert":
        batch.insert(0, other)
    elif change == "delitem":
        del batch[2]
    elif change == "reassign":
        batch[3].weights = other.weights
    from genlm.control.weights import weights_block

    expected = np.stack([r.weights for r in batch])
    np.testing.assert_array_equal(batch.weights, expected)
    assert (batch.rows_block() is not None) == (change == "none")
    read = weights_block(batch)  # what the samplers and the draw read
    np.testing.assert_array_equal(read, expected)
    if change == "none":
        assert not read.flags.writeable  # the batch's own block, handed on as a read-only view
    _, part, rest = _batch(block.copy()).parts([1, 2, 1])
    np.testing.assert_array_equal(part.weights, block[1:3])
    assert part.rows_block() is not None
    np.testing.assert_array_equal(rest.weights, block[3:])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_batchs_own_block_draws_as_its_rows_do(dtype):
    """The draw reads a batch's own block as it is; the same rows handed over as a
    list (stacked row by row) or after a change give the same tokens and weights."""
    gen = np.random.default_rng(3)
    block = np.log(gen.dirichlet(np.ones(4) * 0.5, size=6)).astype(dtype)

    def drawn(rows):
        rngs = [np.random.default_rng(100 + i) for i in range(len(rows))]
        return [(d.token, d.logw) for d in asyncio.run(draw_mod.draw_many(rows, rngs))]

    batch = _batch(block)
    assert batch.rows_block() is block
    assert drawn(batch) == drawn(list(batch))
    moved = _batch(block)
    moved.reverse()
    assert drawn(moved) == drawn(list(reversed(list(_batch(block)))))
