"""The package's import graph, read from its source (nothing is imported): the one
helper behind the layout tests (`tests/test_layout.py`, `tests/test_private_imports.py`,
`tests/smc/test_smc_layout.py`).

An edge is one of three kinds:
- "import": an import statement outside any function or class body (and outside
  `if TYPE_CHECKING:`), which runs when the module loads;
- "late": an import statement inside a function or class body, which runs on first use;
  (imports under `if TYPE_CHECKING:` never run and are no edge);
- "string": a string literal that names a module of the package, as the lazy export
  tables (`_EXPORTS = {"SMC": "genlm.control.smc.front"}`) and `importlib.import_module`
  calls name them; the module is loaded when the name is first read. A logger's name
  (the first argument of `logging.getLogger`) and the package's own name (a prefix
  that code compares `__module__` with) name no import and are skipped.

`from a.b import c` is an edge to `a.b.c` when that is a module, else to `a.b`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

KINDS = ("import", "late", "string")


@dataclass(frozen=True)
class Edge:
    """`source` reaches `target` (both module names) at `line`, by `kind`."""

    source: str
    target: str
    line: int
    kind: str


@dataclass(frozen=True)
class ImportGraph:
    """The modules of one package (name → source file) and their edges."""

    package: str
    modules: dict[str, Path]
    edges: tuple[Edge, ...]

    def targets(self, module: str, kinds: tuple[str, ...] = KINDS) -> set[str]:
        return {e.target for e in self.edges if e.source == module and e.kind in kinds}

    def adjacency(
        self, kinds: tuple[str, ...] = KINDS, skip: frozenset = frozenset()
    ) -> dict[str, set[str]]:
        """module → the modules it reaches by `kinds`, less the (source, target) pairs in `skip`."""
        graph: dict[str, set[str]] = {m: set() for m in self.modules}
        for e in self.edges:
            if e.kind in kinds and e.source != e.target and (e.source, e.target) not in skip:
                graph[e.source].add(e.target)
        return graph

    def folder(self, module: str) -> str:
        """The top-level folder of the package that holds `module`, or "" for a module
        directly in the package (its `__init__` included)."""
        rest = module[len(self.package) + 1 :].split(".") if module != self.package else []
        if len(rest) > 1:
            return rest[0]
        if rest and (self.modules[module].name == "__init__.py"):
            return rest[0]
        return ""

    def lines(self, module: str) -> int:
        return len(self.modules[module].read_text().splitlines())


def module_name(path: Path, root: Path, package: str) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((package, *parts))


def read_graph(root: Path, package: str) -> ImportGraph:
    """The import graph of the package whose `__init__.py` lies in `root`."""
    modules = {module_name(p, root, package): p for p in sorted(root.rglob("*.py"))}
    edges: list[Edge] = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        edges.extend(_edges(name, tree, modules, package))
    return ImportGraph(package, modules, tuple(edges))


def _edges(source: str, tree: ast.Module, modules: dict[str, Path], package: str):
    loaded = set(map(id, _module_level(tree.body)))
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    loggers = {
        id(node.args[0])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and node.args and ast.unparse(node.func).endswith("getLogger")
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:  # type hints only: never imported at run time
            continue
        kind = "import" if id(node) in loaded else "late"
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                target = sub if sub in modules else node.module
                if target in modules:
                    yield Edge(source, target, node.lineno, kind)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield Edge(source, alias.name, node.lineno, kind)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in loggers
        ):
            if node.value in modules and node.value != package:
                yield Edge(source, node.value, node.lineno, "string")


def _module_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements that run when the module loads: the body and the bodies of its
    top-level `if`/`try` blocks, less `if TYPE_CHECKING:`."""
    stack, found = list(body), []
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        found.append(node)
        if isinstance(node, (ast.If, ast.Try)):
            stack.extend(node.body + node.orelse + getattr(node, "finalbody", []))
            stack.extend(s for h in getattr(node, "handlers", []) for s in h.body)
    return found


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
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


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of `graph` with more than one node (Tarjan,
    iterative), each an import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[set[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.add(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found
