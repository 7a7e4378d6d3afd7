"""A replay report as JUnit XML, so that CI systems list each robot and threshold.

One test suite per replay; per robot (and ``ALL``) a case ``answered`` that fails when
the server answered none of that robot's requests, and one case per threshold check,
failed with the value and the limit when it was crossed. ROS-free (stdlib XML).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

from xinfer_ros.bags.report import ReplayReport, SideMetrics

__all__ = ["junit_xml", "write_junit"]


def _value(value: float | None) -> str:
    return "n/a" if value is None or (isinstance(value, float) and not math.isfinite(value)) \
        else f"{value:.6g}"


def junit_xml(report: ReplayReport, name: str = "xinfer-replay") -> str:
    """The report's checks as a JUnit XML document."""
    suite = ET.Element("testsuite", name=name)
    ET.SubElement(ET.SubElement(suite, "properties"), "property", name="bag",
                  value=report.bag)
    cases = failures = 0
    scopes: dict[str, tuple[SideMetrics, int]] = {
        scope: (sec.after, sec.sent) for scope, sec in report.robots.items()}
    scopes["ALL"] = (report.total.after, report.total.sent)
    for scope, (after, sent) in scopes.items():
        case = ET.SubElement(suite, "testcase", classname=f"{name}.{scope}", name="answered")
        cases += 1
        if after.responses == 0:
            failures += 1
            ET.SubElement(case, "failure", message=f"no answer to {sent} requests")
    for check in report.checks:
        case = ET.SubElement(suite, "testcase", classname=f"{name}.{check.scope}",
                             name=check.check)
        cases += 1
        if not check.passed:
            failures += 1
            ET.SubElement(case, "failure", message=(
                f"{check.check} = {_value(check.value)}, limit {_value(check.limit)}"))
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    suite.set("errors", "1" if report.error else "0")
    if report.error:
        ET.SubElement(ET.SubElement(suite, "testcase", classname=f"{name}.ALL", name="replay"),
                      "error", message=str(report.error))
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def write_junit(report: ReplayReport, path: Path | str) -> None:
    """Write :func:`junit_xml` of ``report`` to ``path``."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(junit_xml(report), encoding="utf-8")
