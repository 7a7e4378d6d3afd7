"""The server's parameter table read from a parameter file, without ROS."""

from __future__ import annotations

from pathlib import Path

import pytest

from xinfer_ros.fleet.plan import default_config
from xinfer_ros.serving.params import ParamSpec, read_param_file, resolve_params
from xinfer_ros.serving.server_params import PARAMS, read_server_params


def test_the_shipped_fleet_configuration_reads_without_an_unknown_key() -> None:
    p = read_server_params(default_config())
    assert p["model"] == "pi0-tiny" and p["torch.slots"] == [4, 4, 8]
    # Batching where the backend can, only once saturated (issue 28).
    assert (p["torch.max_batch"], p["torch.batch_when"]) == (4, "saturated")
    assert p["shed_doomed"] is False  # for fleets far past capacity only
    # Parameters the file does not give are the node's defaults.
    defaults = {spec.name: spec.default for spec in PARAMS}
    assert p["strict_image_size"] is defaults["strict_image_size"]


def test_nested_sections_flatten_and_a_node_section_wins_over_wildcards(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("/**:\n  ros__parameters:\n    a: 1\n    b: 2\n"
                    "inference_server:\n  ros__parameters:\n    b: 3\n    t:\n      x: [1]\n")
    assert read_param_file(path, "inference_server") == {"a": 1, "b": 3, "t.x": [1]}


@pytest.mark.parametrize(("value", "ok"), [
    (1.0, True), (1, False), (True, False), ("1", False)])
def test_types_follow_ros_an_integer_is_no_float(value: object, ok: bool) -> None:
    spec = ParamSpec("x", 0.5, "a float", 0.0, 10.0)
    if ok:
        assert resolve_params([spec], {"x": value}, "f.yaml") == {"x": value}
    else:
        with pytest.raises(ValueError, match=r"f.yaml: parameter 'x' cannot be"):
            resolve_params([spec], {"x": value}, "f.yaml")


def test_lists_hold_the_defaults_element_type() -> None:
    spec = ParamSpec("s", [0], "ints")
    assert resolve_params([spec], {"s": [1, 2, 3]}, "f")["s"] == [1, 2, 3]
    with pytest.raises(ValueError, match="cannot be"):
        resolve_params([spec], {"s": [1.0]}, "f")


def test_a_missing_or_malformed_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read parameter file"):
        read_server_params(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("inference_server: [1, 2]\n")
    with pytest.raises(ValueError, match="expected a ros__parameters mapping"):
        read_server_params(bad)


@pytest.mark.parametrize("value", ["yes", "off_", "false"])
def test_a_lazy_slots_value_outside_its_choices_is_one_line_naming_it(tmp_path: Path,
                                                                     value: str) -> None:
    # A bare `off` reads as a boolean in YAML: refused too, never taken as "off".
    path = tmp_path / "fleet.yaml"
    text = "false" if value == "false" else f'"{value}"'
    path.write_text(f"inference_server:\n  ros__parameters:\n    torch:\n"
                    f"      lazy_slots: {text}\n")
    with pytest.raises(ValueError, match=r"torch\.lazy_slots") as err:
        read_server_params(path)
    assert "\n" not in str(err.value)
    path.write_text('inference_server:\n  ros__parameters:\n    torch:\n      lazy_slots: stage\n')
    assert read_server_params(path)["torch.lazy_slots"] == "stage"


def test_a_batch_when_outside_its_choices_is_one_line_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text('inference_server:\n  ros__parameters:\n    torch:\n'
                    '      batch_when: sometimes\n')
    with pytest.raises(ValueError, match=r"torch\.batch_when") as err:
        read_server_params(path)
    assert "\n" not in str(err.value)
