"""``iopoll.loop``'s modules import one another without a cycle, counting every import.

``TYPE_CHECKING`` blocks and imports inside functions count too: a cycle there still means
two modules that cannot be read, or changed, one without the other.
"""

from __future__ import annotations

import ast
import pathlib

import iopoll.loop

PACKAGE = pathlib.Path(iopoll.loop.__file__).parent


def _imports(path: pathlib.Path) -> set[str]:
    """The sibling modules ``path`` imports (``__init__`` for the package itself)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names.add(node.module or "__init__")
            if node.module is None:  # from . import x
                names.update(alias.name for alias in node.names)
    return names


def test_no_import_cycle_in_the_loop_package() -> None:
    graph = {path.stem: _imports(path) for path in PACKAGE.glob("*.py")}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, "import cycle: " + " -> ".join((*path, module))
        if module in done or module not in graph:
            return
        for imported in sorted(graph[module]):
            visit(imported, (*path, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())
