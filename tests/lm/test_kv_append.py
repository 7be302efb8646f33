"""`AppendLayer`: states extended in place give the rows `torch.cat` gives, bit for bit,
and never change a state another sequence holds."""

import inspect
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import DynamicCache  # noqa: E402

from genlm.control import PromptedLLM  # noqa: E402
from genlm.control.embedded import EMBEDDED_MODEL  # noqa: E402
from genlm.control.lm._hf_batch import CachedTransformer, Group, _stack_pasts, hand_over  # noqa: E402
from genlm.control.lm._kv_append import AppendLayer, arena_of, capacity, states_block  # noqa: E402
from genlm.control.lm._kv_cache import KV, PrefixCache  # noqa: E402


@pytest.fixture(scope="module")
def hf():
    backend = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf").model
    return backend.model, backend.tokenizer


def _arg(model) -> str:
    return "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"


def _states(out) -> list[tuple[torch.Tensor, torch.Tensor]]:
    cache = out.past_key_values if getattr(out, "cache", None) is None else out.cache
    return [(layer.keys, layer.values) for layer in cache.layers]


def _step(model, tokens, cache):
    with torch.no_grad():
        return model(torch.tensor(tokens).reshape(-1, 1), use_cache=True, **{_arg(model): cache})


def _prompt_states(hf, rows: int = 3):
    model, tok = hf
    ids = torch.tensor([tok.encode("def f(x):")] * rows)
    with torch.no_grad():
        out = model(ids, use_cache=True)
    return [(k.clone(), v.clone()) for k, v in _states(out)]


def test_steps_extend_one_arena_in_place_and_equal_the_concatenating_cache_bit_for_bit(hf):
    model, _ = hf
    pasts = _prompt_states(hf)
    ours, theirs = hand_over(pasts), DynamicCache([(k.clone(), v.clone()) for k, v in pasts])
    assert all(type(layer) is AppendLayer for layer in ours.layers)
    held = []  # every step's states, as the prefix cache keeps them
    steps = 40
    for t in range(steps):  # past several arenas' room
        tokens = [5 + t, 6 + t, 7 + t]
        a, b = _step(model, tokens, ours), _step(model, tokens, theirs)
        assert torch.equal(a.logits, b.logits)
        states = _states(a)
        assert all(arena_of(k, v) is not None for k, v in states)
        held.append([(k, v, k.clone(), v.clone()) for k, v in states])
        ours = a.past_key_values if getattr(a, "cache", None) is None else a.cache
        theirs = b.past_key_values if getattr(b, "cache", None) is None else b.cache
    # A new arena (a copy of the past) only where the last one's room ran out.
    arenas, room = 0, 0
    for length in range(pasts[0][0].shape[2] + 1, pasts[0][0].shape[2] + steps + 1):
        if length > room:
            arenas, room = arenas + 1, capacity(length)
    pointers = {held[t][0][0].data_ptr() for t in range(len(held))}
    assert len(pointers) == arenas < steps / 4
    for states in held:  # the states every step handed out kept their values
        for k, v, k0, v0 in states:
            assert torch.equal(k, k0) and torch.equal(v, v0)


def test_a_past_extended_twice_is_copied_the_second_time_and_both_rows_are_exact(hf):
    model, _ = hf
    pasts = _prompt_states(hf)
    first = _step(model, [11, 12, 13], hand_over(pasts))
    views = _states(first)
    snapshot = [(k.clone(), v.clone()) for k, v in views]
    # Two continuations of the same states: the first writes behind them in place, the
    # second finds the room taken and copies them into a new arena.
    left = _step(model, [20, 21, 22], hand_over(views))
    right = _step(model, [30, 31, 32], hand_over(views))
    ref = DynamicCache([(k.clone(), v.clone()) for k, v in snapshot])
    torch.testing.assert_close(right.logits, _step(model, [30, 31, 32], ref).logits, atol=0, rtol=0)
    ref = DynamicCache([(k.clone(), v.clone()) for k, v in snapshot])
    torch.testing.assert_close(left.logits, _step(model, [20, 21, 22], ref).logits, atol=0, rtol=0)
    (lk, _), (rk, _) = _states(left)[0], _states(right)[0]
    assert lk.data_ptr() == views[0][0].data_ptr() and rk.data_ptr() != views[0][0].data_ptr()
    assert not torch.equal(lk[:, :, -1], rk[:, :, -1])
    for (k, v), (k0, v0) in zip(views, snapshot):
        assert torch.equal(k, k0) and torch.equal(v, v0)


