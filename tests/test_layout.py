"""The floor plan: folders stacked in layers, the algebra free of built-ins, no import
circle but the declared ones, and no folder holding most of the code.

Read from the source by `toys.imports` (import statements, function-local ones, and the
string edges of lazy export tables)."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from toys.imports import circles, cycle, read_graph

import genlm.control

ROOT = Path(genlm.control.__file__).parent
PACKAGE = "genlm.control"
GRAPH = read_graph(ROOT, PACKAGE)

# Lower layers never reach higher ones. "" is the package's shared top-level modules
# (weights, window, draw, horizon, …); the application modules sit on top.
LAYERS = {
    "": 0,
    "embedded": 0,
    "potential": 1,
    "testing": 1,  # the 0.4 kit: `Potential.assert_*` run it (the algebra's declared circle)
    "constraints": 2,
    "engine": 3,
    "lm": 4,
    "reasoning": 5,  # reasoning models' formats: potentials over an LM's tokenizer (reads lm/)
    "sampler": 5,
    "smc": 6,
    "distributed": 7,
}
APPLICATION = {
    f"{PACKAGE}.{m}"
    for m in ("cli", "_cli_embedded", "__main__", "viz", "_viz_legacy", "_viz_server")
}

# The public paths of SPEC and 0.4.1 that re-export names whose home is a higher folder
# (lazily, or as thin aliases): a face may point anywhere.
FACES = {
    PACKAGE,
    f"{PACKAGE}.util",
    f"{PACKAGE}.potential",
    *(m for m in GRAPH.modules if m.startswith(f"{PACKAGE}.potential.built_in")),
    f"{PACKAGE}.potential.harmony",  # 0.4.1's path of HarmonyPotential (home: reasoning/)
    *(f"{PACKAGE}.sampler.{m}" for m in ("sequence", "smc", "resampling", "record", "record_file")),
}

# The arrows that point against the layers or close a circle, each with its reason.
DECLARED = {
    (f"{PACKAGE}.sampler.token", f"{PACKAGE}.smc.front"): "TokenSampler.smc is 0.4.1's convenience "
    "method for SMC(sampler, critic)(...), which drives samplers; imported on first use",
    (f"{PACKAGE}.sampler.token", f"{PACKAGE}.sampler.awrs"): "0.4.1's genlm.control.sampler.token "
    "exported AWRS, whose module imports TokenSampler; served on first access",
    (f"{PACKAGE}.sampler.token", f"{PACKAGE}.sampler.set"): "0.4.1's genlm.control.sampler.token "
    "exported SetTokenSampler, likewise",
}
# The one circle left: the algebra and its 0.4 kit (`Potential.assert_*` run
# `genlm.control.testing`, which checks potentials built from the algebra; the
# operators' late imports in `base` reach `product`, `coerce`, …, which import `base`).
ALGEBRA_CIRCLE_FOLDERS = {"potential", "testing"}


def _layer(module: str) -> int:
    return 8 if module in APPLICATION else LAYERS[GRAPH.folder(module)]


def test_every_folder_has_a_layer():
    assert {GRAPH.folder(m) for m in GRAPH.modules} <= set(LAYERS) | {""}


def test_no_arrow_points_up_but_from_a_face_or_declared():
    up = sorted(
        f"{e.source} -> {e.target} ({e.kind}, line {e.line})"
        for e in GRAPH.edges
        if _layer(e.target) > _layer(e.source)
        and e.source not in FACES
        and (e.source, e.target) not in DECLARED
    )
    assert up == []


def test_the_algebra_never_imports_a_built_in():
    algebra = [m for m in GRAPH.modules if GRAPH.folder(m) == "potential" and m not in FACES]
    assert f"{PACKAGE}.potential.planner" in algebra and f"{PACKAGE}.potential.base" in algebra
    reached = {t for m in algebra for t in GRAPH.targets(m)}
    assert {GRAPH.folder(t) for t in reached} <= {"", "potential", "testing"}


def test_no_cycle_at_module_load():
    assert cycle(GRAPH.adjacency(("import",))) is None


def test_the_only_circle_is_the_algebra_and_its_kit():
    found = circles(GRAPH.adjacency(skip=frozenset(DECLARED)))
    assert [sorted(c) for c in found if {GRAPH.folder(m) for m in c} - ALGEBRA_CIRCLE_FOLDERS] == []
    assert len(found) == 1


def test_the_declared_arrows_exist_and_close_circles_without_them():
    """Each declared arrow is in the code, and only declaring it keeps the graph free
    of another circle (a declaration that no longer does anything is stale)."""
    edges = {(e.source, e.target) for e in GRAPH.edges}
    assert set(DECLARED) <= edges
    everything = circles(GRAPH.adjacency())
    assert any(f"{PACKAGE}.smc.front" in c and f"{PACKAGE}.sampler.token" in c for c in everything)


def test_the_graph_reads_string_edges_and_late_imports():
    kinds = {(e.source, e.target): e.kind for e in GRAPH.edges}
    assert kinds[(f"{PACKAGE}.sampler.sequence", f"{PACKAGE}.smc.front")] == "string"
    assert kinds[(f"{PACKAGE}.lm.llm", f"{PACKAGE}.engine.guided")] == "late"
    assert (
        kinds[(f"{PACKAGE}.constraints.fsa.wfsa", f"{PACKAGE}.constraints.regex.compile")]
        == "import"
    )
    assert (
        f"{PACKAGE}.potential.planner",
        f"{PACKAGE}.engine.guided",
    ) not in kinds  # a logger's name


def test_the_helper_finds_circles_and_string_edges(tmp_path):
    pkg = tmp_path / "pkg"
    files = {
        "__init__.py": "",
        "a.py": "def f():\n    import pkg.b\n",
        "b.py": "TABLE = {'x': 'pkg.c'}\n",
        "c.py": "import pkg.a\nimport logging\nlog = logging.getLogger('pkg.b')\n",
        "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n",
    }
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    graph = read_graph(pkg, "pkg")
    assert {(e.source, e.target, e.kind) for e in graph.edges} == {
        ("pkg.a", "pkg.b", "late"),
        ("pkg.b", "pkg.c", "string"),
        ("pkg.c", "pkg.a", "import"),
    }
    assert circles(graph.adjacency()) == [{"pkg.a", "pkg.b", "pkg.c"}]
    assert cycle(graph.adjacency(("import",))) is None
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_folder_holds_more_than_30_percent_of_the_lines():
    lines: dict[str, int] = {}
    for m in GRAPH.modules:
        lines[GRAPH.folder(m) or "(top level)"] = lines.get(
            GRAPH.folder(m) or "(top level)", 0
        ) + GRAPH.lines(m)
    total = sum(lines.values())
    assert {k: round(v / total, 3) for k, v in lines.items() if v > 0.3 * total} == {}


def test_potential_built_in_holds_only_the_public_aliases():
    built_in = ROOT / "potential" / "built_in"
    assert {p.name for p in built_in.iterdir() if p.suffix == ".py"} == {
        "__init__.py",
        "llm.py",
        "bytelm.py",
        "canonical.py",
        "ensemble.py",
        "wfsa.py",
        "wcfg.py",
        "json.py",
        "guided.py",
    }
    assert not [p for p in built_in.iterdir() if p.is_dir() and p.name != "__pycache__"]


PUBLIC_ALL = {
    "lm.llm": ["PromptedLLM", "load_model_by_name"],
    "lm.bytelm": ["ByteLLM"],
    "lm.canonical": ["CanonicalTokenization"],
    "lm.ensemble": ["Ensemble"],
    "constraints.fsa.wfsa": ["WFSA", "BoolFSA"],
    "constraints.cfg.wcfg": ["WCFG", "BoolCFG"],
    "constraints.json_schema.json": ["JsonSchema"],
    "engine.guided": ["GuidedConstraint"],
}


@pytest.mark.parametrize("module,names", sorted(PUBLIC_ALL.items()))
def test_each_home_and_its_alias_export_only_public_names(module, names):
    home = importlib.import_module(f"{PACKAGE}.{module}")
    alias = importlib.import_module(f"{PACKAGE}.potential.built_in.{module.rsplit('.', 1)[1]}")
    assert sorted(home.__all__) == sorted(names) == sorted(alias.__all__)
    assert all(getattr(alias, n) is getattr(home, n) for n in names)


@pytest.mark.parametrize(
    "order",
    [["lm.llm", "engine.guided"], ["engine.guided", "lm.llm"]],
    ids=["llm-first", "guided-first"],
)
def test_llm_and_guided_import_in_either_order_in_a_fresh_interpreter(order):
    code = "; ".join(f"import {PACKAGE}.{m}" for m in order)
    code += (
        f"; from {PACKAGE}.lm.llm import PromptedLLM; print(PromptedLLM.compiled_coercion.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "compiled_coercion"


def test_importing_the_algebra_loads_no_built_in():
    code = (
        "import sys, genlm.control.potential.base, genlm.control.potential.planner, "
        "genlm.control.potential.product, genlm.control.potential.coerce; "
        "print(sorted(m for m in sys.modules if m.startswith(('genlm.control.lm', "
        "'genlm.control.engine', 'genlm.control.constraints'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_test_files_have_unique_names():
    """pytest imports test modules by file name (the tests folders are not packages), so
    two test files of one name in different folders fail to collect together."""
    tests = Path(__file__).resolve().parent
    names = [p.name for p in tests.rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
