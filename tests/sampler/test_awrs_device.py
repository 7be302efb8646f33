"""AWRS's search on tensor rows (`genlm.control.sampler._awrs_device`): the race is
drawn on the rows' device and only its arrivals are read back.

The race's keys are continuous, so the search cannot be enumerated; its proper
weighting is checked by seeded Monte Carlo against the exact target, with σ-based
tolerances: for every token `x`, `E[exp(logw) 1{token = x}]` is the target's weight
of `x`, on every configuration of the sampler.
"""

from __future__ import annotations

import asyncio
import math
import zlib

import numpy as np
import pytest
import torch
from toys.rows import FixedRow

from genlm.control import AWRS, Potential
from genlm.control.draw import counting_readbacks
from genlm.control.sampler import _awrs_device

NEG_INF = float("-inf")


def _row(seed: int, n: int, ctx: tuple, p_zero: float) -> np.ndarray:
    rng = np.random.default_rng([seed, zlib.crc32(repr(ctx).encode())])
    row = rng.normal(scale=2.0, size=n + 1)
    row[rng.random(n + 1) < p_zero] = NEG_INF
    row[-1] -= 3.0  # EOS a little rarer
    return row


class TensorTable(Potential):
    """Rows of random log weights over `n` tokens (each zero with prob. `p_zero`,
    times `temper`), a function of the context, handed out as float32 tensors like a model's rows on a
    device. `rows32` are the values the sampler sees."""

    def __init__(self, n: int, seed: int, p_zero: float = 0.3, temper: float = 1.0):
        super().__init__(list(range(n)))
        self.n, self.seed, self.p_zero, self.temper = n, seed, p_zero, temper

    def rows32(self, ctx) -> np.ndarray:
        row = self.temper * _row(self.seed, self.n, tuple(ctx), self.p_zero)
        return row.astype(np.float32).astype(np.float64)

    async def prefix(self, context):
        return float(sum(self.rows32(context[:i])[x] for i, x in enumerate(context)))

    async def complete(self, context):
        return await self.prefix(context) + float(self.rows32(context)[-1])

    async def logw_next(self, context):
        return self.make_lazy_weights(torch.tensor(self.rows32(context), dtype=torch.float32))

    async def batch_logw_next(self, contexts):
        block = np.stack([self.rows32(c) for c in contexts])
        return self.rows_to_weights(torch.tensor(block, dtype=torch.float32))


class Allowed(Potential):
    """A Boolean condition: token `x` may follow any context when `allowed[x]`; EOS
    always. With `batched`, it answers blocks of tokens at once (`allowed_next`)."""

    def __init__(self, allowed: np.ndarray, batched: bool):
        super().__init__(list(range(len(allowed))))
        self.allowed = allowed
        self.checks = 0
        if batched:
            self.allowed_next = self._allowed_next

    async def prefix(self, context):
        self.checks += 1
        return 0.0 if all(self.allowed[x] for x in context) else NEG_INF

    async def complete(self, context):
        return await self.prefix(context)

    async def _allowed_next(self, context, indices):
        self.checks += len(indices)
        ok = np.append(self.allowed, True)
        return ok[np.asarray(indices, dtype=np.int64)]


def setup(n: int = 300, p_allow: float = 0.1, batched: bool = True, seed: int = 0, **config):
    gen = np.random.default_rng(seed + 99)
    allowed = gen.random(n) < p_allow
    block = config.pop("device_block", None)
    enumerate_at = config.pop("enumerate_at", 0)
    table = TensorTable(n, seed)
    sampler = AWRS(table, Allowed(allowed, batched), seed=seed, **config)
    sampler.enumerate_at = enumerate_at
    sampler.device_race = True  # the CPU's default is the host search
    if block is not None:
        sampler.device_block = block
    target = table.rows32([]) + np.where(np.append(allowed, True), 0.0, NEG_INF)
    return sampler, target


