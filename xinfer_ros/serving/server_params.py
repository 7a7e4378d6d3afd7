"""The inference server's parameters: names, defaults, ranges and checks.

Plain data, declared and validated by :func:`xinfer_ros.nodes.params.declare_params`
when the node starts, and read from the same parameter file by ``xinfer-serve``
(:func:`read_server_params`): every invalid value ends either with exit status 2 and
one line naming the parameter and what it accepts.
"""

from __future__ import annotations

import re
from pathlib import Path

from xinfer_ros.core.constants import (
    ATTAINMENT_TARGET,
    DEFAULT_BUDGET,
    DEFAULT_MAX_BUDGET,
    MAX_BUDGET,
    MAX_LIVE_REQUESTS,
)
from xinfer_ros.core.phase_spread import PHASE_SPREAD_MARGIN
from xinfer_ros.core.registry import SERVED_POLICIES
from xinfer_ros.core.saturation import BATCH_WHEN, SaturationSettings
from xinfer_ros.core.timing import MS_PER_S
from xinfer_ros.core.xinfer_policy import LAZY_SLOTS
from xinfer_ros.model.presets import COMPILE_MODES
from xinfer_ros.serving.params import (
    EXECUTOR_PARAM,
    Params,
    ParamSpec,
    read_param_file,
    resolve_params,
)

__all__ = ["OPENPI_PARAMS", "PARAMS", "POLICIES", "TRANSPORTS", "read_server_params"]

POLICIES = SERVED_POLICIES
#: Camera transports, by image_transport's names.
TRANSPORTS = ("raw", "compressed")
#: A ROS name token: what server_name may be.
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def _check_slots(value: list[int]) -> str | None:
    if list(value) == [0] or (len(value) == 3 and min(value) >= 1):
        return None
    return f"needs three counts >= 1, or [0], got {list(value)}"


