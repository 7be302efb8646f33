"""`Sequences`: statistics, posteriors and display of weighted sequences."""

import math

import numpy as np
import pytest

from genlm.control import EOS
from genlm.control.sampler.sequence import Sequences


def test_statistics_of_known_weights():
    seqs = Sequences([[b"a", EOS], [b"b", EOS], [b"a", EOS]], np.log([1.0, 2.0, 1.0]))
    assert seqs.size == len(seqs) == 3
    assert seqs.log_total == pytest.approx(math.log(4))
    assert seqs.log_ml == pytest.approx(math.log(4 / 3))
    np.testing.assert_allclose(seqs.normalized_weights, [0.25, 0.5, 0.25])
    assert seqs.ess == pytest.approx(1 / (0.25**2 * 2 + 0.5**2))
    assert seqs.log_ess == pytest.approx(math.log(seqs.ess))
    np.testing.assert_allclose(seqs.log_normalized_weights, np.log([0.25, 0.5, 0.25]))


def test_posterior_sums_duplicates_and_keys_on_tokens_with_eos():
    seqs = Sequences([[b"a", EOS], [b"b", EOS], [b"a", EOS]], np.log([1.0, 2.0, 1.0]))
    post = seqs.posterior
    assert post == {(b"b", EOS): 0.5, (b"a", EOS): 0.5}
    assert list(post)[0] in post  # largest first; ties are fine
    assert seqs.decoded_posterior == {"a": 0.5, "b": 0.5}


def test_decoded_posterior_keeps_finished_decodable_sequences():
    ctxs = [[b"h", b"i", EOS], [b"\xff", EOS], [b"o", b"k"], [b"\xc3", b"\xa9", EOS]]
    seqs = Sequences(ctxs, np.log([1.0, 1.0, 1.0, 2.0]))
    assert seqs.decoded_posterior == pytest.approx({"hi": 1 / 3, "é": 2 / 3})
    assert list(seqs.decoded_posterior) == ["é", "hi"]
    assert len(seqs.posterior) == 4
    assert str(seqs) == str(seqs.decoded_posterior)


def test_units_are_flattened():
    ctxs = [[[b"a", b"b"], [b"c"], EOS], [[b"a"], [b"b", b"c"], EOS]]
    seqs = Sequences(ctxs, [0.0, 0.0])
    assert seqs.posterior == {(b"a", b"b", b"c", EOS): 1.0}
    assert seqs.decoded_posterior == {"abc": 1.0}


def test_string_tokens_decode_by_joining():
    seqs = Sequences([["x", "y", EOS]], [0.0])
    assert seqs.decoded_posterior == {"xy": 1.0}


def test_all_minus_inf_and_nan_weights():
    with np.errstate(all="raise"):
        seqs = Sequences([[b"a", EOS], [b"b"]], [float("nan"), -math.inf])
        assert seqs.log_ml == -math.inf and seqs.ess == 0.0 and seqs.log_ess == -math.inf
        np.testing.assert_array_equal(seqs.log_weights, [-math.inf, -math.inf])
        np.testing.assert_array_equal(seqs.normalized_weights, [0.0, 0.0])
        # as in 0.4.1, sequences of weight zero stay in the posteriors with value 0.0
        assert seqs.posterior == {(b"a", EOS): 0.0, (b"b",): 0.0}
        assert seqs.decoded_posterior == {"a": 0.0}
    empty = Sequences([], [])
    assert empty.log_ml == -math.inf and len(empty) == 0


def test_bad_input():
    with pytest.raises(ValueError, match="contexts but"):
        Sequences([[EOS]], [0.0, 1.0])
    with pytest.raises(ValueError, match=r"\+inf"):
        Sequences([[EOS]], [math.inf])


