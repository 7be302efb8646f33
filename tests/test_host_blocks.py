"""`HostBlocks`: a block is handed out again only once nothing made from it is alive,
and the rows written into kept blocks are the rows `torch.empty` blocks get."""

import asyncio
import gc
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import genlm.control._host_blocks as host_blocks  # noqa: E402
from genlm.control import AWRS, BoolFSA, PromptedLLM, direct_token_sampler  # noqa: E402
from genlm.control._host_blocks import HostBlocks  # noqa: E402
from genlm.control.embedded import EMBEDDED_MODEL  # noqa: E402

WIDTH = 1 << 16  # 4 float32 rows of this width are 1 MB: kept blocks from 4 rows up


def _holders(t: torch.Tensor) -> dict:
    """Each way a caller can keep a block alive without holding the tensor itself."""
    return {
        "torch view": lambda: t[1],
        "torch reshape": lambda: t.view(-1),
        "numpy array": lambda: t.numpy(),
        "numpy view": lambda: t.numpy()[2:, 5:],
        "tensor of a numpy view": lambda: torch.from_numpy(t.numpy()[1:]),
    }


@pytest.mark.parametrize("kind", list(_holders(torch.empty(1))))
def test_a_block_is_not_handed_out_while_anything_made_from_it_lives(kind):
    blocks = HostBlocks()
    t = blocks.empty(4, WIDTH, torch.float32)
    t.fill_(7.0)
    address = t.data_ptr()
    held = _holders(t)[kind]()
    del t
    gc.collect()
    other = blocks.empty(4, WIDTH, torch.float32)
    assert other.data_ptr() != address
    other.fill_(-1.0)
    assert (np.asarray(held) == 7.0).all()  # the held block kept its values
    del held, other
    gc.collect()
    again = blocks.empty(4, WIDTH, torch.float32)
    assert again.data_ptr() == address  # free again: the first block kept serves it
    assert blocks.reused == 1
    assert blocks.made == 2


def test_a_free_block_is_reused_for_the_same_rows_and_its_address_is_kept():
    blocks = HostBlocks()
    first = blocks.empty(4, WIDTH, torch.float32)
    address = first.data_ptr()
    del first
    second = blocks.empty(4, WIDTH, torch.float32)
    assert second.data_ptr() == address
    assert (blocks.made, blocks.reused) == (1, 1)
    assert second.shape == (4, WIDTH) and second.is_contiguous() and second.dtype == torch.float32


def test_requests_take_the_smallest_free_block_with_room_for_at_most_twice_their_rows():
    blocks = HostBlocks(idle=8)
    made = {rows: blocks.empty(rows, WIDTH, torch.float32) for rows in (4, 8, 16)}
    address = {rows: t.data_ptr() for rows, t in made.items()}
    del made
    five = blocks.empty(5, WIDTH, torch.float32)  # 8 rows: the smallest with room
    assert five.data_ptr() == address[8] and five.shape == (5, WIDTH)
    seven = blocks.empty(7, WIDTH, torch.float32)  # 16 rows would hold it, but above 14
    assert seven.data_ptr() not in address.values()
    nine = blocks.empty(9, WIDTH, torch.float32)  # 16 rows: at most twice 9
    assert nine.data_ptr() == address[16]
    assert blocks.empty(4, WIDTH, torch.float64).data_ptr() not in address.values()  # other dtype


def test_free_blocks_past_the_idle_bound_are_let_go():
    blocks = HostBlocks(idle=1)
    live = [blocks.empty(4, WIDTH, torch.float32) for _ in range(5)]
    assert blocks.nbytes() == 5 * 4 * WIDTH * 4
    del live
    kept = blocks.empty(4, WIDTH, torch.float32)
    # one block serves the request, one more stays free, the other three go
    assert blocks.nbytes() == 2 * 4 * WIDTH * 4
    assert kept.shape == (4, WIDTH)
    blocks.clear()
    assert blocks.nbytes() == 0


def test_trim_lets_go_the_free_blocks_past_the_idle_bound_of_every_width():
    blocks = HostBlocks(idle=1)
    live = [blocks.empty(4, w, torch.float32) for w in (WIDTH, 2 * WIDTH) for _ in range(3)]
    held = live[0]
    del live
    blocks.trim()  # width WIDTH: one held, one free kept; width 2 * WIDTH: one free kept
    assert blocks.nbytes() == 2 * 4 * WIDTH * 4 + 4 * 2 * WIDTH * 4
    assert held.shape == (4, WIDTH)


