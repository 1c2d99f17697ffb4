# The layering of python/mutwo, checked the way CTest `lengths` checks
# function lengths: read from the source with `ast`, nothing imported.
# - No import circle between the package's modules, counting imports inside
#   functions too (a lazy import is still a dependency), but not those under
#   `if __name__ == "__main__":` (a module run as a script is not imported).
# - No private name (`_x`) of one module imported by another: a module's
#   underscored names are its own; what others need is public, or lives in a
#   lower module. Private modules (`from mutwo import _compat`) are the
#   package's layers and may be imported.
from __future__ import annotations

import ast
import os
from typing import Iterator

import pytest

PACKAGE = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "mutwo"))


def _modules() -> dict[str, ast.Module]:
    """Every module of the package, by dotted name below mutwo ("torch", "compiled._frontier")."""
    found = {}
    for folder, _, files in sorted(os.walk(PACKAGE)):
        prefix = os.path.relpath(folder, PACKAGE).replace(os.sep, ".")
        for f in sorted(files):
            if f.endswith(".py") and f != "__init__.py":
                name = f[:-3] if prefix == "." else f"{prefix}.{f[:-3]}"
                found[name] = ast.parse(open(os.path.join(folder, f)).read(), f)
    return found


def _subpackage(name: str) -> bool:
    return os.path.isdir(os.path.join(PACKAGE, *name.split(".")))


def _imports(tree: ast.Module) -> Iterator[tuple[str, list[str], int]]:
    """(module of the package imported, names taken from it, line), outside `if __name__ == "__main__":`."""
    def main_guard(n: ast.AST) -> bool:
        return isinstance(n, ast.If) and isinstance(n.test, ast.Compare) and \
            isinstance(n.test.left, ast.Name) and n.test.left.id == "__name__"

    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        for child in ast.iter_child_nodes(node):
            if main_guard(child):
                continue
            if isinstance(child, ast.ImportFrom) and child.module and child.module.split(".")[0] == "mutwo":
                inside = ".".join(child.module.split(".")[1:])
                if not inside or _subpackage(inside):  # from mutwo import _compat; from mutwo.compiled import _step
                    for a in child.names:
                        yield f"{inside}.{a.name}" if inside else a.name, [], child.lineno
                else:
                    yield inside, [a.name for a in child.names], child.lineno
            elif isinstance(child, ast.Import):
                for a in child.names:
                    parts = a.name.split(".")
                    if parts[0] == "mutwo" and len(parts) > 1:
                        yield ".".join(parts[1:]), [], child.lineno
            todo.append(child)


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: {dep for dep, _, _ in _imports(t) if dep in mods and dep != m} for m, t in mods.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle, as the modules along it, or []."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str]:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return []
    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return []


def test_no_import_circle() -> None:
    circle = _cycle(_graph())
    assert not circle, "python/mutwo imports in a circle: " + " -> ".join(circle) + \
        " (move what both need into a lower module)"


def test_no_private_name_crosses_modules() -> None:
    crossing = [f"{m}.py:{line} takes {name} from {dep}.py"
                for m, tree in _modules().items() for dep, names, line in _imports(tree)
                for name in names if name.startswith("_") and not name.startswith("__")]
    assert not crossing, "private names imported across modules:\n" + "\n".join(crossing)


@pytest.mark.parametrize("graph,circle", [
    ({"a": {"b"}, "b": {"a"}}, ["a", "b", "a"]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
])
def test_the_check_finds_a_circle(graph: dict[str, set[str]], circle: list[str]) -> None:
    assert _cycle(graph) == circle
