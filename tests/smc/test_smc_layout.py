"""`smc/` owns its modules and the arrows between `sampler/` and `smc/` point one way:
`smc/` drives the samplers and imports their types; `sampler/` reaches `smc/` only from
its 0.4.1 public paths (lazily) and from `TokenSampler.smc` (declared in
`tests/test_layout.py`). The edges are `toys.imports`'s, string edges included."""

import importlib
from pathlib import Path

import pytest
from toys.imports import read_graph

import genlm.control as control

GRAPH = read_graph(Path(control.__file__).parent, "genlm.control")

# Old path -> home of a module that moved (the old path re-exports the same objects).
MOVED = {
    "genlm.control.sampler.resampling": "genlm.control.smc.resampling",
    "genlm.control.sampler.record": "genlm.control.smc.record",
    "genlm.control.sampler.record_file": "genlm.control.smc.record_file",
}
# sampler/'s public paths from 0.4.1 that serve smc/'s names
SAMPLER_FACES = {*MOVED, "genlm.control.sampler.sequence", "genlm.control.sampler.smc"}

# What `smc/` may import of `sampler/`: the sampler types it drives.
SAMPLER_TYPES = {"genlm.control.sampler.token", "genlm.control.sampler.unit"}


def _in(package: str, module: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize("old,new", sorted(MOVED.items()))
def test_a_moved_module_old_path_re_exports_the_same_objects(old, new):
    alias, home = importlib.import_module(old), importlib.import_module(new)
    assert alias.__all__ and set(alias.__all__) == set(home.__all__)
    for name in home.__all__:
        assert getattr(alias, name) is getattr(home, name)


def test_sampler_reaches_smc_only_from_its_faces_and_token_sampler_smc():
    arrows = {
        (e.source, e.target)
        for e in GRAPH.edges
        if _in("genlm.control.sampler", e.source) and _in("genlm.control.smc", e.target)
    }
    assert {(s, t) for s, t in arrows if s not in SAMPLER_FACES} == {
        ("genlm.control.sampler.token", "genlm.control.smc.front")
    }
    assert not any(e.kind == "import" for e in GRAPH.edges if (e.source, e.target) in arrows)


def test_smc_imports_of_sampler_are_the_sampler_types():
    arrows = {e.target for e in GRAPH.edges if _in("genlm.control.smc", e.source)}
    assert {x for x in arrows if _in("genlm.control.sampler", x)} <= SAMPLER_TYPES
    # the kernel reads its own modules (resampling, record) from smc/.
    assert "genlm.control.smc.resampling" in arrows and "genlm.control.smc.record" in arrows


def test_the_lazy_0_4_1_paths_serve_smc_names():
    from genlm.control.sampler.resampling import RESAMPLING_METHODS, get_resampling_fn
    from genlm.control.sampler.sequence import SMC, Sequences
    from genlm.control.sampler.smc import SequenceModel, smc_standard
    from genlm.control.smc import front, particle, resampling, sequences

    assert SMC is front.SMC and Sequences is sequences.Sequences
    assert SequenceModel is particle.SequenceModel and smc_standard.__module__ == "genlm.control.smc.driver"
    assert RESAMPLING_METHODS is resampling.RESAMPLING_METHODS
    assert get_resampling_fn("systematic") is resampling.systematic_resample
    with pytest.raises(AttributeError, match="no attribute 'Importance'"):
        importlib.import_module("genlm.control.sampler.resampling").Importance  # noqa: B018


def test_util_only_re_exports_and_imports_nothing_above_it():
    """`genlm.control.util` (0.4.1's path) serves `flatten_units` from `sampler/unit.py`
    on first access; at module load it imports only the rows tier."""
    loaded = {e.target for e in GRAPH.edges if e.source == "genlm.control.util" and e.kind == "import"}
    assert not any(_in("genlm.control.sampler", m) or _in("genlm.control.potential", m) for m in loaded)
    util, unit = importlib.import_module("genlm.control.util"), importlib.import_module("genlm.control.sampler.unit")
    assert util.flatten_units is unit.flatten_units and "flatten_units" in dir(util)


def test_one_dead_end_serves_samplers_and_the_step():
    from genlm.control.horizon import OUT_OF_BUDGET, Cause, DeadEnd, cause_of
    from genlm.control.smc import deaths

    assert deaths.DeadEnd is DeadEnd and deaths.Cause is Cause and OUT_OF_BUDGET is Cause.MAX_TOKENS
    dead = DeadEnd(Cause.CRITIC)
    assert dead == float("-inf") and cause_of(dead) is Cause.CRITIC and cause_of(-1.0) is None
    with pytest.raises(ValueError):
        DeadEnd("tired")
