"""The SMC kernel is pure: exact small cases, no event loop and no model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from genlm.control.constant import EOS
from genlm.control.smc import kernel
from genlm.control.smc.resampling import get_resampler, multinomial_resample
from genlm.control.smc.state import PopulationState, Proposals, closed

NEG_INF = -math.inf


def _state(log_weights, contexts=None, twists=None, done=None) -> PopulationState:
    n = len(log_weights)
    return PopulationState(
        contexts=tuple(contexts) if contexts is not None else ((),) * n,
        log_weights=np.array(log_weights, dtype=np.float64),
        twists=np.zeros(n) if twists is None else np.array(twists, dtype=np.float64),
        done=np.zeros(n, dtype=bool) if done is None else np.array(done, dtype=bool),
    )


def test_the_kernel_module_needs_no_event_loop():
    """Every public kernel function is a plain function (no coroutine, no loop)."""
    import asyncio
    import inspect

    for name in kernel.__all__:
        assert not inspect.iscoroutinefunction(getattr(kernel, name)), name
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()


def test_state_is_frozen_and_read_only():
    s = _state([0.0, -1.0])
    with pytest.raises(AttributeError):
        s.log_weights = np.zeros(2)
    with pytest.raises(ValueError):
        s.log_weights[0] = 5.0
    with pytest.raises(ValueError):
        s.done[0] = True


def test_state_rejects_arrays_of_the_wrong_length():
    with pytest.raises(ValueError, match=r"population of 2 contexts needs arrays of shape \(2,\)"):
        PopulationState(((), ()), np.zeros(3), np.zeros(2), np.zeros(2, dtype=bool))


def test_initial_state_and_a_dead_start():
    s = kernel.initial_state(3, -0.5, EOS)
    assert s.contexts == ((), (), ()) and s.log_weights.tolist() == [-0.5] * 3
    assert not s.done.any() and s.twists.tolist() == [0.0] * 3
    dead = kernel.initial_state(2, NEG_INF, EOS)
    assert dead.contexts == ((EOS,), (EOS,)) and dead.done.all()


def test_reweight_adds_increments_and_twist_differences_exactly():
    """logw ← logw + logw_unit + (twist_new − twist_old) where scored."""
    s = _state([-1.0, -2.0, -3.0], contexts=[("a",), ("b",), ("c",)], twists=[0.5, 0.25, 0.0])
    live = np.array([0, 2])
    p = Proposals(
        contexts=[("a", "x"), ("c", EOS)],
        logws=np.array([-0.75, -1.5]),
        twists=np.array([-0.25, 0.0]),  # particle 2 not scored: its twist stays 0.0
        scored=np.array([True, False]),
        ends=np.array([False, True]),
    )
    t = kernel.reweight(s, live, p, EOS)
    assert t.log_weights.tolist() == [-1.0 - 0.75 + (-0.25 - 0.5), -2.0, -3.0 - 1.5]
    assert t.twists.tolist() == [-0.25, 0.25, 0.0]
    assert t.done.tolist() == [False, False, True]
    assert t.contexts == (("a", "x"), ("b",), ("c", EOS))
    assert s.log_weights.tolist() == [-1.0, -2.0, -3.0], "the old state is unchanged"


def test_reweight_finishes_a_particle_whose_weight_is_zero():
    """A −inf (or NaN) increment finishes the particle; a killed context is not closed
    with EOS (it did not end: as in 0.4.1, it stays out of `decoded_posterior`)."""
    s = _state([0.0, 0.0, 0.0])
    p = Proposals([("a",), ("b",), (EOS,)], np.array([NEG_INF, np.nan, -1.0]), np.zeros(3), np.zeros(3, bool),
                  np.array([False, False, True]))
    t = kernel.reweight(s, np.arange(3), p, EOS)
    assert t.log_weights.tolist() == [NEG_INF, NEG_INF, -1.0]
    assert t.done.all()
    assert t.contexts == (("a",), ("b",), (EOS,))


def test_reweight_rejects_a_positive_infinite_increment():
    p = Proposals([("a",)], np.array([math.inf]), np.zeros(1), np.zeros(1, bool), np.zeros(1, bool))
    with pytest.raises(ValueError, match=r"a log weight is \+inf"):
        kernel.reweight(_state([0.0]), np.array([0]), p, EOS)


def test_closed_leaves_an_eos_ending_unit_alone():
    assert closed(("a", EOS), EOS) == ("a", EOS)
    assert closed((["a", EOS],), EOS) == (["a", EOS],)
    assert closed((["a"],), EOS) == (["a"], EOS)
    assert closed((), EOS) == (EOS,)


def test_ess_and_the_resampling_decision():
    """ESS of weights (1, 1, 2)/4 is 1/(1/16 + 1/16 + 1/4) = 8/3."""
    s = _state(np.log([1.0, 1.0, 2.0]))
    assert s.ess == pytest.approx(8 / 3, rel=1e-12)
    assert kernel.should_resample(s.log_weights, 0.9)  # 8/3 < 2.7
    assert not kernel.should_resample(s.log_weights, 0.85)  # 8/3 > 2.55
    assert not kernel.should_resample(s.log_weights, 0.0)
    assert kernel.should_resample(np.zeros(3), 1.0)


def test_ancestors_are_none_when_no_resampling_and_leave_the_generator_alone():
    rng = np.random.default_rng(0)
    before = rng.bit_generator.state
    s = _state([0.0, 0.0])
    assert kernel.ancestors(s, rng, 0.5, multinomial_resample) is None  # ESS = n
    dead = _state([-np.inf, -np.inf], done=[True, True])
    assert kernel.ancestors(dead, rng, 1.0, multinomial_resample) is None  # every weight zero
    assert rng.bit_generator.state == before


def test_a_finished_population_is_resampled_when_its_ess_is_low():
    """The step in which the last particle finishes is decided like any other (0.4.1's
    rule): ESS of weights (1, e^-5) is below 0.9 · 2, so the finished population is
    resampled; at ESS = n it is not."""
    done = _state([0.0, -5.0], done=[True, True])
    got = kernel.ancestors(done, np.random.default_rng(0), 0.9, multinomial_resample)
    assert got is not None and len(got) == 2
    assert kernel.ancestors(_state([0.0, 0.0], done=[True, True]), np.random.default_rng(0), 0.9, multinomial_resample) is None


@pytest.mark.parametrize("method", ["multinomial", "stratified", "systematic", "residual"])
def test_ancestors_are_the_scheme_under_the_given_generator(method):
    scheme = get_resampler(method)
    logw = np.log([0.1, 0.6, 0.3, 1e-3])
    got = kernel.ancestors(_state(logw), np.random.default_rng(7), 1.0, scheme)
    w = np.exp(logw - np.logaddexp.reduce(logw))
    assert got.tolist() == scheme(np.random.default_rng(7), w, 4).tolist()


def test_systematic_ancestors_under_a_fixed_generator():
    """Systematic: u ~ U(0,1) from the generator, points (u + k)/n, CDF (0.25, 0.5, 1)."""
    rng = np.random.default_rng(3)
    u = np.random.default_rng(3).random()
    points = (u + np.arange(4)) / 4
    want = np.searchsorted(np.cumsum([0.25, 0.25, 0.5]), points, side="right").tolist()
    logw = [0.0, 0.0, math.log(2.0), NEG_INF]
    got = kernel.ancestors(_state(logw), rng, 1.0, get_resampler("systematic"))
    assert got.tolist() == [min(a, 3) for a in want]


def test_resample_copies_ancestors_and_keeps_log_ml():
    """After resampling every weight is log(Σ exp(logw)/n), so log_ml is unchanged."""
    s = _state([-1.0, -2.0, NEG_INF], contexts=[("a",), ("b",), ("c", EOS)], twists=[0.1, 0.2, 0.3],
               done=[False, True, True])
    t = kernel.resample(s, np.array([1, 1, 0]))
    mean = math.log((math.exp(-1.0) + math.exp(-2.0)) / 3)
    assert t.log_weights.tolist() == pytest.approx([mean] * 3, abs=1e-15)
    assert t.log_ml == pytest.approx(s.log_ml, abs=1e-15) == pytest.approx(mean, abs=1e-15)
    assert t.contexts == (("b",), ("b",), ("a",))
    assert t.twists.tolist() == [0.2, 0.2, 0.1] and t.done.tolist() == [True, True, False]


def test_log_ml_of_a_dead_population_is_minus_infinity():
    assert _state([NEG_INF, NEG_INF]).log_ml == NEG_INF