def test_small_blocks_and_dtypes_numpy_lacks_come_from_torch():
    blocks = HostBlocks()
    small = blocks.empty(2, 16, torch.float32)
    half = blocks.empty(8, WIDTH, torch.bfloat16)
    assert small.shape == (2, 16) and half.dtype == torch.bfloat16 and half.shape == (8, WIDTH)
    assert blocks.made == 0 and blocks.nbytes() == 0


@pytest.fixture
def every_block_kept(monkeypatch):
    """Every host block of rows, however small, goes through a fresh `HOST_BLOCKS`."""
    blocks = HostBlocks()
    monkeypatch.setattr(host_blocks, "MIN_BYTES", 0)
    monkeypatch.setattr(host_blocks.HOST_BLOCKS, "empty", blocks.empty)
    return blocks


@pytest.fixture
def no_block_kept(monkeypatch):
    monkeypatch.setattr(host_blocks.HOST_BLOCKS, "empty", lambda rows, width, dtype: torch.empty(rows, width, dtype=dtype))


def _rows_of_a_resampled_walk(cache_bytes: int) -> tuple[list, list]:
    """Rows of 40 steps of 6 resampled contexts on a backend with a small budget (old
    rows evicted, so their blocks come free), and copies of every 10th step's rows
    taken when they were returned, with the returned rows kept."""
    backend = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf", cache_bytes=cache_bytes).model
    rng = np.random.default_rng(3)
    seqs = [tuple(backend.tokenizer.encode("def f(x):"))] * 6
    out, held = [], []
    for step in range(40):
        rows = asyncio.run(backend.batch_next_token_logprobs(seqs))
        out.append(rows.clone())
        if step % 10 == 0:
            held.append((rows, rows.clone()))
        toks = torch.multinomial(rows.exp(), 1, generator=torch.Generator().manual_seed(step)).ravel()
        seqs = [seqs[a] + (int(toks[a]),) for a in rng.integers(0, len(seqs), size=len(seqs))]
    return out, held


def test_backend_rows_in_kept_blocks_equal_fresh_blocks_and_held_rows_never_change(every_block_kept, monkeypatch):
    kept, held = _rows_of_a_resampled_walk(cache_bytes=400_000)
    assert every_block_kept.reused > 20  # the walk did reuse blocks
    for rows, copy in held:
        assert torch.equal(rows, copy)  # no later forward wrote into a held block
    monkeypatch.setattr(host_blocks.HOST_BLOCKS, "empty", lambda r, w, d: torch.empty(r, w, dtype=d))
    fresh, _ = _rows_of_a_resampled_walk(cache_bytes=400_000)
    assert all(torch.equal(a, b) for a, b in zip(kept, fresh))


@pytest.mark.parametrize("which", ["direct", "awrs"])
def test_seeded_runs_are_the_same_with_and_without_kept_blocks(which, monkeypatch):
    def run(keep: bool):
        blocks = HostBlocks()
        monkeypatch.setattr(host_blocks, "MIN_BYTES", 0 if keep else host_blocks.MIN_BYTES)
        monkeypatch.setattr(
            host_blocks.HOST_BLOCKS,
            "empty",
            blocks.empty if keep else (lambda r, w, d: torch.empty(r, w, dtype=d)),
        )
        llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf", cache_bytes=300_000)
        llm.set_prompt_from_str("The answer is")
        if which == "direct":
            sampler = direct_token_sampler(llm)
        else:
            sampler = AWRS(llm, BoolFSA.from_regex(r" [a-z]+( [a-z]+)*\.").coerce(llm, f=b"".join))
        seqs = asyncio.run(sampler.smc(n_particles=8, ess_threshold=0.5, max_tokens=12, seed=11))
        monkeypatch.undo()
        return [tuple(c) for c in seqs.contexts], list(seqs.log_weights), blocks

    (a_ctx, a_w, blocks), (b_ctx, b_w, _) = run(True), run(False)
    assert blocks.reused > 0
    assert a_ctx == b_ctx
    assert a_w == b_w
