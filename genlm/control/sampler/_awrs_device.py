"""The AWRS search on rows held as tensors: the race is drawn where the rows are.

The search checks tokens in the arrival order of an exponential race
(`genlm.control.sampler._awrs_search`). On tensor rows that order is drawn on the
rows' device: every live token `i` gets the key `log E_i - log q_i`, with
`E_i ~ Exp(1)` from a torch Generator seeded by the particle's stream, and the
arrivals are the keys in increasing order (the smallest of independent `Exp(q_i)`
clocks is token `i` with probability `q_i / M`, and by memorylessness so is every
next one among the tokens left: the law of the host search's draws without
replacement).

AWRS uses it for rows on an accelerator (`race_on_device`). One batched computation
for all the particles of a step folds NaN, normalises the rows, draws the keys and takes each row's first `first` arrivals (`topk`). The host
reads back only those, in one transfer: their positions and `q` (and `w`) values,
each row's `log Σ q` and live count, and the mass of the tokens not yet
arrived (summed on the device from the live entries, so it loses no digits to
cancellation). A walk that needs more arrivals asks for them, twice as many each
time; the requests made in one pass of the event loop are served by one computation
and one read-back. A walk that finishes by asking about every remaining token at
once (`race_after`) reads back that row's remaining arrivals, which it needs to ask
about.

Seeded runs are reproducible, but draw other tokens than the NumPy path, whose race
comes from blocks of draws with a NumPy Generator.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from genlm.control._device import is_tensor, read_back
from genlm.control.draw import using_rng
from genlm.control.sampler._awrs_search import _Chooser, _Walk, estimate, skip_coin
from genlm.control.weights import NEG_INF
from genlm.control.window import Window, gather_or_cancel


class Race:
    """The race of one AWRS step over a block of tensor rows (one per particle).

    `q` is an `(n, V)` tensor over the condition's `vocab_eos`, `w` the potential's
    rows there when a proposal is used (else None); `rngs` holds one generator per
    row, which seeds the row's keys. The first `first` arrivals of every row are read
    back at once.

    Raises:
        ValueError: a `q` entry that is `+inf`.
    """

    def __init__(self, w: Any, q: Any, rngs: Sequence[np.random.Generator], first: int):
        import torch

        self.torch = torch
        q = torch.nan_to_num(q, nan=NEG_INF, posinf=math.inf, neginf=NEG_INF)
        self.q = q
        self.w = (
            None if w is None else torch.nan_to_num(w, nan=NEG_INF, posinf=math.inf, neginf=NEG_INF)
        )
        n, self.size = q.shape
        log_q = torch.logsumexp(q, dim=1) if self.size else q.new_full((n,), NEG_INF)
        self.keys = _keys(q, rngs)
        # q / Σq; the arrived entries are zeroed as they are read, the rest summed
        shift = torch.where(torch.isfinite(log_q), log_q, 0.0)
        self.probs = (q - shift[:, None]).exp_()
        live = (q > NEG_INF).sum(dim=1).to(q.dtype)
        self.arrived = [_Arrivals() for _ in range(n)]
        self.walking: set[int] = set(range(n))  # rows whose walk may still take arrivals
        head = self._fetch(list(range(n)), [first] * n, torch.stack([log_q, live], dim=1))
        if np.isposinf(head[:, 0]).any():
            raise ValueError(
                "a log weight is +inf: a potential returned an infinite weight, which no normalized target can have"
            )
        self.log_q = head[:, 0]
        self.live = head[:, 1].astype(np.int64)

    def _fetch(self, rows: list[int], counts: list[int], head: Any = None) -> np.ndarray:
        """The first `max(counts)` arrivals of `rows`, handed to their `_Arrivals`, in
        one read-back, which also carries `head`'s columns (returned). Arrivals that
        every row holds already are not read back again."""
        torch = self.torch
        k = min(max(counts), self.size)
        every = rows == list(range(len(self.arrived)))
        sel = torch.as_tensor(rows, device=self.q.device)

        def of(block: Any) -> Any:  # the rows' part of an (n, V) block (a copy unless all)
            return block if every else block.index_select(0, sel)

        order = torch.topk(of(self.keys), k, dim=1, largest=False, sorted=True).indices
        at = (sel[:, None], order)
        self.probs.index_put_(at, self.probs.new_zeros(()))
        rest = of(self.probs).sum(dim=1, keepdim=True)
        held = min(self.arrived[r].fetched for r in rows)
        order = order[:, held:]
        at = (sel[:, None], order)
        k = order.shape[1]
        parts = [order.to(self.q.dtype), self.q[at]]
        if self.w is not None:
            parts.append(self.w[at].to(self.q.dtype))
        width = len(parts)
        parts.append(rest.to(self.q.dtype))
        if head is not None:
            parts.append(head.index_select(0, sel).to(self.q.dtype))
        back = read_back(torch.cat(parts, dim=1)).numpy().astype(np.float64)
        for j, r in enumerate(rows):
            row = back[j]
            w_at = row[2 * k : 3 * k] if width == 3 else None
            self.arrived[r].extend(row[:k].astype(np.int64), row[k : 2 * k], w_at, float(row[width * k]))
        return back[:, width * k + 1 :]

    async def take(self, r: int, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Row `r`'s next `size` arrivals (fewer when its live tokens run out): their
        positions, probabilities `q_i / Σq` and the mass not yet arrived before each."""
        got = self.arrived[r]
        live = int(self.live[r])
        while got.ready < size and got.fetched < live:
            held = got.fetched
            await _window.submit((self, r, min(live, max(2 * held, got.taken + size))))
            if got.fetched == held:  # nothing new (cannot happen with distinct keys)
                break
        return got.take(size, float(self.log_q[r]))

    async def take_rest(self, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All of row `r`'s arrivals not yet taken, in one read-back at most."""
        return await self.take(r, max(int(self.live[r]) - self.arrived[r].taken, 0))

    def values(self, r: int, position: int) -> tuple[float, float]:
        """`(w, q)` of row `r` at an arrived position (`w` is `q` without a proposal)."""
        return self.arrived[r].values[position]


def _keys(q: Any, rngs: Sequence[np.random.Generator]) -> Any:
    """The race's keys `log E - q` (`E ~ Exp(1)`), one row per generator: `+inf` where
    `q` is `-inf`. `E = -log(1 - U)` from double-precision uniforms drawn on `q`'s
    device by a torch Generator seeded from the row's generator: single-precision
    uniforms would put `E = 0` (a token arriving first whatever its weight) in one
    row of 131k tokens in a hundred, and round small `E` coarsely."""
    import torch

    u = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    for r, rng in enumerate(rngs):
        gen = torch.Generator(device=q.device)
        gen.manual_seed(int(rng.integers(2**63 - 1)))
        u[r].uniform_(generator=gen)
    return u.neg_().log1p_().neg_().log_().to(q.dtype).sub_(q)


class _Arrivals:
    """One row's arrivals read back so far, and how many the walk has taken."""

    def __init__(self) -> None:
        self.positions = np.zeros(0, dtype=np.int64)
        self.q = np.zeros(0)
        self.probs = self.before = np.zeros(0)
        self.values: dict[int, tuple[float, float]] = {}
        self.taken = 0
        self.rest = 0.0

    @property
    def fetched(self) -> int:
        return len(self.positions)

    @property
    def ready(self) -> int:
        return self.fetched - self.taken

    def extend(
        self, order: np.ndarray, q_at: np.ndarray, w_at: np.ndarray | None, rest: float
    ) -> None:
        """A longer prefix of the arrivals and the mass of the tokens after it. Entries
        held already are skipped by position rather than by count, so that keys equal
        in float, which two `topk` calls may order differently, are neither repeated
        nor lost; entries past the live count (weight zero) are dropped."""
        w_at = q_at if w_at is None else w_at
        new = ~np.isin(order, self.positions) & (q_at > NEG_INF)
        order, q_at, w_at = order[new], q_at[new], w_at[new]
        self.positions = np.concatenate([self.positions, order])
        self.q = np.concatenate([self.q, q_at])
        self.values.update(zip(order.tolist(), zip(w_at.tolist(), q_at.tolist())))
        self.rest = rest

    def take(self, size: int, log_q: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if len(self.before) < self.fetched:  # the mass before each arrival: rest + suffix sums
            self.probs = np.exp(self.q - log_q)
            self.before = self.rest + np.cumsum(self.probs[::-1])[::-1]
        span = slice(self.taken, min(self.taken + size, self.fetched))
        self.taken = span.stop
        return self.positions[span], self.probs[span], self.before[span]


async def _serve(requests: list[tuple]) -> list[None]:
    """Fetch every waiting row's arrivals: one computation and read-back per race,
    which also doubles the arrivals held by every other row of the race still
    walking (see `ahead`)."""
    by_race: dict[int, tuple[Race, dict[int, int]]] = {}
    for race, r, want in requests:
        rows = by_race.setdefault(id(race), (race, {}))[1]
        rows[r] = max(rows.get(r, 0), want)
    for race, rows in by_race.values():
        for r, want in ahead(race, rows).items():
            rows.setdefault(r, want)
        race._fetch(list(rows), list(rows.values()))
    return [None] * len(requests)


def ahead(race: Race, asked: dict[int, int]) -> dict[int, int]:
    """The rows of `race` still walking that did not ask in this pass, with twice
    the arrivals each holds (at most its live count).

    The walks of one step need their next arrivals in different passes of the event
    loop: a walk whose checks the memo answers (`genlm.control.sampler._awrs_checks`)
    awaits no condition call and runs ahead of the others. Serving them ahead of
    time with the walk that asks keeps every read-back a doubling of each walking
    row's arrivals, so a step reads back at most `1 + log2(V / first)` times after
    its first read-back, whatever the number of particles and whenever each asks.
    Reading further ahead in the arrival order changes no draw."""
    out = {}
    for r in sorted(race.walking - asked.keys()):
        got, live = race.arrived[r], int(race.live[r])
        if got.fetched < live:
            out[r] = min(live, 2 * got.fetched)
    return out


_window: Window = Window(_serve)


class _Known:
    """The probabilities of the arrived positions, indexed like a row."""

    def __init__(self, probs: dict[int, float]):
        self.probs = probs

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (list, np.ndarray)):
            return np.array([self.probs[int(i)] for i in key])
        return self.probs[int(key)]


def race_on_device(sampler: Any, q: Any) -> bool:
    """Whether AWRS's search over rows `q` draws its race on their device: by
    `sampler.device_race`, or when that is None, for tensor rows off the CPU. On a
    CPU the rows are in host memory already, where the host search's blocks of draws
    cost less than a key per token (`docs/performance.md`)."""
    if not is_tensor(q):
        return False
    return q.device.type != "cpu" if sampler.device_race is None else bool(sampler.device_race)


async def search_on_device(
    sampler: Any, contexts: list[list], w: Any, q: Any, rngs: list
) -> list[tuple]:
    """`batch_sample` of AWRS's search path on tensor rows: `(token, logw, logp)` per
    context, each particle's choices made with its generator in `rngs`."""
    first = max(sampler.device_block, sampler.enumerate_at)
    race = Race(None if w is q else w, q, rngs, first)
    return await gather_or_cancel(
        *(_one(sampler, race, r, ctx, rngs[r]) for r, ctx in enumerate(contexts))
    )


async def _one(sampler: Any, race: Race, r: int, context: list, rng: np.random.Generator) -> tuple:
    try:
        return await _one_row(sampler, race, r, context, rng)
    finally:
        race.walking.discard(r)  # later read-backs of the step skip this row


async def _one_row(sampler: Any, race: Race, r: int, context: list, rng: np.random.Generator) -> tuple:
    eos = sampler.condition.eos
    log_q = float(race.log_q[r])
    if log_q == NEG_INF:
        return eos, NEG_INF, NEG_INF
    if race.live[r] <= sampler.enumerate_at:
        return await _enumerated(sampler, race, r, context, rng)
    choose = _Chooser(sampler.support.tokens, None, rng)
    first, log_z = await _walk(sampler, race, r, context, choose)
    if first is None or log_z == NEG_INF:
        return eos, NEG_INF, choose.logp
    w_x, q_x = race.values(r, first)
    ratio = log_q if sampler.proposal is None else w_x - (q_x - log_q)
    return sampler.support.tokens[first], ratio + log_z, choose.logp


async def _enumerated(
    sampler: Any, race: Race, r: int, context: list, rng: np.random.Generator
) -> tuple:
    """A support of at most `enumerate_at` tokens: all checked, then an exact draw."""
    positions, _, _ = await race.take_rest(r)
    size = race.size
    w_row, q_row = np.full(size, NEG_INF), np.full(size, NEG_INF)
    for i in positions.tolist():
        w_row[i], q_row[i] = race.values(r, i)
    allowed = np.zeros(size, dtype=bool)
    allowed[positions] = await sampler._check_all(context, positions)
    with using_rng(rng):
        return await sampler._exact(w_row, q_row, allowed, None)


async def _walk(sampler: Any, race: Race, r: int, context: list, choose: _Chooser) -> tuple:
    """`AWRS.search` over the device race's arrivals: the first accepted position
    and `log Ẑ`."""
    m = sampler.max_accepts if sampler.proper_weights else 1
    walk = _Walk(m, sampler.max_rejects, coin=sampler.recursive)
    batched = sampler._allowed_next is not None
    size = sampler.block_size if batched else 1
    known: dict[int, float] = {}
    probs = _Known(known)
    while not walk.done:
        if walk.coin and walk.accepts and walk.skip is None:
            walk.skip = skip_coin(walk, probs, choose)
            if walk.skip:
                break
        rest = batched and walk.rejects >= sampler.race_after
        drawn, chosen, before = await (race.take_rest(r) if rest else race.take(r, size))
        if not len(drawn):
            break
        known.update(zip(drawn.tolist(), chosen.tolist()))
        ok, _ = await sampler._check_block(context, drawn)
        walk.arrive(drawn, chosen, before, ok, choose)
        if rest:
            break
        size = min(2 * size, sampler.max_block) if batched else 1
    first, log_z = estimate(sampler, walk, probs, choose)
    return first, log_z


__all__ = ["Race", "race_on_device", "search_on_device"]
