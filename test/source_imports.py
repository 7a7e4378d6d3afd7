"""Absolute imports written in Python source files (read with ast, nothing imported)."""

from __future__ import annotations

import ast
from collections.abc import Collection
from pathlib import Path


def module_imports(path: Path) -> list[str]:
    """Every module ``path`` imports absolutely (``import x``, ``from x import y``)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def runtime_imports(path: Path, modules: Collection[str]) -> set[str]:
    """Which of ``modules`` (dotted names) ``path`` imports when it runs.

    Function-level imports count; imports under ``if TYPE_CHECKING:`` never run and do
    not. ``from a import b`` is the module ``a.b`` when that is one of ``modules``,
    else ``a``.
    """
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for other in child.orelse:
                    visit_node(other)
                continue
            visit_node(child)

    def visit_node(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in modules else node.module)
        visit(node)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found & set(modules)


def package_modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of the package at ``root``."""
    out = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_cycles(root: Path) -> list[list[str]]:
    """Each group of the package's modules that import one another in a circle.

    Strongly connected components (Tarjan) of the run-time import graph of
    :func:`runtime_imports`, each sorted; a module importing itself does not count.
    """
    modules = package_modules(root)
    graph = {name: sorted(runtime_imports(path, modules) - {name})
             for name, path in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                strong(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for name in sorted(graph):
        if name not in index:
            strong(name)
    return cycles
