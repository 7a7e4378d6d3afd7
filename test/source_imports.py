"""Absolute imports written in Python source files (read with ast, nothing imported)."""

from __future__ import annotations

import ast
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
