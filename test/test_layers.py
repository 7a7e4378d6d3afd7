"""The house as the README draws it: which layer may import which.

Only ``nodes/`` touches ROS (rclpy, interfaces, launch); ``core``, ``rtc`` and ``sim``
import neither ROS nor torch; no layer imports one above it; no modules import one
another in a circle, function-level imports included.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

from .source_imports import import_cycles, module_imports

PACKAGE = Path(__file__).resolve().parents[1] / "xinfer_ros"

#: Layer -> the package's layers it may import (besides itself).
ALLOWED: dict[str, set[str]] = {
    "config_paths": set(),
    "errors": set(),
    "core": {"errors", "config_paths"},
    "rtc": {"errors", "core"},
    "sim": {"errors", "core", "rtc", "config_paths"},
    "model": {"errors", "core", "rtc", "config_paths"},
    "engine": {"errors", "core", "rtc", "model", "config_paths"},
    "bags": {"errors", "core", "config_paths"},
    "fleet": {"errors", "core", "model", "serving", "config_paths"},
    "serving": {"errors", "core", "model", "config_paths"},
    "openpi": {"errors", "core", "model", "serving", "config_paths"},
    "nodes": {"errors", "core", "rtc", "sim", "model", "engine", "bags", "fleet", "serving",
              "openpi", "config_paths", "msg", "srv"},
    "cli": {"errors", "core", "rtc", "sim", "model", "engine", "bags", "fleet", "serving",
            "openpi", "nodes", "config_paths"},
}
#: Single modules of a layer outside ALLOWED that a layer may import all the same. The
#: engine's contract (the Protocol the front ends hold, its result and status types) is
#: torch-free, and the openpi front end types its engine with it (issue 30).
ALLOWED_MODULES: dict[str, set[str]] = {"openpi": {"xinfer_ros.engine.api"}}
ROS = {"rclpy", "rcl_interfaces", "launch", "launch_ros", "launch_testing",
       "ament_index_python", "builtin_interfaces", "rosidl_runtime_py"}
TORCH = {"torch", "transformers", "tokenizers", "safetensors"}
ROS_FREE = {"core", "rtc", "sim", "model", "engine", "bags", "fleet", "serving", "openpi",
            "cli", "config_paths", "errors"}
TORCH_FREE = {"core", "rtc", "sim", "errors"}


def _imports() -> list[tuple[str, str, str]]:
    """(layer, imported module, file) for every absolute import in the package."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        layer = rel.parts[0].removesuffix(".py")
        if layer == "__init__":
            continue
        found += [(layer, name, str(rel)) for name in module_imports(path)]
    return found


def _is_ros(module: str) -> bool:
    top = module.split(".", maxsplit=1)[0]
    return top in ROS or top.endswith("_msgs") or module.startswith(
        ("xinfer_ros.msg", "xinfer_ros.srv"))


def test_only_nodes_touch_ros() -> None:
    bad = [(f, m) for layer, m, f in _imports() if layer in ROS_FREE and _is_ros(m)]
    assert not bad, f"ROS imported outside xinfer_ros/nodes: {bad}"


def test_core_rtc_sim_import_no_torch() -> None:
    bad = [(f, m) for layer, m, f in _imports()
           if layer in TORCH_FREE and m.split(".")[0] in TORCH]
    assert not bad, f"torch or transformers imported by a torch-free layer: {bad}"