PARAMS = [
    ParamSpec("autostart", True, "configure and activate at start (false: the model loads, "
              "then the server waits for 'ros2 lifecycle set <node> configure' and "
              "'activate'; requests are answered REJECTED until it is active)"),
    ParamSpec("server_name", "", "name of this server among several on one ROS domain: its "
              "statistics go to xinfer/<server_name>/fleet_stats and its /diagnostics "
              "entries are xinfer/<server_name>/...; run the node as <server_name> too "
              "(__node:=) so its services are /<server_name>/... (empty: one server, "
              "xinfer/fleet_stats)",
              check=lambda v: None if not v or _NAME.match(v) else
              "must be a letter, then letters, digits and underscores"),
    ParamSpec("robots", ["robot_1"], "allowlist of robot namespaces served (with a fleet "
              "manager: the robots it may be assigned)",
              check=lambda v: None if v else "the allowlist is empty"),
    ParamSpec("capacity", 0, "robots this server serves within the SLO, announced to the "
              "fleet manager (e.g. the ERC from xinfer-sim plan for its rate table and "
              "workload); 0: no limit stated", 0, 100_000),
    ParamSpec("heartbeat_period_s", 0.2, "a named server announces itself on xinfer/servers "
              "this often (s); the fleet manager's server_timeout_s spans a few", 0.01, 10.0),
    ParamSpec("cameras", 3, "cameras per robot (π0: up to the model's; a missing one is "
              "masked)", 1, 16),
    ParamSpec("model", "pi0", "model preset: config/models/<name>.yaml (pi0, pi0-tiny, tiny, "
              "vla-2b, pi05) or a YAML path"),
    ParamSpec("model_path", "", "checkpoint directory (π0: transformers' or lerobot's "
              "layout; empty: the preset's, else seeded random weights)"),
    ParamSpec("backend", "torch", "model backend", choices=("torch", "emulated")),
    ParamSpec("device", "cpu", "torch device (cpu, cuda)"),
    ParamSpec("policy", "xinfer", "scheduling policy", choices=POLICIES),
*(spec for backend in ("torch", "emulated") for spec in (
        ParamSpec(f"{backend}.rate_table", "",
                  f"rate table for the {backend} backend: a path, or a file name under the "
                  "package's config/ (empty: the shipped default table)"),
        ParamSpec(f"{backend}.slots", [0],
                  f"execution slots [V, P, A] for the {backend} backend ([0]: engine default)",
                  check=_check_slots),
        ParamSpec(f"{backend}.lazy_slots", "off",
                  f"{backend} backend, XInfer policies (others warn and fill every slot): "
                  "stage = a stage's second and later slots, device = every slot beside a "
                  "running unit, go only to requests whose slack cannot wait (for a CPU, "
                  "where concurrent units slow each other: a lightly loaded server then "
                  "runs one unit per stage, or one request at a time); off = any free slot",
                  choices=LAZY_SLOTS))),
    ParamSpec("torch.action_processes", 0,
              "CPU only: run Action units in this many worker processes (0: threads)", 0, 16),
    ParamSpec("torch.guidance", True, "real-time-chunking guidance in the Action stage"),
    ParamSpec("torch.compile", "off", "π0 Action loop: off (eager), on (torch.compile) or "
              "cudagraphs (CUDA); compiled at start-up, in every Action process",
              choices=COMPILE_MODES),
    ParamSpec("torch.max_batch", 1, "most units of a stage run as one batched forward "
              "(models that batch: the π0 family; calibrate the rate table with the same "
              "--max-batch)", 1, 64),
    ParamSpec("torch.batch_when", "saturated", "with max_batch above 1, when the XInfer "
              "policies batch: saturated = only while a meter reads unbatched serving "
              f"saturated (arrivals x unit time alone over lanes, {SaturationSettings().enter:g} "
              "to enter), else one "
              "unit per lane as unbatched XInfer; always = whenever launched units wait. "
              "FIFO, EDF and Slack-Gate batch whenever units wait (with a warning under "
              "saturated)", choices=BATCH_WHEN),
    ParamSpec("image_transports", ["raw"], "per camera (or one for all): raw "
              "(camera_i/image_raw, sensor_msgs/Image) or compressed (camera_i/image_raw/"
              "compressed, sensor_msgs/CompressedImage, JPEG or PNG)",
              check=lambda v: None if v and set(v) <= set(TRANSPORTS) else
              f"entries must be {' or '.join(TRANSPORTS)}, got {list(v)}"),
    ParamSpec("strict_image_size", False, "reject frames whose size differs from the "
              "model's input instead of resizing them with padding"),
    ParamSpec("joint_names", [""], "the model's joint order: joint_states positions are "
              "read by these names ([\"\"]: in the message's order)",
              check=lambda v: None if list(v) == [""] or all(v) else "has an empty name"),
    ParamSpec("max_frame_bytes_per_robot", 128 * 2**20, "byte budget of one robot's stored "
              "camera frames (8 per camera, kept serialized): a frame beyond it evicts that "
              "robot's oldest frames, largest camera first; one that cannot fit beside the "
              "newest frame of each other camera is refused (counted in /diagnostics, and "
              "named in the reason of a request left without that camera). The server's "
              "frame memory is at most this times the robots on the allowlist",
              2**20, 2**36),
    ParamSpec("max_observation_age_s", 0.5, "oldest usable observation (s)", 0.001, 60.0),
    ParamSpec("observation_wait_s", 0.2, "a request without a usable camera frame or joint "
              "state waits this long for one (frames delivered late, e.g. after a stall or "
              "on a loaded machine) before it is answered REJECTED; the wait counts in its "
              "budget (s; 0: answer at once)", 0.0, 10.0),
    ParamSpec("max_clock_skew_s", 0.05, "clock difference between robots and server "
              "believed when a request's age is measured from its stamp (s; statistics "
              "request_age_*, stamp_attainment: a stamp further in the future, or over an "
              "hour old, counts as unusable)", 0.0, 60.0),
    ParamSpec("max_budget_ms", DEFAULT_MAX_BUDGET * MS_PER_S, "largest accepted budget (ms)", 1.0,
              MAX_BUDGET * MS_PER_S),
    ParamSpec("max_live_requests", MAX_LIVE_REQUESTS,
              "requests held at once (backpressure bound)", 1, 4096),
    ParamSpec("stats_window_s", 10.0, "window of fleet statistics (s)", 0.5, 3600.0),
    ParamSpec("robot_timeout_s", 0.8, "a robot silent this long is dropped (s)", 0.05, 60.0),
    ParamSpec("camera_resubscribe_s", 2.0, "a camera without a frame this long while its "
              "robot's other messages arrive is subscribed to afresh, with a warning, again "
              "each time it stays silent this long (s; 0: never; else at least 0.5 and "
              "longer than the slowest camera's frame period): a try at a transport reader "
              "that stopped delivering after a stall, which a fresh one does not always cure",
              0.0, 3600.0,
              check=lambda v: None if v == 0.0 or v >= 0.5 else "must be 0 (off) or >= 0.5"),
    ParamSpec("diagnostics.stale_after_s", 2.0, "a robot silent this long is STALE in "
              "/diagnostics (s)", 0.1, 3600.0),
    ParamSpec("diagnostics.error_threshold", 3, "this many rejected or failed requests in "
              "the statistics window make a robot ERROR in /diagnostics", 1, 1_000_000),
    ParamSpec("diagnostics.attainment_target", ATTAINMENT_TARGET, "attainment below this "
              "makes a robot WARN in /diagnostics", 0.0, 1.0),
    ParamSpec("allow_set_policy", False, "serve ~/set_policy (true: any node on the ROS "
              "graph may switch the fleet's scheduling policy; false: fixed at start-up)"),
    ParamSpec("fast_path", True,
              "run a request that finds the engine idle through its stages back to back on "
              "one thread, without the dispatcher's hand-offs (CPU backends)"),
    ParamSpec("shed_doomed", False,
              "also shed a waiting request as soon as its predicted answer at the present "
              "load is past its deadline, before its early stages slow requests that can "
              "still be on time (for a device far past saturation, e.g. a GPU fleet)"),
    ParamSpec("phase_spread", False,
              "hold responses later than T_E, within their deadline, so robots' next sends "
              "spread over the period"),
    ParamSpec("phase_spread_margin_ms", PHASE_SPREAD_MARGIN * 1e3,
              "a held response leaves at least this long before its deadline (ms)",
              0.0, 1000.0),
    EXECUTOR_PARAM,
]

