"""``xinfer-bench compare`` reads engine reports and judges a candidate at one speed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from xinfer_ros.cli import bench


def _report(path: Path, arm: str | None, robots: int, attainment: float,
            probe_ms: float | None, *, benchmark: str = "engine") -> Path:
    data: dict[str, object] = {"benchmark": benchmark, "robots": robots, "workload": "phases",
                               "metrics": {"attainment": attainment, "goodput_rps": 10.0}}
    if arm is not None:
        data["arm"] = arm
    if probe_ms is not None:
        stats = {"median_ms": probe_ms, "p10_ms": probe_ms, "p90_ms": probe_ms}
        data["speed_probe"] = {"samples": 100, "matmul": stats, "python": stats}
    path.write_text(json.dumps(data))
    return path


def _fleet(tmp_path: Path, cand_level: float) -> list[str]:
    # Attainment falls 2 points per 1 % of host slowdown; the candidate ran on slow hosts.
    files = []
    for i, (arm, level, probes) in enumerate([
            ("unb", 0.70, (0.88, 0.90, 0.92)), ("cand", cand_level, (0.95, 0.97, 0.99))]):
        for j, p in enumerate(probes):
            value = level - 2.0 * math.log(p / 0.9) + (0.002, -0.004, 0.002)[j]
            files.append(str(_report(tmp_path / f"{i}{j}.json", arm, 12, value, p)))
    return files


def test_compare_judges_the_candidate_at_one_speed(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["compare", *_fleet(tmp_path, 0.70), "--candidate", "cand"]) == 0
    out = capsys.readouterr().out
    assert "phases, 12 robots: 6 runs" in out
    diff = float(out.split("cand - unb = ")[1].split()[0])
    assert abs(diff) < 0.1 and "tolerance -2: holds\n" in out
    assert bench.main(["compare", *_fleet(tmp_path, 0.60), "--candidate", "cand"]) == 0
    out = capsys.readouterr().out
    diff = float(out.split("cand - unb = ")[1].split()[0])
    assert abs(diff + 10.0) < 0.1 and "tolerance -2: fails\n" in out
    # Two points short with this little noise is short but inside 2 SE of the tolerance.
    assert bench.main(["compare", *_fleet(tmp_path, 0.675), "--candidate", "cand"]) == 0
    assert "tolerance -2: undecided (short)\n" in capsys.readouterr().out


def test_a_count_without_the_candidate_gets_no_verdict(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = [str(_report(tmp_path / f"e{j}.json", "unb", 4, 0.9 + 0.01 * j, 0.9 + 0.01 * j))
             for j in range(3)]
    extra += [str(_report(tmp_path / f"f{j}.json", "lane", 4, 0.9, 0.92 - 0.01 * j))
              for j in range(2)]
    assert bench.main(["compare", *_fleet(tmp_path, 0.7), *extra, "--candidate", "cand"]) == 0
    out = capsys.readouterr().out
    assert out.index("phases, 4 robots") < out.index("no verdict") < out.index("12 robots")


def test_compare_stops_in_one_line_on_a_report_it_cannot_use(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _fleet(tmp_path, 0.7)
    for bad, why in [(_report(tmp_path / "a.json", None, 12, 0.5, 0.9), "names no arm"),
                     (_report(tmp_path / "b.json", "x", 12, 0.5, None), "no matmul speed probe"),
                     (_report(tmp_path / "c.json", "x", 12, 0.5, 0.9, benchmark="decision"),
                      "not an xinfer-bench engine or xinfer-fleet report"),
                     (_report(tmp_path / "d.json", "x", 12, math.nan, 0.9),
                      "not a finite number")]:
        assert bench.main(["compare", *good, str(bad)]) == 2
        err = capsys.readouterr().err
        assert why in err and str(bad) in err and len(err.strip().splitlines()) == 1
    no_metric = tmp_path / "m.json"
    data = json.loads(Path(good[0]).read_text())
    del data["metrics"]["attainment"]
    no_metric.write_text(json.dumps(data))
    assert bench.main(["compare", *good, str(no_metric)]) == 2
    err = capsys.readouterr().err
    assert "lacks" in err and len(err.strip().splitlines()) == 1
    lone = str(_report(tmp_path / "l.json", "unb", 4, 0.9, 0.9))
    assert bench.main(["compare", *good, lone]) == 2
    assert "phases, 4 robots: 1 runs cannot fit" in capsys.readouterr().err
    assert bench.main(["compare", *good, "--candidate", "nobody"]) == 2
    assert "no runs of arm 'nobody'" in capsys.readouterr().err


def test_fleet_reports_are_compared_by_their_totals(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # xinfer-fleet's layout: figures in "total", the count in "robots_count", and a
    # "robots" object of per-robot rows that is no count.
    files = []
    for path in _fleet(tmp_path, 0.60):
        data = json.loads(Path(path).read_text())
        data.update(benchmark="fleet", total=data.pop("metrics"),
                    robots_count=data["robots"], robots={"robot_1": {}})
        Path(path).write_text(json.dumps(data))
        files.append(path)
    assert bench.main(["compare", *files, "--candidate", "cand"]) == 0
    out = capsys.readouterr().out
    assert "phases, 12 robots: 6 runs" in out
    assert abs(float(out.split("cand - unb = ")[1].split()[0]) + 10.0) < 0.1
