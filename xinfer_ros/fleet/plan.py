"""The fleet's node plan: one function shared by fleet.launch.py and xinfer-fleet.

The plan is plain data (no ROS import): which node runs in which namespace with which
parameters. ``launch/fleet.launch.py`` turns it into ``launch_ros`` actions and
:mod:`xinfer_ros.cli.fleet` into processes, so both start the same fleet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from xinfer_ros.config_paths import config_dir, config_file
from xinfer_ros.core.constants import DEFAULT_MAX_BUDGET
from xinfer_ros.core.timing import MS_PER_S
from xinfer_ros.errors import XInferRosError
from xinfer_ros.fleet.assignment import ASSIGNMENT_TOPIC
from xinfer_ros.serving.server_params import read_server_params

__all__ = [
    "BACKENDS",
    "DEFAULT_CONFIG",
    "NodeParams",
    "NodeSpec",
    "PlanError",
    "assignment_topic",
    "build_fleet_plan",
    "config_file",
    "default_config",
    "parse_robots",
    "server_names",
]

PACKAGE = "xinfer_ros"
BACKENDS = ("torch", "emulated")
#: The shipped fleet configuration (the source checkout's, else the installed share/).
DEFAULT_CONFIG = config_dir() / "fleet.yaml"

#: A node's ROS parameters by name, as a parameter file (YAML) gives them: values of
#: several types (str, int, float, bool and lists of them) that each reader converts.
NodeParams = dict[str, Any]


def default_config() -> Path:
    """The shipped fleet.yaml (:func:`xinfer_ros.config_paths.config_dir`)."""
    return DEFAULT_CONFIG


class PlanError(XInferRosError, ValueError):
    """The fleet arguments or configuration are invalid."""


@dataclass(frozen=True)
class NodeSpec:
    """One node of the plan.

    Attributes:
        executable: Installed executable (``ros2 run xinfer_ros <executable>``), also
            the module ``xinfer_ros.nodes.<executable>``.
        name: Node name.
        namespace: Absolute namespace ("/" for the server).
        parameters: Parameter values by name.
    """

    executable: str
    name: str
    namespace: str
    parameters: NodeParams = field(default_factory=dict)

    @property
    def module(self) -> str:
        """The Python module whose ``main`` runs this node."""
        return f"{PACKAGE}.nodes.{self.executable}"


def parse_robots(robots: int | str | list[str]) -> list[str]:
    """Robot names from a count (``3`` -> robot_1..robot_3) or a list.

    Accepts an int, a numeric string, a comma-separated string or a list of names.

    Raises:
        PlanError: On an empty list, a count below 1, or an invalid or repeated name.
    """
    if isinstance(robots, str):
        text = robots.strip()
        robots = int(text) if text.isdigit() else [r.strip() for r in text.split(",") if r]
    if isinstance(robots, int):
        if robots < 1:
            raise PlanError(f"robots must be at least 1, got {robots}")
        return [f"robot_{i}" for i in range(1, robots + 1)]
    names = list(robots)
    if not names:
        raise PlanError("robots is empty")
    for name in names:
        if not name or not (name[0].isalpha() and name.replace("_", "a").isalnum()):
            raise PlanError(f"robot name {name!r} is not a valid ROS namespace token")
    if len(set(names)) != len(names):
        raise PlanError(f"robot names repeat: {names}")
    return names


def _read_config(config: Path) -> NodeParams:
    try:
        data = yaml.safe_load(config.read_text())
        dict(data["inference_server"]["ros__parameters"])
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise PlanError(f"cannot read server parameters from {config}: {exc}") from exc
    # ROS drops undeclared parameters silently: a misspelt key would never reach the node.
    try:
        read_server_params(config)
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    return dict(data)


def _section(data: NodeParams, node: str) -> NodeParams:
    """The ``ros__parameters`` of ``node`` in a parameter file (empty when absent)."""
    entry = data.get(node)
    params = entry.get("ros__parameters") if isinstance(entry, dict) else None
    if entry is not None and not isinstance(params, dict):
        raise PlanError(f"{node}: expected a ros__parameters mapping, got {entry!r}")
    return dict(params or {})


def _robot_params(server: NodeParams) -> NodeParams:
    """The simulated robots' joints and cameras for the served model.

    The action dimension is the model's, and so are the cameras when the server's
    configuration asks for more than the model takes (``server["cameras"]`` is lowered
    to match). A model that resizes images (π0) sees the robot's own camera sizes
    (robot_sim's wide frames); the reference model needs its cameras' exact sizes.
    """
    from xinfer_ros.model.presets import model_io

    try:
        io = model_io(str(server.get("model", "")), server.get("model_path") or None)
    except (OSError, ValueError) as exc:
        raise PlanError(f"model {server.get('model')!r}: {exc}") from exc
    server["cameras"] = min(int(server.get("cameras", len(io.cameras))), len(io.cameras))
    cameras = io.cameras[:server["cameras"]]
    params: NodeParams = {"action_dim": io.action_dim}
    if not io.resizes_images:
        heights = {c.height for c in cameras}
        if len(heights) != 1:
            raise PlanError(f"model {io.name!r}: robot_sim renders one camera height, the "
                            f"model's cameras have {sorted(heights)}")
        params.update(camera_height=heights.pop(), camera_widths=[c.width for c in cameras])
    else:
        params["camera_widths"] = [352, *[320] * (len(cameras) - 1)]
    return params


def _server_specs(server: NodeParams, manager: NodeParams, names: list[str],
                  servers: int, *, root: str, clock: NodeParams) -> list[NodeSpec]:
    """One server with every robot, or ``servers`` named ones and the fleet manager."""
    if servers == 1:
        return [NodeSpec("inference_server", "inference_server", root, {**server, **clock})]
    specs = []
    device = str(server.get("device", "cpu"))
    for index in range(servers):
        name = f"server_{index}"
        params = {**server, **clock, "server_name": name, "robots": names}
        if device == "cuda":
            params["device"] = f"cuda:{index}"
        if index > 0:
            params.pop("openpi_port", None)
        specs.append(NodeSpec("inference_server", name, root, params))
    specs.append(NodeSpec("fleet_manager", "fleet_manager", root,
                          {"expected_servers": servers, **manager, **clock, "robots": names}))
    return specs


def server_names(plan: list[NodeSpec]) -> list[str]:
    """The ``server_name`` of each server of ``plan`` (``""``: the one unnamed server)."""
    return [str(spec.parameters.get("server_name", "")) for spec in plan
            if spec.executable == "inference_server"]


def assignment_topic(plan: list[NodeSpec]) -> str:
    """The fleet manager's assignment topic in ``plan`` (``""``: one server, no manager)."""
    for spec in plan:
        if spec.executable == "fleet_manager":
            return f"{spec.namespace.rstrip('/')}/{ASSIGNMENT_TOPIC}"
    return ""


def build_fleet_plan(
    robots: int | str | list[str] = 3,
    *,
    backend: str | None = None,
    model: str | None = None,
    model_path: str | None = None,
    policy: str | None = None,
    workload: str = "phases",
    config: Path | str | None = None,
    seed: int = 0,
    camera_rate_hz: float | None = None,
    budget_scale: float | None = None,
    sim: bool = True,
    namespace: str = "",
    use_sim_time: bool = False,
    openpi_port: int | None = None,
    servers: int = 1,
    server_respawn: bool = False,
    autostart: bool | None = None,
) -> list[NodeSpec]:
    """The nodes of a fleet: its servers, and an executor (and a robot_sim) per robot.

    Executor parameters come from the configuration's ``rtc_executor`` section and,
    per robot, from a ``/<robot>/rtc_executor`` section (ROS parameter-file node names);
    the executors clamp budgets to the server's ``max_budget_ms``.

    Args:
        robots: Count or names of robots; they become the server's allowlist.
        backend: ``torch`` or ``emulated`` (default: the configuration's).
        model: Model preset (default: the configuration's).
        model_path: Checkpoint directory of the model (default: the configuration's).
        policy: Scheduling policy (default: the configuration's).
        workload: Budget pattern of the simulated robots.
        config: Server parameter file (default: ``config/fleet.yaml``).
        seed: Seed of the robots' workload and scenes.
        camera_rate_hz: Frame rate of the simulated cameras (default: robot_sim's).
        budget_scale: Factor on the workload's budgets (default: robot_sim's, 1).
        sim: Start simulated robots; ``False`` for real robots (server and executors).
        namespace: Prefix of every node's namespace (``site_a``: the server in
            ``/site_a``, robot ``r`` in ``/site_a/r``).
        use_sim_time: Every node follows ``/clock``.
        openpi_port: Serve openpi clients on this port too (default: the configuration's).
        servers: Inference servers. More than one: ``server_0``, ``server_1``, ... (node
            and ``server_name``), each with every robot on its allowlist, and a
            ``fleet_manager`` (parameters from the configuration's ``fleet_manager``
            section) that assigns the robots to them by capacity and moves a failed
            server's robots to the others; the executors follow its assignment. Each
            server runs on its own GPU when ``device`` is an index-less ``cuda``
            (``cuda:0``, ``cuda:1``, ...); the openpi endpoint runs on the first only.
            The plan lists the servers (and the manager) first.
        server_respawn: The servers are restarted when they die (the launch's
            ``respawn``); the executors say so on /diagnostics while they wait.
        autostart: The servers and executors configure and activate themselves
            (``False``: they wait for ``ros2 lifecycle set <node> configure`` and
            ``activate``;
            ``None``: ``sim``, so a real arm moves only once an operator activates it).

    Raises:
        PlanError: On invalid robots, an unknown backend or an unreadable config.
    """
    names = parse_robots(robots)
    prefix = namespace.strip("/")
    if prefix and not all(part and part.replace("_", "a").isalnum() for part in prefix.split("/")):
        raise PlanError(f"namespace {namespace!r} is not a valid ROS namespace")
    data = _read_config(Path(config) if config else default_config())
    server = _section(data, "inference_server")
    for key, value in (("backend", backend), ("model", model), ("model_path", model_path),
                       ("policy", policy), ("openpi_port", openpi_port)):
        if value:
            server[key] = value
    if server.get("backend") not in BACKENDS:
        raise PlanError(f"backend {server.get('backend')!r} is not one of {list(BACKENDS)}")
    if not 1 <= servers <= len(names):
        raise PlanError(f"servers must be 1..{len(names)} (one robot each at least), "
                        f"got {servers}")
    server["robots"] = names
    robot = _robot_params(server)
    clock = {"use_sim_time": True} if use_sim_time else {}
    root = f"/{prefix}" if prefix else "/"
    start = sim if autostart is None else autostart
    plan = _server_specs({**server, "autostart": start}, _section(data, "fleet_manager"),
                         names, servers, root=root, clock=clock)
    executor = {"max_budget_ms": float(server.get("max_budget_ms",
                                                  DEFAULT_MAX_BUDGET * MS_PER_S)),
                **_section(data, "rtc_executor")}
    if servers > 1:
        executor["assignment_topic"] = assignment_topic(plan)
    if server_respawn:
        executor["server_respawn"] = True
    for index, name in enumerate(names):
        robot_ns = f"{root.rstrip('/')}/{name}"
        plan.append(NodeSpec("rtc_executor", "rtc_executor", robot_ns, {
            **executor, **_section(data, f"/{name}/rtc_executor"), "robot_id": name,
            "action_dim": robot["action_dim"],
            "autostart": start, **clock}))
        if not sim:
            continue
        params = {"robot_index": index, "fleet_size": len(names), "workload": workload,
                  "seed": seed, **robot, **clock}
        if camera_rate_hz is not None:
            params["camera_rate_hz"] = float(camera_rate_hz)
        if budget_scale is not None:
            params["budget_scale"] = float(budget_scale)
        plan.append(NodeSpec("robot_sim", "robot_sim", robot_ns, params))
    return plan