def draws(sampler: AWRS, n_draws: int, batch: int = 500) -> tuple[list, np.ndarray]:
    """`n_draws` draws after the empty context, in batches (one step of `batch`
    particles each), with independent streams."""
    tokens, logws = [], []
    for b in range(n_draws // batch):
        rngs = [np.random.default_rng([b, k]) for k in range(batch)]
        out = asyncio.run(sampler.batch_sample([[] for _ in range(batch)], rngs))
        tokens += [t for t, _, _ in out]
        logws += [w for _, w, _ in out]
    return tokens, np.array(logws)


def assert_properly_weighted(sampler: AWRS, target: np.ndarray, tokens: list, logws: np.ndarray) -> None:
    """For every token, the mean of `exp(logw) 1{token = x}` is within 5σ of the
    target's weight of `x`, and the mean weight within 5σ of the target's total;
    tokens outside the target are never returned. A token too rare to be seen has no
    sample variance, so σ² adds `want · mean(weight)`, the second moment a weight
    near its mean would give it."""
    eos = sampler.condition.eos
    index = np.array([len(target) - 1 if t == eos else t for t in tokens])
    weight = np.exp(logws)
    assert np.all(np.isfinite(weight))
    returned = index[weight > 0]
    assert np.all(target[returned] > NEG_INF), "a token of target weight zero was returned"
    for x in np.unique(np.concatenate([returned, np.flatnonzero(target > NEG_INF)])):
        contrib = np.where(index == x, weight, 0.0)
        want = math.exp(target[x])
        sigma = math.sqrt((contrib.var() + want * weight.mean()) / len(contrib))
        assert abs(contrib.mean() - want) <= 5 * sigma, (x, contrib.mean(), want, sigma)
    z = float(np.exp(target[target > NEG_INF]).sum())
    assert abs(weight.mean() - z) <= 5 * weight.std() / math.sqrt(len(weight)) + 1e-3 * z


CONFIGS = [
    {},
    {"device_block": 2},
    {"estimator": "recursive"},
    {"max_accepts": 1},
    {"max_accepts": 3, "device_block": 4},
    {"max_rejects": 3},
    {"n_monte_carlo_samples": 16},
    {"enumerate_at": 16},
]


@pytest.mark.filterwarnings("ignore:n_monte_carlo_samples:DeprecationWarning")  # 0.4.1's warning
@pytest.mark.parametrize("batched", [True, False], ids=["blocks", "one-by-one"])
@pytest.mark.parametrize("p_allow", [0.05, 0.5])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_device_search_is_properly_weighted(config, p_allow, batched):
    n = 300 if p_allow > 0.2 else 200
    sampler, target = setup(n=n, p_allow=p_allow, batched=batched, **config)
    tokens, logws = draws(sampler, 3000)
    assert_properly_weighted(sampler, target, tokens, logws)


def test_small_support_is_enumerated_exactly():
    """At most `enumerate_at` live tokens: every one is checked and the draw is exact,
    so each returned weight is the allowed mass itself (zero variance)."""
    sampler, target = setup(n=12, p_allow=0.5, enumerate_at=16)
    tokens, logws = draws(sampler, 1000)
    z = np.logaddexp.reduce(target[target > NEG_INF])
    np.testing.assert_allclose(logws, z, rtol=0, atol=1e-5)
    assert_properly_weighted(sampler, target, tokens, logws)


def test_a_proposal_is_weighed_under_the_potential():
    n = 200
    allowed = np.random.default_rng(1).random(n) < 0.3
    potential, proposal = TensorTable(n, 1), TensorTable(n, 1, p_zero=0.0, temper=0.6)
    sampler = AWRS(potential, Allowed(allowed, True), proposal=proposal, seed=4)
    sampler.enumerate_at, sampler.device_race = 0, True
    target = potential.rows32([]) + np.where(np.append(allowed, True), 0.0, NEG_INF)
    tokens, logws = draws(sampler, 3000)
    assert_properly_weighted(sampler, target, tokens, logws)


def test_improper_weights_draw_the_exact_token_law():
    """`proper_weights=False` stops at the first accept: the token is an exact draw
    from the normalised target (a χ²-style check per token, 5σ)."""
    sampler, target = setup(n=150, p_allow=0.2, proper_weights=False)
    tokens, _ = draws(sampler, 4000)
    eos = sampler.condition.eos
    index = np.array([len(target) - 1 if t == eos else t for t in tokens])
    p = np.exp(target - np.logaddexp.reduce(target[target > NEG_INF]))
    for x in np.flatnonzero(p > 0):
        freq = np.mean(index == x)
        assert abs(freq - p[x]) <= 5 * math.sqrt(p[x] * (1 - p[x]) / len(index)) + 1e-4


def _recording(prefix, asked: list):
    async def recorded(context):
        asked.append(tuple(context))
        return await prefix(context)

    return recorded


def _step(sampler: AWRS, n_particles: int) -> tuple[int, list[int]]:
    """One `batch_sample` of `n_particles`: the read-backs counted, and the number of
    values each carried."""
    sizes = []
    real = _awrs_device.read_back

    def spy(x):
        sizes.append(x.numel())
        return real(x)

    contexts = [[] for _ in range(n_particles)]
    rngs = [np.random.default_rng(k) for k in range(n_particles)]
    _awrs_device.read_back = spy
    try:
        with counting_readbacks() as count:
            out = asyncio.run(sampler.batch_sample(contexts, rngs))
    finally:
        _awrs_device.read_back = real
    assert len(out) == n_particles and count.value == len(sizes)
    return count.value, sizes


@pytest.mark.parametrize("n_particles", [1, 16, 64])
def test_read_backs_are_bounded_by_the_blocks_not_by_particles(n_particles):
    """A step reads back once for every particle's first arrivals and once per round
    of further arrivals, which the requests of one pass share: with one allowed token
    in a hundred, checked one by one, at most `1 + log2(V / device_block) + 1`
    read-backs whatever the number of particles."""
    n = 4096
    sampler, _ = setup(n=n, p_allow=0.01, batched=False, device_block=4)
    condition = sampler.condition.potential
    asked = []
    condition.prefix = _recording(condition.prefix, asked)
    count, sizes = _step(sampler, n_particles)
    assert 1 < count <= 2 + math.log2(n / 4)
    # the particles share the step's answers: no token is asked about twice
    assert len(asked) == len(set(asked)) > 0
    # each arrival is read back once (position and value), with two values per row
    # and round: never more than every live entry of every row
    assert sum(sizes) <= n_particles * (2 * (n + 1) + 2 * count + 2)


@pytest.mark.parametrize("n_particles", [1, 16, 64])
def test_a_dense_condition_reads_back_a_small_part_of_the_rows(n_particles):
    """Where allowed tokens are common the walks finish within the first block: one
    read-back of `2 · device_block + 3` values per particle, out of `V + 1`."""
    n = 4096
    sampler, _ = setup(n=n, p_allow=0.3, batched=True)
    count, sizes = _step(sampler, n_particles)
    assert count == 1
    assert sizes == [n_particles * (2 * sampler.device_block + 3)]


def test_runs_are_reproducible_under_a_seed():
    sampler, _ = setup(n=300, p_allow=0.1)
    a = asyncio.run(sampler.smc(n_particles=8, ess_threshold=0.5, max_tokens=4, seed=3))
    b = asyncio.run(sampler.smc(n_particles=8, ess_threshold=0.5, max_tokens=4, seed=3))
    c = asyncio.run(sampler.smc(n_particles=8, ess_threshold=0.5, max_tokens=4, seed=4))
    assert a.contexts == b.contexts and a.log_weights.tolist() == b.log_weights.tolist()
    assert a.contexts != c.contexts


def _sample(row: list, n: int = 4) -> list:
    sampler = AWRS(FixedRow(row), Allowed(np.ones(len(row) - 1, dtype=bool), True), seed=0)
    sampler.enumerate_at, sampler.device_race = 0, True
    return asyncio.run(sampler.batch_sample([[] for _ in range(n)], [np.random.default_rng(k) for k in range(n)]))


def test_rows_without_mass_nan_and_inf():
    for _, logw, _ in _sample([NEG_INF] * 5):
        assert logw == NEG_INF
    got = _sample([0.0, math.nan, math.nan, 0.0, NEG_INF])  # NaN is weight zero
    assert all(t in (0, 3) for t, _, _ in got)
    assert all(w == pytest.approx(math.log(2.0), abs=1e-5) for _, w, _ in got)
    with pytest.raises(ValueError, match=r"\+inf"):
        _sample([0.0, math.inf, 0.0, 0.0, 0.0])


def test_the_race_is_on_the_device_off_the_cpu_by_default():
    """`device_race=None` (the default) draws the race on the device for rows off the
    CPU only; on CPU tensors (and NumPy rows) the host search runs, with the NumPy
    path's draws."""
    sampler, _ = setup(n=50)
    sampler.device_race = None
    cpu = torch.zeros(3, 51)
    assert not _awrs_device.race_on_device(sampler, cpu)
    assert not _awrs_device.race_on_device(sampler, cpu.numpy())
    meta = torch.zeros(3, 51, device="meta")  # any device that is not the CPU
    assert _awrs_device.race_on_device(sampler, meta)
    sampler.device_race = True
    assert _awrs_device.race_on_device(sampler, cpu)
    sampler.device_race = False
    assert not _awrs_device.race_on_device(sampler, meta)


def test_single_sample_takes_the_device_race_too():
    sampler, target = setup(n=200, p_allow=0.3)
    with counting_readbacks() as count:
        token, logw, logp = asyncio.run(sampler.sample([]))
    assert count.value >= 1 and target[token if token != sampler.condition.eos else -1] > NEG_INF
    assert math.isfinite(logw) and logp <= 0.0


@pytest.mark.parametrize("first", [1, 5, 64])
def test_race_arrivals_are_every_live_token_once_with_exact_masses(first):
    """Taken in pieces of several sizes, a row's arrivals are each live entry once,
    with its probability `q_i / Σq` and, before each, the mass of the entries not yet
    arrived (summed without cancellation: equal to the exact tail sum to 1e-5 of
    it, however small it gets)."""
    gen = np.random.default_rng(7)
    q = gen.normal(scale=4.0, size=(3, 300))
    q[gen.random(q.shape) < 0.3] = NEG_INF
    q[2, :] = NEG_INF
    q[2, [3, 9]] = [0.0, -40.0]
    rows = torch.tensor(q, dtype=torch.float32)
    exact = rows.double().numpy()
    race = _awrs_device.Race(None, rows, [np.random.default_rng(k) for k in range(3)], first)
    for r in range(3):
        live = np.flatnonzero(exact[r] > NEG_INF)
        assert race.live[r] == len(live)
        got = [asyncio.run(race.take(r, size)) for size in (1, 2, 3, 7, 50, 1000)]
        positions, probs, before = (np.concatenate(parts) for parts in zip(*got))
        assert sorted(positions.tolist()) == live.tolist()
        p = np.exp(exact[r] - np.logaddexp.reduce(exact[r][live]))
        np.testing.assert_allclose(probs, p[positions], rtol=1e-5)
        tail = np.cumsum(p[positions][::-1])[::-1]
        np.testing.assert_allclose(before, tail, rtol=1e-5)
        assert asyncio.run(race.take(r, 5))[0].size == 0


def test_first_arrivals_follow_the_proposal():
    """The first arrival is token `i` with probability `q_i / Σq`, the second `j` with
    `q_j / (Σq - q_i)` (5σ per token over 4000 races)."""
    with np.errstate(divide="ignore"):
        q = np.log(np.array([0.4, 0.3, 0.2, 0.1, 0.0]))
    rows = torch.tensor(np.tile(q, (4000, 1)), dtype=torch.float32)
    race = _awrs_device.Race(None, rows, [np.random.default_rng([3, k]) for k in range(4000)], 2)
    pairs = np.array([asyncio.run(race.take(r, 2))[0] for r in range(4000)])
    p = np.exp(q)
    for i in range(4):
        assert abs(np.mean(pairs[:, 0] == i) - p[i]) <= 5 * math.sqrt(p[i] * (1 - p[i]) / 4000)
    second = p[:, None] * p[None, :] / (1 - p[:, None])  # P(first i, second j)
    np.fill_diagonal(second, 0.0)
    for i in range(4):
        for j in range(4):
            want = second[i, j]
            got = np.mean((pairs[:, 0] == i) & (pairs[:, 1] == j))
            assert abs(got - want) <= 5 * math.sqrt(want * (1 - want) / 4000) + 1e-9
