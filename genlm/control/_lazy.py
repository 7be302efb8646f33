"""Module-level lazy attributes (PEP 562), so importing a package stays cheap."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list]]:
    """`__getattr__` and `__dir__` for a package whose names live in submodules.

    Args:
        package: the package's `__name__`.
        exports: public name → module path (absolute, or relative to `package`).
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        importlib.import_module(package).__dict__[name] = value
        return value

    def __dir__() -> list:
        return sorted(exports)

    return __getattr__, __dir__
