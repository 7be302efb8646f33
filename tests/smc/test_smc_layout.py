"""`smc/` owns its modules and the import arrows between `sampler/` and `smc/` point
one way: `smc/` drives the samplers and imports their types; `sampler/` serves
`smc/`'s names (its 0.4.1 paths) only on first access."""

import ast
import importlib
from pathlib import Path

import pytest

import genlm.control as control

ROOT = Path(control.__file__).parent

# Old path -> home of a module that moved (the old path re-exports the same objects).
MOVED = {
    "genlm.control.sampler.resampling": "genlm.control.smc.resampling",
    "genlm.control.sampler.record": "genlm.control.smc.record",
    "genlm.control.sampler.record_file": "genlm.control.smc.record_file",
    "genlm.control.potential._returns": "genlm.control._returns",
}

# What `smc/` may import of `sampler/` at module level: the sampler types it drives.
SAMPLER_TYPES = {"genlm.control.sampler.token", "genlm.control.sampler.unit"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _top_level_imports(path: Path) -> set[str]:
    """The `genlm.control` modules `path` imports outside any function or class body
    (and outside `if TYPE_CHECKING:`)."""
    stack, found = list(ast.parse(path.read_text()).body), set()
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, (ast.If, ast.Try)):
            stack.extend(node.body + node.orelse + getattr(node, "finalbody", []))
            stack.extend(s for h in getattr(node, "handlers", []) for s in h.body)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in MODULES}


def _in(package: str, module: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize("old,new", sorted(MOVED.items()))
def test_a_moved_module_old_path_re_exports_the_same_objects(old, new):
    alias, home = importlib.import_module(old), importlib.import_module(new)
    assert alias.__all__ and set(alias.__all__) == set(home.__all__)
    for name in home.__all__:
        assert getattr(alias, name) is getattr(home, name)


def test_sampler_imports_nothing_of_smc_at_module_level():
    arrows = [
        (m, x)
        for m, p in MODULES.items()
        if _in("genlm.control.sampler", m)
        for x in _top_level_imports(p)
        if _in("genlm.control.smc", x)
    ]
    assert arrows == []


def test_smc_imports_of_sampler_are_the_sampler_types():
    arrows = {
        x for m, p in MODULES.items() if _in("genlm.control.smc", m) for x in _top_level_imports(p)
    }
    assert {x for x in arrows if _in("genlm.control.sampler", x)} <= SAMPLER_TYPES
    # and the layout test's rule holds for these two folders: the kernel reads its
    # own modules (resampling, record) from smc/.
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
    on first access; at module level it imports only the rows tier."""
    imports = _top_level_imports(MODULES["genlm.control.util"])
    assert not any(_in("genlm.control.sampler", m) or _in("genlm.control.potential", m) for m in imports)
    util, unit = importlib.import_module("genlm.control.util"), importlib.import_module("genlm.control.sampler.unit")
    assert util.flatten_units is unit.flatten_units and "flatten_units" in dir(util)
