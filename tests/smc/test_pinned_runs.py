"""The SMC refactor into `genlm.control.smc` changed no draw and no weight.

Each run in `pinned_runs.RUNS` was recorded (`log_ml`, every log weight, as
`float.hex`, and the contexts) from the code before the move; the runs cover the
direct sampler at ESS 0.5, 1 and 0 with every resampling method, a critic, AWRS
(race search and the recursive estimator, no `seed=`), a multi-token unit sampler,
a trie set sampler and `terminate_when` with `max_tokens` truncation.
`awrs_search` was recorded again when AWRS's search of a condition checked token by
token began drawing in blocks cut at the first draw whose answer is not known (the
same law, other draws: `tests/sampler/test_awrs_checks.py`).
`direct_always_systematic` and `awrs_recursive_critic` end with an ESS below their
threshold, so since a finished population is resampled as 0.4.1 did (one more
resample after the last step) they were recorded again: the same `log_ml`, every
weight that mean, and contexts drawn from the population pinned before (`w3r$`,
`56$`, `$` there; `$`, `2$`, `5656q$` here).
"""

from __future__ import annotations

import math

import pytest
from pinned_runs import RUNS, digest

PINNED = {
    "direct_ess_half": (
        "-0x1.bfb4f9dfc80d8p-2",
        "5tl3dqt$|5ta5$|$|vsrhgzc$|bkjby5$|$|wm$|gd0omjr$|v58m$|3qenabq$|$|3kst6mo$",
        ['-0x1.e5a9a7c3ac418p+0', '-0x1.0000000000000p-50', '0x0.0p+0', '-0x1.e5a9a7c3ac419p+0', '-0x1.c000000000000p-50', '0x0.0p+0', '0x0.0p+0', '-0x1.e5a9a7c3ac419p+0', '-0x1.0000000000000p-51', '-0x1.e5a9a7c3ac41bp+0', '0x0.0p+0', '-0x1.e5a9a7c3ac416p+0'],
    ),
    "direct_always_systematic": (
        "-0x1.5523d15abc838p-2",
        "$|$|$|$|$|$|2$|5656q$|$",
        ['-0x1.5523d15abc838p-2'] * 9,
    ),
    "direct_never_residual": (
        "-0x1.de5dc7c5c4b60p-1",
        "5euo$|kbbs$|$|gy$|wpiu$|5xfj$|wb8f$",
        ['-0x1.e5a9a7c3ac41bp+0', '-0x1.e5a9a7c3ac41cp+0', '0x0.0p+0', '-0x1.0000000000000p-51', '-0x1.e5a9a7c3ac417p+0', '-0x1.e5a9a7c3ac419p+0', '-0x1.e5a9a7c3ac41ap+0'],
    ),
    "critic_stratified": (
        "-0x1.3ef1e3efae75cp-1",
        "r0fw3r$|$|28mbrx$|bbbbbm$|$|g$|kt$|z$|weqe4o$|56529n$",
        ['-0x1.72d4d3e1d620bp+1', '0x0.0p+0', '-0x1.72d4d3e1d620cp+1', '-0x1.e5a9a7c3ac422p+0', '0x0.0p+0', '-0x1.0000000000000p-52', '0x0.0p+0', '0x0.0p+0', '-0x1.32d4d3e1d620ep+1', '-0x1.196a69f0eb106p+2'],
    ),
    "awrs_search": (
        "-0x1.b55fefb3127e4p-2",
        "$|ker3rd$|4mx$|w$|r3d4$|51h$|stn4g$|v56vvs$|3yg65t$|31128h$",
        ['0x1.2400000000000p-46', '-0x1.4d91fe9e5cabap+1', '0x1.3b00000000000p-44', '0x1.2600000000000p-45', '0x1.4494000000000p-38', '0x1.3000000000000p-44', '0x1.8400000000000p-44', '-0x1.e5a9a7c3a9d8ep+0', '-0x1.e5a9a7c3ac26ap+0', '-0x1.e5a9a7c3a9c30p+0'],
    ),
    "awrs_recursive_critic": (
        "-0x1.454b7bac06a8ep+0",
        "w3r$|w3r$|w3r$|56$|$|$|$|$",
        ['-0x1.454b7bac06a8ep+0'] * 8,
    ),
    "multi_token_units": (
        "-0x1.3e37512258048p-2",
        "v$|kbk$|sm$|s76r3s$|565r$|st$|b$|4yt$",
        ['0x0.0p+0', '-0x1.0000000000000p-51', '0x0.0p+0', '-0x1.b2d4d3e1d620ap+1', '-0x1.8000000000002p+0', '0x0.0p+0', '-0x1.0000000000000p-51', '-0x1.0000000000000p-1'],
    ),
    "eager_set_sampler": (
        "-0x1.320dd25be2f20p+2",
        "5$|$|$|$|$|$",
        ['-0x1.320dd25be2f20p+2', '-0x1.320dd25be2f20p+2', '-0x1.320dd25be2f20p+2', '-0x1.320dd25be2f20p+2', '-0x1.320dd25be2f20p+2', '-0x1.320dd25be2f20p+2'],
    ),
    "terminate_when_z": (
        "-0x1.2d6f9b78b5270p-2",
        "5111d$|ki$|$|$|3yw0j7pe$|vl3rhhph$|$|2$|$|0mt7am82$",
        ['0x1.0000000000000p-52', '0x0.0p+0', '0x0.0p+0', '0x0.0p+0', '-0x1.e5a9a7c3ac418p+0', '-0x1.e5a9a7c3ac416p+0', '0x0.0p+0', '0x0.0p+0', '0x0.0p+0', '-0x1.e5a9a7c3ac419p+0'],
    ),
}


# Another x86 machine with the same package versions may round a sum differently in
# the last bit (a BLAS kernel, a fused multiply-add). The contexts are pinned exactly;
# each weight within ULPS units in the last place of max(|a|, |b|, 1): weights near
# zero come from cancellations of terms of order one, so their error is of that order.
ULPS = 16


def _close(got: float, pinned: float) -> bool:
    if math.isinf(pinned) or math.isinf(got):
        return got == pinned
    return abs(got - pinned) <= ULPS * math.ulp(max(abs(got), abs(pinned), 1.0))


@pytest.mark.parametrize("name", sorted(PINNED))
async def test_seeded_run_is_what_it_was(name):
    log_ml, text, log_weights = PINNED[name]
    got_ml, got_weights, got_text = digest(await RUNS[name]())
    assert got_text == text
    assert len(got_weights) == len(log_weights)
    for got, pinned in zip(got_weights, log_weights):
        assert _close(float.fromhex(got), float.fromhex(pinned)), (got, pinned)
    assert _close(float.fromhex(got_ml), float.fromhex(log_ml)), (got_ml, log_ml)


@pytest.mark.parametrize(
    "got, pinned, close",
    [
        (1.0, 1.0 + 8 * math.ulp(1.0), True),
        (1.0, 1.0 + 64 * math.ulp(1.0), False),
        (0.0, -(2.0**-51), True),
        (0.0, -(2.0**-40), False),
        (-1.5e3, -1.5e3 * (1 + 1e-12), False),
        (-math.inf, -math.inf, True),
        (-math.inf, -1e300, False),
    ],
)
def test_tolerance_is_a_few_ulps(got, pinned, close):
    assert _close(got, pinned) is close