def test_with_gradients_on_the_layer_extends_by_concatenation(hf):
    model, _ = hf
    pasts = _prompt_states(hf)
    cache = hand_over(pasts)
    with torch.enable_grad():
        out = model(torch.tensor([[1], [2], [3]]), use_cache=True, **{_arg(model): cache})
    assert all(arena_of(k, v) is None for k, v in _states(out))
    ref = _step(model, [1, 2, 3], DynamicCache([(k.clone(), v.clone()) for k, v in pasts]))
    torch.testing.assert_close(out.logits.detach(), ref.logits, atol=0, rtol=0)


def test_stacked_pasts_are_the_concatenated_rows_zero_padded_with_room_behind_them(hf):
    pasts = _prompt_states(hf, rows=4)
    short = [(k[:2, :, :-2].clone(), v[:2, :, :-2].clone()) for k, v in pasts]
    width = pasts[0][0].shape[2]
    groups = [
        Group([(1,)], width, KV(tuple(pasts), 3), ()),
        Group([(2,)], width, KV(tuple(pasts), 1), ()),
        Group([(3,)], width - 2, KV(tuple(short), 0), ()),
        Group([(4,)], width, KV(tuple(pasts), 1), ()),
    ]
    stacked = _stack_pasts(groups, width, 1)
    for layer, (k, v) in enumerate(stacked):
        arena = arena_of(k, v)
        assert arena is not None and arena.keys.shape[2] == width + 1  # room for the forward, no more
        for side, t in enumerate((k, v)):
            full, cut = pasts[layer][side], short[layer][side]
            padded = torch.cat([cut[0:1], cut.new_zeros(1, cut.shape[1], 2, cut.shape[3])], dim=2)
            expected = torch.cat([full[3:4], full[1:2], padded, full[1:2]], dim=0)
            assert torch.equal(t, expected)


def test_forwards_that_share_arenas_are_charged_once(hf):
    model, _ = hf
    cache = PrefixCache(10**9)
    ours = hand_over(_prompt_states(hf))
    blocks = []
    for t in range(4):
        out = _step(model, [t, t + 1, t + 2], ours)
        states = _states(out)
        blocks.append(states_block(states))
        cache.put((t,), KV(tuple(states), 0), blocks[-1], None, None)
        ours = out.past_key_values if getattr(out, "cache", None) is None else out.cache
    assert all(b is blocks[0] for b in blocks)
    arenas = [arena_of(k, v) for k, v in states]
    assert cache.nbytes == sum(a.keys.nbytes + a.values.nbytes for a in arenas)
    # states that are not an arena's written positions count their own bytes
    plain = [(k.clone(), v.clone()) for k, v in states]
    assert states_block(plain).nbytes == sum(k.nbytes + v.nbytes for k, v in plain)


async def _resampled_run_against_concatenation(model, tokenizer, monkeypatch, atol: float) -> None:
    """The backend with arenas against the same backend whose layers concatenate,
    through 40 steps that resample at two steps in three."""
    import genlm.control.lm._hf_batch as hf_batch

    rng = np.random.default_rng(3)
    seqs = [tuple(tokenizer.encode("Parse the"))] * 6
    ours, theirs = CachedTransformer(model, tokenizer), CachedTransformer(model, tokenizer)
    for step in range(40):
        a = await ours.batch_next_token_logprobs(seqs)
        with monkeypatch.context() as m:
            m.setattr(hf_batch, "AppendLayer", None)  # hand_over falls back to DynamicCache(pasts)
            b = await theirs.batch_next_token_logprobs(seqs)
        torch.testing.assert_close(a, b, atol=atol, rtol=0)
        ancestors = rng.integers(0, len(seqs), size=len(seqs)) if step % 3 else np.arange(len(seqs))
        toks = torch.multinomial(a.float().exp().cpu(), 1, generator=torch.Generator().manual_seed(step)).ravel()
        seqs = [seqs[i] + (int(toks[i]),) for i in ancestors]


async def test_a_resampled_run_gives_the_rows_of_the_concatenating_cache_bit_for_bit(hf, monkeypatch):
    await _resampled_run_against_concatenation(*hf, monkeypatch, atol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
async def test_on_cuda_a_resampled_run_gives_the_rows_of_the_concatenating_cache(hf, monkeypatch):  # pragma: no cover - needs a GPU
    # the attention kernel may differ between strided and contiguous states on the device
    import copy

    await _resampled_run_against_concatenation(copy.deepcopy(hf[0]).to("cuda"), hf[1], monkeypatch, atol=2e-4)


def test_an_arena_has_an_eighth_more_room_and_at_least_a_few_positions():
    assert [capacity(n) for n in (0, 1, 8, 31, 32, 64, 1000)] == [4, 5, 12, 35, 36, 72, 1125]
