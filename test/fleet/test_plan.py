import pytest

from xinfer_ros.fleet.plan import (
    PlanError,
    build_fleet_plan,
    config_file,
    default_config,
    parse_robots,
)


def test_parse_robots_from_count_list_and_string() -> None:
    assert parse_robots(3) == ["robot_1", "robot_2", "robot_3"]
    assert parse_robots("2") == ["robot_1", "robot_2"]
    assert parse_robots("left_arm,right_arm") == ["left_arm", "right_arm"]
    for bad in (0, "", [], ["a b"], ["x", "x"], ["1abc"]):
        with pytest.raises(PlanError):
            parse_robots(bad)


def test_plan_has_server_and_a_group_per_robot() -> None:
    plan = build_fleet_plan(["r1", "r2"], backend="emulated", policy="edf", workload="parcel")
    server = plan[0]
    assert (server.executable, server.namespace) == ("inference_server", "/")
    assert server.parameters["robots"] == ["r1", "r2"]
    assert server.parameters["backend"] == "emulated" and server.parameters["policy"] == "edf"
    assert server.parameters["model"] == "pi0-tiny"  # from config/fleet.yaml
    groups = {(n.namespace, n.executable) for n in plan[1:]}
    assert groups == {(f"/{r}", e) for r in ("r1", "r2") for e in ("rtc_executor", "robot_sim")}
    sims = [n for n in plan if n.executable == "robot_sim"]
    assert [s.parameters["robot_index"] for s in sims] == [0, 1]
    # The robots take the model's joints; π0 letterboxes their wide cameras.
    assert all(s.parameters["action_dim"] == 14 for s in sims)
    assert sims[0].parameters["camera_widths"] == [352, 320, 320]
    # Executors clamp budgets to the server's own bound; fleet.yaml's rtc_executor section.
    assert plan[1].parameters == {"robot_id": "r1", "action_dim": 14, "max_budget_ms": 10000.0,
                                  "startup": "silent", "hold_timeout_s": 1.0,
                                  "output": "commands", "autostart": True}
    assert all(s.parameters["workload"] == "parcel" for s in sims)
    assert plan[1].module == "xinfer_ros.nodes.rtc_executor"


def test_plan_rejects_bad_backend_and_config(tmp_path) -> None:
    with pytest.raises(PlanError, match="backend"):
        build_fleet_plan(2, backend="tpu")
    broken = tmp_path / "fleet.yaml"
    broken.write_text("inference_server: {}\n")
    with pytest.raises(PlanError, match="cannot read"):
        build_fleet_plan(2, config=broken)
    assert default_config().is_file()


def test_config_file_resolves_bare_names_beside_the_shipped_config(tmp_path) -> None:
    assert config_file("rate_table_cpu_tiny.json") == \
        str(default_config().parent / "rate_table_cpu_tiny.json")
    own = tmp_path / "table.json"
    assert config_file(str(own)) == str(own)
    assert config_file("sub/table.json") == "sub/table.json"


def test_plan_fits_the_robots_to_the_model(tmp_path) -> None:
    import yaml

    own = tmp_path / "arm.yaml"
    own.write_text(yaml.safe_dump({
        "name": "arm", "family": "pi0", "transformers_config": {},
        "robot": {"cameras": ["front", "wrist"], "state_dim": 7, "action_dim": 7}}))
    plan = build_fleet_plan(1, backend="emulated", model=str(own))
    server, executor, sim = plan
    assert executor.parameters["action_dim"] == sim.parameters["action_dim"] == 7
    assert server.parameters["cameras"] == 2 and len(sim.parameters["camera_widths"]) == 2
    tiny = build_fleet_plan(1, backend="emulated", model="tiny")[2]
    assert tiny.parameters["camera_widths"] == [352, 320, 320]
    assert tiny.parameters["camera_height"] == 224
    with pytest.raises(PlanError, match="no-such-model"):
        build_fleet_plan(1, backend="emulated", model="no-such-model")


