"""The parts of genlm.control.distributed that need no Ray: default seeds, the seeds
check, the fit of actors to a cluster's resources, and result records."""

import numpy as np
import pytest

from genlm.control.distributed import ProblemFailed, Result, problem_seeds
from genlm.control.distributed._pool import _fit
from genlm.control.distributed._records import resolve_seeds


def test_problem_seeds_are_the_spawned_children_of_the_base_seed():
    children = np.random.SeedSequence(3).spawn(5)
    expected = [int(c.generate_state(1, np.uint64)[0]) >> 1 for c in children]
    assert problem_seeds(5, 3) == expected
    assert all(0 <= s < 2**63 for s in expected) and len(set(expected)) == 5


def test_a_problems_seed_depends_only_on_the_base_seed_and_its_index():
    assert problem_seeds(3, 11) == problem_seeds(8, 11)[:3]
    assert problem_seeds(3, 11) != problem_seeds(3, 12)


def test_resolve_seeds_keeps_the_callers_seeds_and_checks_them():
    assert resolve_seeds(3, [4, np.int64(5), 0], 0) == [4, 5, 0]
    assert resolve_seeds(2, None, 9) == problem_seeds(2, 9)
    with pytest.raises(TypeError, match="seeds must be a sequence of integers, got int"):
        resolve_seeds(2, 7, 0)
    with pytest.raises(TypeError, match=r"seeds\[0\] must be a number, got True \(a bool\)"):
        resolve_seeds(1, [True], 0)


@pytest.mark.parametrize(
    "resources, actors, gpus, cpus, expected",
    [
        ({"GPU": 8.0, "CPU": 64.0}, None, 1, 1, 8),
        ({"GPU": 8.0, "CPU": 64.0}, None, 2, 1, 4),
        ({"GPU": 8.0, "CPU": 64.0}, None, 0.5, 1, 16),
        ({"GPU": 8.0, "CPU": 64.0}, None, 0, 1, 64),
        ({"GPU": 8.0, "CPU": 6.0}, None, 1, 1, 6),
        ({"CPU": 2.0}, None, 0, 0.5, 4),
        ({"CPU": 2.0}, None, 0, 0, 1),
        ({"GPU": 3.0, "CPU": 4.0}, 3, 1, 1, 3),
    ],
)
def test_actors_fit_the_cluster(resources, actors, gpus, cpus, expected):
    assert _fit(resources, actors, gpus, cpus) == expected


@pytest.mark.parametrize(
    "resources, actors, gpus, match",
    [
        ({"CPU": 4.0}, None, 1, "one actor asks for 1 GPUs, but the Ray cluster has 0"),
        ({"GPU": 4.0, "CPU": 4.0}, 3, 2, "3 actors x 2 GPUs each = 6 GPUs asked, but the Ray cluster has 4"),
        ({"GPU": 1.0, "CPU": 4.0}, 3, 0.5, "3 actors x 0.5 GPUs each = 1.5 GPUs asked, but the Ray cluster has 1"),
    ],
)
def test_more_than_the_cluster_has_is_a_value_error(resources, actors, gpus, match):
    with pytest.raises(ValueError, match=match):
        _fit(resources, actors, gpus, 1)


def test_result_unwrap():
    assert Result(index=0, seed=1, value="v").unwrap() == "v"
    failed = Result(index=4, seed=1, error="Traceback ...\nKeyError: 'x'\n", error_type="KeyError")
    assert not failed.ok
    with pytest.raises(ProblemFailed, match=r"(?s)problem 4 failed \(KeyError\):\nTraceback .*KeyError: 'x'"):
        failed.unwrap()