def test_iteration_indexing_and_show(capsys):
    seqs = Sequences([[b"a", EOS], [b"b", EOS]], [-1.0, -0.5])
    assert list(seqs) == [([b"a", EOS], -1.0), ([b"b", EOS], -0.5)]
    assert seqs[1] == ([b"b", EOS], -0.5)
    seqs.show()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["-0.5000", "'b'<EOS>"] and lines[1].split() == ["-1.0000", "'a'<EOS>"]
    page = seqs._repr_html_()
    assert page.index("<pre>b</pre>") < page.index("<pre>a</pre>")


def test_zero_weight_sequences_stay_with_value_zero():
    ctxs = [[b"a", EOS], [b"b", EOS], [b"c", EOS], [b"a", EOS], [b"\xff", EOS]]
    seqs = Sequences(ctxs, [0.0, -math.inf, -math.inf, math.log(3.0), -math.inf])
    assert seqs.posterior == {(b"a", EOS): 1.0, (b"b", EOS): 0.0, (b"c", EOS): 0.0, (b"\xff", EOS): 0.0}
    assert list(seqs.posterior)[0] == (b"a", EOS)  # largest first
    assert seqs.decoded_posterior == {"a": 1.0, "b": 0.0, "c": 0.0}  # b"\xff" does not decode


async def test_posterior_of_a_run_where_some_particles_die_counts_every_response():
    from toys import AB, BoolPotential, ab_lm

    from genlm.control import SMC, direct_token_sampler

    no_b = BoolPotential(AB, lambda ctx: b"b" not in ctx, lambda ctx: b"b" not in ctx)
    # ess_threshold=0: no resampling, so dead particles stay in the population
    seqs = await SMC(direct_token_sampler(ab_lm()), critic=no_b)(40, 0.0, 4, seed=1)
    dead = {tuple(c) for c, w in zip(seqs.contexts, seqs.log_weights) if w == -math.inf}
    alive = {tuple(c) for c, w in zip(seqs.contexts, seqs.log_weights) if w > -math.inf}
    assert dead and alive, "the seed must give both dead and live particles"
    post = seqs.posterior
    assert set(post) == dead | alive
    assert all(post[c] == 0.0 for c in dead - alive)
    assert all(post[c] > 0.0 for c in alive)
    assert sum(post.values()) == pytest.approx(1.0)
    texts = {b"".join(c[:-1]).decode() for c in dead | alive}
    assert set(seqs.decoded_posterior) == texts
    assert sum(1 for v in seqs.decoded_posterior.values() if v == 0.0) == len(
        {b"".join(c[:-1]).decode() for c in dead - alive}
    )


def test_show_decodes_text_across_tokens(capsys):
    # "é" is two bytes split over two tokens; an unfinished particle has no <EOS>
    seqs = Sequences([[b" caf", b"\xc3", b"\xa9", EOS], [b"\xff", b"x"]], [0.0, float("-inf")])
    seqs.show()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split(None, 1) == ["0.0000", "' café'<EOS>"]
    assert lines[1].split(None, 1) == ["-inf", "'\\\\xffx'"]
    assert "Token(" not in "".join(lines) and "b'" not in "".join(lines)


def test_finished_texts_leave_out_particles_without_mass():
    seqs = Sequences(
        [[b"a", EOS], [b"b", EOS], [b"a", EOS], [b"c", EOS], [b"d"]],
        [0.0, math.log(2.0), 0.0, float("-inf"), 0.0],
    )
    # decoded_posterior keeps the zero entry (0.4.1 harnesses count them) ...
    assert seqs.decoded_posterior["c"] == 0.0 and "c" in seqs.decoded_posterior
    # ... finished_texts has only texts with mass, renormalized over finished particles
    texts = seqs.finished_texts()
    assert [t for t, _ in texts] == ["a", "b"]
    assert [p for _, p in texts] == pytest.approx([0.5, 0.5], rel=1e-12)
    assert seqs.n_without_mass == 2  # "c" has weight zero, [b"d"] never finished
    assert dict(texts) == pytest.approx({k: v for k, v in seqs.decoded_posterior.items() if v > 0}, rel=1e-12)