def test_no_layer_imports_one_above_it() -> None:
    bad = []
    for layer, module, path in _imports():
        if not module.startswith("xinfer_ros.") or layer not in ALLOWED:
            continue
        target = module.split(".")[1]
        if module in ALLOWED_MODULES.get(layer, set()):
            continue
        if target != layer and target not in ALLOWED[layer]:
            bad.append(f"{path} imports {module}")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_every_layer_is_known() -> None:
    layers = {p.name.removesuffix(".py") for p in PACKAGE.iterdir()
              if (p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py"}
    assert layers - {"__init__", "msg", "srv"} == set(ALLOWED)


def test_every_exception_has_the_package_root() -> None:
    """Each exception class the package defines derives from XInferRosError."""
    from xinfer_ros.errors import XInferRosError

    bad, checked = [], 0
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        if rel.parts[1] in {"nodes", "msg", "srv"}:
            continue  # ROS adapters define no exceptions; importing them needs rclpy
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
        if not names:
            continue
        module = importlib.import_module(".".join(rel.parts).removesuffix(".__init__"))
        for name in names:
            cls = getattr(module, name)
            if isinstance(cls, type) and issubclass(cls, BaseException):
                checked += 1
                if not issubclass(cls, XInferRosError):
                    bad.append(f"{rel}.{name}")
    assert checked >= 15
    assert not bad, f"exceptions outside the XInferRosError root: {bad}"


def _module_level_imports(path: Path) -> list[str]:
    """Modules imported when ``path`` is imported: outside functions and TYPE_CHECKING."""
    names: list[str] = []
    pending: list[ast.AST] = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            pending += node.orelse
            continue
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        else:
            pending += list(ast.iter_child_nodes(node))
    return names


def test_cli_modules_import_without_ros() -> None:
    # The README's promise: `cli` is ROS-free; a command reaches ROS (through nodes/)
    # only inside the function that needs it, so `--help` and the ROS-free commands
    # run where rclpy is absent.
    bad = [f"{path.name} imports {module}" for path in sorted((PACKAGE / "cli").glob("*.py"))
           for module in _module_level_imports(path)
           if _is_ros(module) or module.startswith("xinfer_ros.nodes")]
    assert not bad, "cli modules reaching ROS at import:\n" + "\n".join(bad)


def _stdlib(module: str) -> bool:
    return module.split(".", maxsplit=1)[0] in sys.stdlib_module_names


def test_stopping_imports_only_the_standard_library() -> None:
    # The node scripts import it before rclpy, torch or the model, to guard those
    # imports against a lost Ctrl-C: anything heavier here is imported unguarded.
    chain = [PACKAGE / "__init__.py", PACKAGE / "nodes" / "__init__.py",
             PACKAGE / "nodes" / "stopping.py"]
    bad = [f"{path.relative_to(PACKAGE)} imports {module}" for path in chain
           for module in _module_level_imports(path) if not _stdlib(module)]
    assert not bad, "\n".join(bad)


def test_node_scripts_import_the_guard_only_and_run_a_node_with_a_main() -> None:
    scripts = sorted((PACKAGE.parent / "scripts" / "nodes").iterdir())
    assert len(scripts) >= 5
    bad = []
    for script in scripts:
        bad += [f"{script.name} imports {module}" for module in _module_level_imports(script)
                if not _stdlib(module) and module != "xinfer_ros.nodes.stopping"]
        calls = [node for node in ast.walk(ast.parse(script.read_text(encoding="utf-8")))
                 if isinstance(node, ast.Call) and ast.unparse(node.func) == "run_node_main"]
        targets = [call.args[0].value for call in calls
                   if call.args and isinstance(call.args[0], ast.Constant)]
        if len(targets) != 1 or not str(targets[0]).startswith("xinfer_ros.nodes."):
            bad.append(f"{script.name} does not run one xinfer_ros.nodes module: {targets}")
            continue
        module = PACKAGE.parent.joinpath(*str(targets[0]).split(".")).with_suffix(".py")
        tree = ast.parse(module.read_text(encoding="utf-8")) if module.is_file() else None
        if tree is None or not any(isinstance(n, ast.FunctionDef) and n.name == "main"
                                   for n in tree.body):
            bad.append(f"{script.name} runs {targets[0]}, which has no main()")
    assert not bad, "\n".join(bad)


def test_no_import_cycle() -> None:
    """No two modules of the package import each other, even through others or lazily."""
    cycles = import_cycles(PACKAGE)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_a_lazy_import_cycle_is_found(tmp_path: Path) -> None:
    """The check sees a circle closed by a function-level import, not a type-only one."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    for init in (pkg / "__init__.py", pkg / "sub" / "__init__.py"):
        init.write_text("", encoding="utf-8")
    (pkg / "a.py").write_text("from pkg.sub import b\n", encoding="utf-8")
    (pkg / "sub" / "b.py").write_text(
        "def f():\n    from pkg.c import g\n    return g\n", encoding="utf-8")
    (pkg / "c.py").write_text("import pkg.a\n", encoding="utf-8")
    (pkg / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import e\n",
        encoding="utf-8")
    (pkg / "e.py").write_text("from pkg import d\n", encoding="utf-8")
    assert import_cycles(pkg) == [["pkg.a", "pkg.c", "pkg.sub.b"]]
