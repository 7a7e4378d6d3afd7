"""package.xml declares every runtime import of the package and of its launch file."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from .source_imports import module_imports

ROOT = Path(__file__).resolve().parents[1]

#: Top-level module -> its package.xml key.
KEYS = {
    "rclpy": "rclpy", "rcl_interfaces": "rcl_interfaces",
    "builtin_interfaces": "builtin_interfaces", "std_msgs": "std_msgs",
    "sensor_msgs": "sensor_msgs", "diagnostic_msgs": "diagnostic_msgs",
    "trajectory_msgs": "trajectory_msgs", "launch": "launch", "launch_ros": "launch_ros",
    "numpy": "python3-numpy", "cv2": "python3-opencv", "yaml": "python3-yaml",
    "matplotlib": "python3-matplotlib", "tqdm": "python3-tqdm",
    "websockets": "python3-websockets", "msgpack": "python3-msgpack",
    "rosbags": "python3-rosbags-pip", "safetensors": "python3-safetensors-pip",
    "tokenizers": "python3-tokenizers-pip", "torch": "python3-torch-pip",
    "transformers": "python3-transformers-pip",
}
#: Imported only when present, with a fallback: not a dependency.
OPTIONAL = {"cv_bridge"}
#: Declared without an import: the generated interfaces' runtime.
NOT_IMPORTED = {"rosidl_default_runtime"}


def _imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    files = [*ROOT.joinpath("xinfer_ros").rglob("*.py"), *ROOT.joinpath("launch").glob("*.py")]
    for path in files:
        for name in module_imports(path):
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top != "xinfer_ros":
                found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_import_is_declared_and_every_declaration_used() -> None:
    declared = {e.text for e in ET.parse(ROOT / "package.xml").getroot().iter("exec_depend")}
    imports = _imports()
    unknown = {m: sorted(f)[:2] for m, f in imports.items() if m not in KEYS | dict.fromkeys(
        OPTIONAL)}
    assert not unknown, f"imports without a package.xml key in this test's table: {unknown}"
    missing = {KEYS[m]: sorted(f)[:2] for m, f in imports.items()
               if m in KEYS and KEYS[m] not in declared}
    assert not missing, f"imported but not in package.xml: {missing}"
    used = {KEYS[m] for m in imports if m in KEYS}
    assert declared - used == NOT_IMPORTED, f"declared but never imported: {declared - used}"
