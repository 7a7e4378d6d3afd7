"""Paper defaults (DESIGN §5, paper App. C.1): the one source of truth for constants.

All times in ``xinfer_ros.core`` are **seconds** (float). The paper quotes
milliseconds; the ``_MS`` comments give the paper's figure.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ACTION_DIM",
    "ALTERNATING_BUDGETS",
    "ARRIVAL_WINDOW",
    "ATTAINMENT_TARGET",
    "CAMERAS",
    "COMMIT_LENGTH",
    "DEFAULT_BOUNDS",
    "DEFAULT_BUDGET",
    "DEFAULT_EDF_LIMITS",
    "DEFAULT_MAX_BUDGET",
    "DEFAULT_SLACK_GATE_LIMITS",
    "DEFAULT_SLOTS",
    "DELTA",
    "DENOISE_STEPS",
    "FRONTEND_RESERVE",
    "HORIZON",
    "H_OUT",
    "H_STAGE",
    "KEYFRAME_SPACING",
    "LINK_DELAY",
    "MAX_BUDGET",
    "MAX_LIVE_REQUESTS",
    "MEASUREMENT_WINDOW",
    "MULTI_BUDGETS",
    "PHASE_LENGTH",
    "POLICY_TICK",
    "RATE_TABLE_SCHEMA_VERSION",
    "RUN_DURATION",
    "SEND_PERIOD",
    "SLACK_GATE_THRESHOLD",
    "STATE_DIM",
    "W_STAGE",
]

#: δ: time reserved outside the server; deadline ℓ_j = a_j + b_j − δ (4 ms).
DELTA: Final[float] = 4.0e-3
#: f: front-end reserve added only for forecast arrivals (8.5 ms).
FRONTEND_RESERVE: Final[float] = 8.5e-3
#: P: rolling window of the arrival forecaster (180 ms).
ARRIVAL_WINDOW: Final[float] = 0.180
#: T_E: minimum send interval of a robot (Eq. 1) (180 ms).
SEND_PERIOD: Final[float] = 0.180
#: Δ: keyframe spacing (30 ms).
KEYFRAME_SPACING: Final[float] = 0.030
#: H: keyframes per action chunk.
HORIZON: Final[int] = 16
#: d: RTC commit length (keyframes frozen from the previous chunk).
COMMIT_LENGTH: Final[int] = 8
#: K: flow-matching denoising steps per Action unit.
DENOISE_STEPS: Final[int] = 10
#: Camera views per request.
CAMERAS: Final[int] = 3
#: D: joints of the paper's robots (a dual 7-joint arm), actions and state alike.
ACTION_DIM: Final[int] = 14
STATE_DIM: Final[int] = ACTION_DIM
#: One-way transport between a robot and the server in the closed-loop drivers; the
#: two links together are the reserve δ.
LINK_DELAY: Final[float] = DELTA / 2
#: Period of policy ticks while ready work waits, so shrinking slack is noticed (2 ms).
POLICY_TICK: Final[float] = 2.0e-3
#: Requests a server holds at once before it sheds (backpressure bound).
MAX_LIVE_REQUESTS: Final[int] = 64
#: No response budget is longer (s): a larger one is a unit mistake (ms taken for s).
MAX_BUDGET: Final[float] = 3600.0
#: The largest budget a server accepts unless configured otherwise (s).
DEFAULT_MAX_BUDGET: Final[float] = 10.0
#: Budget of a request that names none (openpi clients): one send period, the latest a
#: response can come without slowing the robot's Eq. 1 cadence (s).
DEFAULT_BUDGET: Final[float] = SEND_PERIOD
#: Run length and measurement window of a round: warm-up 30 s, measured [30, 210) s.
RUN_DURATION: Final[float] = 210.0
MEASUREMENT_WINDOW: Final[tuple[float, float]] = (30.0, RUN_DURATION)

#: (W_V, W_P, W_A): calibrated isolated stage work (4.328931, 8.907749, 12.116308 ms).
W_STAGE: Final[tuple[float, float, float]] = (4.328931e-3, 8.907749e-3, 12.116308e-3)
#: (h_V, h_P, h_A): stage-issue overheads (2.1, 0.25, 1.1 ms); h_A includes KV copying.
H_STAGE: Final[tuple[float, float, float]] = (2.1e-3, 0.25e-3, 1.1e-3)
#: h_out: output processing after Action (1.2 ms).
H_OUT: Final[float] = 1.2e-3

#: SLO attainment a fleet must reach (ERC's acceptance criterion with heterogeneous
#: budgets; the server's diagnostics warn below it).
ATTAINMENT_TARGET: Final[float] = 0.95

#: Alternating task phases workload (§6.3): budgets cycled every PHASE_LENGTH responses.
ALTERNATING_BUDGETS: Final[tuple[float, float]] = (0.090, 0.400)
PHASE_LENGTH: Final[int] = 30
#: Multi-budget workload (§6.3): each robot cycles through these budgets.
MULTI_BUDGETS: Final[tuple[float, ...]] = (0.080, 0.120, 0.160, 0.250, 0.400)

#: Slack-Gate's threshold, chosen from {20, 40, 80} ms jointly with its ViT concurrency
#: by the paper's protocol (App. C.4) on the default rate table: ``xinfer-sim tune
#: --policy slack_gate`` selects 20 ms (the paper's GPU gave 40 ms).
SLACK_GATE_THRESHOLD: Final[float] = 0.020
#: Slack-Gate's per-stage concurrency limits (V, P, A) from the same selection (ViT
#: tuned, Prefill and Action at their slots).
DEFAULT_SLACK_GATE_LIMITS: Final[tuple[int, int, int]] = (3, 4, 6)

#: Calibrated lookup bounds c = (c_V, c_P, c_A) of the default rate table. Not given in
#: the paper; 5 x 5 x 7 = 175 vectors, close to its 167 calibrated combinations.
DEFAULT_BOUNDS: Final[tuple[int, int, int]] = (4, 4, 6)
#: Physical execution slots per stage (V, P, A) when a driver passes none.
DEFAULT_SLOTS: Final[tuple[int, int, int]] = (4, 4, 6)
#: EDF's fixed per-stage concurrency limits when none are given: the smallest limits
#: keeping the best attainment on phases at 15 robots (App. C.4), as ``xinfer-sim tune
#: --policy edf`` selects them on the default rate table. The paper does not publish
#: its values.
DEFAULT_EDF_LIMITS: Final[tuple[int, int, int]] = (3, 1, 2)

#: Version of the rate-table JSON schema written and read by ``rate_table``.
RATE_TABLE_SCHEMA_VERSION: Final[int] = 1