def test_plan_for_real_robots_under_a_site_prefix_with_executor_sections(tmp_path) -> None:
    import yaml

    config = yaml.safe_load(default_config().read_text())
    config["rtc_executor"] = {"ros__parameters": {"startup": "hold_state",
                                                  "hold_timeout_s": 0.5}}
    config["/r2/rtc_executor"] = {"ros__parameters": {"hold_timeout_s": 2.0}}
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config))
    plan = build_fleet_plan(["r1", "r2"], backend="emulated", config=path, sim=False,
                            namespace="site_a", use_sim_time=True, openpi_port=8000)
    assert [(n.executable, n.namespace) for n in plan] == [
        ("inference_server", "/site_a"), ("rtc_executor", "/site_a/r1"),
        ("rtc_executor", "/site_a/r2")]
    server, r1, r2 = (n.parameters for n in plan)
    assert server["openpi_port"] == 8000 and server["use_sim_time"] is True
    assert r1["startup"] == r2["startup"] == "hold_state"
    assert (r1["hold_timeout_s"], r2["hold_timeout_s"]) == (0.5, 2.0)
    assert r1["robot_id"] == "r1" and r2["use_sim_time"] is True
    with pytest.raises(PlanError, match="namespace"):
        build_fleet_plan(1, backend="emulated", namespace="bad name")


def test_several_servers_are_managed_by_the_fleet_manager() -> None:
    from xinfer_ros.fleet.plan import assignment_topic, server_names

    plan = build_fleet_plan(["a", "b", "c", "d", "e"], backend="emulated", servers=2,
                            openpi_port=8765, namespace="site")
    servers = [s for s in plan if s.executable == "inference_server"]
    assert plan[:2] == servers and [s.name for s in servers] == ["server_0", "server_1"]
    assert server_names(plan) == ["server_0", "server_1"]
    # Every server may serve every robot: the manager assigns them, and moves them on a
    # failure.
    assert [s.parameters["robots"] for s in servers] == [["a", "b", "c", "d", "e"]] * 2
    assert servers[0].parameters["openpi_port"] == 8765
    assert "openpi_port" not in servers[1].parameters  # one endpoint per port
    manager = plan[2]
    assert (manager.executable, manager.namespace) == ("fleet_manager", "/site")
    assert manager.parameters["robots"] == ["a", "b", "c", "d", "e"]
    assert manager.parameters["expected_servers"] == 2
    assert assignment_topic(plan) == "/site/xinfer/assignment"
    executors = [s for s in plan if s.executable == "rtc_executor"]
    assert [s.namespace for s in executors] == ["/site/a", "/site/b", "/site/c", "/site/d",
                                                "/site/e"]
    assert {s.parameters["assignment_topic"] for s in executors} == {"/site/xinfer/assignment"}
    single = build_fleet_plan(["a", "b"], backend="emulated")
    assert single[0].name == "inference_server" and "server_name" not in single[0].parameters
    assert server_names(single) == [""] and assignment_topic(single) == ""
    assert all("assignment_topic" not in s.parameters for s in single)
    assert not any(s.executable == "fleet_manager" for s in single)


def test_several_servers_get_a_gpu_each_and_at_least_one_robot(tmp_path) -> None:
    import yaml

    data = yaml.safe_load(default_config().read_text())
    data["inference_server"]["ros__parameters"]["device"] = "cuda"
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text(yaml.safe_dump(data))

    def devices(config=None) -> list[str]:
        plan = build_fleet_plan(3, backend="torch", servers=3, config=config)
        return [s.parameters["device"] for s in plan if s.executable == "inference_server"]

    assert devices(gpus) == ["cuda:0", "cuda:1", "cuda:2"]
    assert devices() == ["cpu"] * 3  # config/fleet.yaml: a CPU, shared
    for bad in (0, 4):
        with pytest.raises(PlanError, match=r"servers must be 1\.\.3"):
            build_fleet_plan(3, backend="emulated", servers=bad)


def test_a_misspelt_server_parameter_stops_the_plan(tmp_path) -> None:
    """ROS would drop an undeclared parameter silently; the plan names it instead."""
    config = tmp_path / "fleet.yaml"
    config.write_text(default_config().read_text().replace("max_budget_ms:", "max_budgt_ms:"))
    with pytest.raises(PlanError, match=r"unknown parameter 'max_budgt_ms'"):
        build_fleet_plan(2, config=config)


def test_servers_and_executors_autostart_unless_told_to_wait_for_activation() -> None:
    def autostart(**kw: object) -> list[bool]:
        plan = build_fleet_plan(["r1", "r2"], backend="emulated", **kw)  # type: ignore[arg-type]
        return [n.parameters["autostart"] for n in plan
                if n.executable in ("inference_server", "rtc_executor")]

    # Simulated robots start at once; a real arm waits for an operator's activate.
    assert autostart() == autostart(sim=False, autostart=True) == [True] * 3
    assert autostart(sim=False) == autostart(autostart=False) == [False] * 3
    assert autostart(sim=False, servers=2) == [False] * 4