#: The openpi endpoint beside ROS (nodes/openpi_bridge.py); the same node's parameters.
OPENPI_PARAMS = [
    ParamSpec("openpi_port", 0, "openpi WebSocket port (0: endpoint off)", 0, 65535),
    ParamSpec("openpi_host", "127.0.0.1", "openpi bind address"),
    ParamSpec("openpi_layout", "auto", "observation layout with its openpi transforms: auto, "
              "a built-in (libero, aloha, pi0_aloha_sim, ...) or a file"),
    ParamSpec("openpi_budget_ms", DEFAULT_BUDGET * MS_PER_S,
              "budget of openpi requests without one (ms)", 1.0, MAX_BUDGET * MS_PER_S),
    ParamSpec("openpi_api_key_file", "", "file holding the required Api-Key (empty: "
              "$XINFER_OPENPI_API_KEY, else no key); never the key itself"),
    ParamSpec("openpi_allow", "", "comma-separated openpi robot ids (empty: any)"),
    ParamSpec("openpi_max_message_bytes", 16 * 1024 * 1024, "largest openpi message",
              1024, 1 << 30),
    ParamSpec("openpi_max_connections", 64, "concurrent openpi connections (more get HTTP "
              "503)", 1, 4096),
    ParamSpec("openpi_idle_timeout_s", 60.0, "close an openpi connection without a complete "
              "message for this long (s; 0: never)", 0.0, 86400.0),
    ParamSpec("openpi_rate_limit_hz", 100.0, "messages per second one openpi connection may "
              "send", 0.1, 100000.0),
    ParamSpec("openpi_rate_limit_mib_s", 64.0, "message MiB per second one openpi "
              "connection may send", 0.1, 1e6),
]


#: The node whose section of a parameter file holds these parameters.
SERVER_NODE = "inference_server"


def read_server_params(path: str | Path) -> Params:
    """The server's parameters from a ROS parameter file, validated as the node would.

    Every parameter of :data:`PARAMS` and :data:`OPENPI_PARAMS`: the file's value
    (``inference_server`` and ``/**`` sections) where it gives one, else the default.

    Raises:
        ValueError: On an unreadable file, an unknown parameter (a typo is never
            ignored), a wrong type or an invalid value; one line naming the file.
    """
    return resolve_params([*PARAMS, *OPENPI_PARAMS], read_param_file(path, SERVER_NODE),
                          str(path))
