"""The folder rule: a folder's `_private` modules are imported only inside it.

`genlm/control/a/_b.py` may be imported by any module under `genlm/control/a/` (its
subfolders included) and by no other. What several folders share lives under a public
name in the folder below them. The check reads every import statement of the package,
function-local ones included, from the source (nothing is imported)."""

import ast
from pathlib import Path

import genlm.control

ROOT = Path(genlm.control.__file__).parent
PACKAGE = "genlm.control"


def _module_of(path: Path, root: Path = ROOT, package: str = PACKAGE) -> tuple[str, str]:
    """(module name, the package it lives in) of a source file."""
    parts = path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__":
        name = ".".join((package, *parts[:-1]))
        return name, name
    name = ".".join((package, *parts))
    return name, name.rsplit(".", 1)[0]


def _imported(tree: ast.AST, modules: set[str]):
    """(line, module) for every module of the package an import statement names:
    `from a.b import c` names `a.b`, and `a.b.c` too when that is a module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:
                if f"{node.module}.{alias.name}" in modules:
                    yield node.lineno, f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name


def _owner(module: str) -> str | None:
    """The folder that owns `module`'s first private component, or None when the path
    has none (`a._b.c` is owned by `a`; dunder names are not private)."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def violations(root: Path = ROOT, package: str = PACKAGE) -> list[str]:
    files = sorted(root.rglob("*.py"))
    modules = {_module_of(p, root, package)[0] for p in files}
    found = []
    for path in files:
        _, home = _module_of(path, root, package)
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, module in _imported(tree, modules):
            if module not in modules:
                continue
            owner = _owner(module)
            if owner is not None and home != owner and not home.startswith(owner + "."):
                found.append(f"{path.relative_to(root)}:{line} imports {module}")
    return sorted(set(found))


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
        },
    )
    assert violations(pkg, "pkg") == [
        "b/user.py:2 imports pkg.a._helper",
        "c.py:1 imports pkg.a._helper",
    ]


def test_top_level_private_modules_are_shared_by_the_whole_package(tmp_path):
    pkg = tmp_path / "pkg"
    _write(
        pkg,
        {"__init__.py": "", "_util.py": "", "a/__init__.py": "", "a/m.py": "import pkg._util\n"},
    )
    assert violations(pkg, "pkg") == []
