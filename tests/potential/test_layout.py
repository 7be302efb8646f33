"""The layout of `genlm.control.potential.built_in`: subpackages per capability
(lm/, fsa/, cfg/, json_schema/, engine/, and the shared regex/), an import graph
without cycles, and public `__all__`s without private helpers."""

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import genlm.control.potential.built_in as built_in

ROOT = Path(built_in.__file__).parent
PACKAGE = built_in.__name__
SUBPACKAGES = ["lm", "fsa", "cfg", "json_schema", "engine", "regex"]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((PACKAGE, *parts))


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(path: Path, top_level_only: bool) -> set[str]:
    """The modules of `built_in` that `path` imports (`from a.b import c` counts as `a.b`
    or, when `a.b.c` is a module, as `a.b.c`); top-level ones are those outside any
    function or class body."""
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    if top_level_only:  # also the bodies of top-level if/try blocks
        stack, nodes = list(nodes), []
        while stack:
            node = stack.pop()
            nodes.append(node)
            if isinstance(node, (ast.If, ast.Try)):
                stack.extend(node.body + node.orelse + getattr(node, "finalbody", []))
                stack.extend(s for h in getattr(node, "handlers", []) for s in h.body)
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in MODULES}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a list of nodes (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def _graph(top_level_only: bool) -> dict[str, set[str]]:
    return {m: _imports(p, top_level_only) - {m} for m, p in MODULES.items()}


def _package(module: str) -> str:
    """The subpackage of a module; top-level modules are "shared" helpers (private)
    or "aliases" (the public paths from before the split)."""
    if module == PACKAGE:
        return "built_in"
    parts = module[len(PACKAGE) + 1 :].split(".")
    if len(parts) > 1 or parts[0] in SUBPACKAGES:
        return parts[0]
    return "shared" if parts[0].startswith("_") else "aliases"


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_graph_sees_the_known_imports():
    graph = _graph(top_level_only=False)
    assert f"{PACKAGE}.engine.guided" in graph[f"{PACKAGE}.lm.llm"]  # constrain's late import
    assert f"{PACKAGE}.lm.token_maps" in graph[f"{PACKAGE}.engine.guided"]
    assert f"{PACKAGE}.regex.compile" in _graph(top_level_only=True)[f"{PACKAGE}.fsa.wfsa"]


@pytest.mark.parametrize("top_level_only", [True, False], ids=["top-level", "all-imports"])
def test_no_import_cycle_between_built_in_modules(top_level_only):
    """Neither the module-load graph nor the graph with function-local imports has a
    cycle (llm -> guided -> llm was one: guided now takes `TokenMaps` from lm.token_maps)."""
    assert _cycle(_graph(top_level_only)) is None


def test_no_import_cycle_between_subpackages_at_module_load():
    packages: dict[str, set[str]] = {}
    for module, targets in _graph(top_level_only=True).items():
        packages.setdefault(_package(module), set()).update(
            _package(t) for t in targets if _package(t) != _package(module)
        )
    assert _cycle(packages) is None
    assert packages["shared"] <= {"built_in"}  # shared helpers depend on no subsystem
    assert "engine" not in packages["lm"]


def test_lm_reaches_engine_in_one_place_only():
    late = {
        m: t
        for m, targets in _graph(top_level_only=False).items()
        if _package(m) == "lm"
        for t in targets
        if _package(t) == "engine"
    }
    assert late == {f"{PACKAGE}.lm.llm": f"{PACKAGE}.engine.guided"}


def test_only_lm_reaches_engine_and_regex_reaches_no_subpackage():
    """engine/ translates into the engine's terms, so the constraint folders hand it
    their raw sources and never import it; regex/ is the foundation under them."""
    packages: dict[str, set[str]] = {}
    for module, targets in _graph(top_level_only=False).items():
        packages.setdefault(_package(module), set()).update(_package(t) for t in targets)
    users = {p for p, targets in packages.items() if "engine" in targets} - {"engine", "aliases"}
    assert users == {"lm"}
    assert packages["regex"] <= {"regex", "built_in"}


def test_every_module_sits_in_a_subpackage_or_is_a_shared_helper_or_alias():
    top = {p.stem for p in ROOT.glob("*.py")} - {"__init__"}
    shared = {"_recognizer", "_state_cache", "_state_rows"}
    aliases = {"llm", "bytelm", "canonical", "ensemble", "wfsa", "wcfg", "json", "guided"}
    assert top == shared | aliases
    assert {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()} == set(SUBPACKAGES)


@pytest.mark.parametrize(
    "order",
    [["lm.llm", "engine.guided"], ["engine.guided", "lm.llm"]],
    ids=["llm-first", "guided-first"],
)
def test_llm_and_guided_import_in_either_order_in_a_fresh_interpreter(order):
    code = "; ".join(f"import {PACKAGE}.{m}" for m in order)
    code += f"; from {PACKAGE}.engine.guided import GuidedConstraint"
    code += f"; from {PACKAGE}.lm.llm import PromptedLLM; print(PromptedLLM.constrain.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "constrain"


PUBLIC_ALL = {
    "lm.llm": ["PromptedLLM", "load_model_by_name"],
    "lm.bytelm": ["ByteLLM"],
    "lm.canonical": ["CanonicalTokenization"],
    "lm.ensemble": ["Ensemble"],
    "fsa.wfsa": ["WFSA", "BoolFSA"],
    "cfg.wcfg": ["WCFG", "BoolCFG"],
    "json_schema.json": ["JsonSchema"],
    "engine.guided": ["GuidedConstraint"],
}


@pytest.mark.parametrize("module,names", sorted(PUBLIC_ALL.items()))
def test_public_modules_export_only_public_names(module, names):
    mod = importlib.import_module(f"{PACKAGE}.{module}")
    assert sorted(mod.__all__) == sorted(names)
    alias = importlib.import_module(f"{PACKAGE}.{module.split('.')[1]}")
    assert sorted(alias.__all__) == sorted(names)


def test_private_helpers_stay_importable_from_their_modules():
    from genlm.control.engine.route import engine_coerce
    from genlm.control.lm._llm_loading import load_model
    from genlm.control.lm.llm import load_model_by_name
    from genlm.control.lm.token_maps import TokenMaps

    assert load_model_by_name is load_model
    assert callable(engine_coerce) and isinstance(TokenMaps, type)


MOVED = {
    "fsa._regex_syntax": "regex.syntax",
    "fsa._fsa_regex": "regex.compile",
    "lm._token_maps": "lm.token_maps",
    "cfg._lark_exact": "engine._lark_exact",
    "cfg._lark_lower": "engine._lark_lower",
    "json_schema._json_exact": "engine._json_exact",
}


def test_a_moved_module_is_its_old_path_in_a_fresh_interpreter():
    """Each old path is the moved module itself (so monkeypatching either patches
    both), imported before or after the new path."""
    code = "import importlib; out = []\n"
    for old, new in MOVED.items():
        code += (
            f"a = importlib.import_module('{PACKAGE}.{old}')\n"
            f"b = importlib.import_module('{PACKAGE}.{new}')\n"
            f"out.append(a is b and a.__name__ == '{PACKAGE}.{new}')\n"
        )
    code += "print(out)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str([True] * len(MOVED))
    for old, new in MOVED.items():  # and here, where the new paths are loaded first
        assert importlib.import_module(f"{PACKAGE}.{old}") is importlib.import_module(f"{PACKAGE}.{new}")
    from genlm.control.constraints.fsa._fsa_regex import _next_bytes, compile_regex
    from genlm.control.constraints.regex.compile import utf8_next_bytes

    assert _next_bytes is utf8_next_bytes and compile_regex("ab").n_states == 3
