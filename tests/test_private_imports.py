"""The folder rule: a folder's `_private` modules are imported only inside it.

`genlm/control/a/_b.py` may be reached by any module under `genlm/control/a/` (its
subfolders included) and by no other, whether by an import statement (function-local
ones included) or by the string of a lazy export table. What several folders share
lives under a public name in the folder below them. The edges are `toys.imports`'s."""

from pathlib import Path

from toys.imports import read_graph

import genlm.control

ROOT = Path(genlm.control.__file__).parent
PACKAGE = "genlm.control"


def _owner(module: str) -> str | None:
    """The folder that owns `module`'s first private component, or None when the path
    has none (`a._b.c` is owned by `a`; dunder names are not private)."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def _home(graph, module: str) -> str:
    """The package a module lives in (a package's `__init__` lives in the package)."""
    return module if graph.modules[module].name == "__init__.py" else module.rsplit(".", 1)[0]


def violations(root: Path = ROOT, package: str = PACKAGE) -> list[str]:
    graph = read_graph(root, package)
    found = set()
    for e in graph.edges:
        owner, home = _owner(e.target), _home(graph, e.source)
        if owner is not None and home != owner and not home.startswith(owner + "."):
            path = graph.modules[e.source].relative_to(root)
            found.add(f"{path}:{e.line} imports {e.target}")
    return sorted(found)


def test_no_folder_imports_another_folders_private_module():
    assert violations() == []


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_check_finds_a_private_import_from_outside_its_folder(tmp_path):
    pkg = tmp_path / "pkg"
    _write(
        pkg,
        {
            "__init__.py": "",
            "a/__init__.py": "",
            "a/_helper.py": "X = 1\n",
            "a/inner/__init__.py": "",
            "a/inner/user.py": "from pkg.a._helper import X\n",  # inside a/: allowed
            "b/__init__.py": "",
            "b/user.py": "def f():\n    from pkg.a import _helper\n",  # outside a/
            "c.py": "import pkg.a._helper\n",  # outside a/
            "d.py": "TABLE = {'X': 'pkg.a._helper'}\n",  # a lazy table, outside a/
        },
    )
    assert violations(pkg, "pkg") == [
        "b/user.py:2 imports pkg.a._helper",
        "c.py:1 imports pkg.a._helper",
        "d.py:1 imports pkg.a._helper",
    ]


def test_top_level_private_modules_are_shared_by_the_whole_package(tmp_path):
    pkg = tmp_path / "pkg"
    _write(
        pkg,
        {"__init__.py": "", "_util.py": "", "a/__init__.py": "", "a/m.py": "import pkg._util\n"},
    )
    assert violations(pkg, "pkg") == []
