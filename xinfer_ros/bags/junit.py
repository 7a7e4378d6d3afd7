"""A replay report as JUnit XML, so that CI systems list each robot and threshold.

One test suite per replay; per robot (and ``ALL``) a case ``answered`` that fails when
the server answered none of that robot's requests, and one case per threshold check,
failed with the value and the limit when it was crossed. ROS-free (stdlib XML).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

__all__ = ["junit_xml", "write_junit"]


def _value(value: Any) -> str:
    return "n/a" if value is None or (isinstance(value, float) and not math.isfinite(value)) \
        else f"{value:.6g}"


def junit_xml(report: dict[str, Any], name: str = "xinfer-replay") -> str:
    """The report's checks as a JUnit XML document."""
    suite = ET.Element("testsuite", name=name)
    ET.SubElement(ET.SubElement(suite, "properties"), "property", name="bag",
                  value=str(report.get("bag", "")))
    cases = failures = 0
    scopes = {**report["robots"], "ALL": report["total"]}
    for scope, section in scopes.items():
        case = ET.SubElement(suite, "testcase", classname=f"{name}.{scope}", name="answered")
        cases += 1
        if section["after"]["responses"] == 0:
            failures += 1
            ET.SubElement(case, "failure", message=f"no answer to {section['sent']} requests")
    for check in report["checks"]:
        case = ET.SubElement(suite, "testcase", classname=f"{name}.{check['scope']}",
                             name=check["check"])
        cases += 1
        if not check["passed"]:
            failures += 1
            ET.SubElement(case, "failure", message=(
                f"{check['check']} = {_value(check['value'])}, limit {_value(check['limit'])}"))
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    suite.set("errors", "1" if report.get("error") else "0")
    if report.get("error"):
        ET.SubElement(ET.SubElement(suite, "testcase", classname=f"{name}.ALL", name="replay"),
                      "error", message=str(report["error"]))
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def write_junit(report: dict[str, Any], path: Path | str) -> None:
    """Write :func:`junit_xml` of ``report`` to ``path``."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(junit_xml(report), encoding="utf-8")
