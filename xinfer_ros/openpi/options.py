"""Per-request XInfer fields an openpi observation may carry, beside the layout's keys.

openpi's protocol has no notion of a response-time budget, a robot identity or
real-time chunking, so they travel as extra observation keys in an ``xinfer/``
namespace (openpi policies ignore keys their input transforms do not read). Each may
be a flat key (``"xinfer/budget_ms"``) or nested (``{"xinfer": {"budget_ms": ...}}``).

=========================  =======================  =========================================
key                        type                     meaning (default when absent)
=========================  =======================  =========================================
``xinfer/robot_id``        str                      robot identity of the connection; only
                                                    in the first observation or unchanged
                                                    (the URL path, else ``openpi-<n>``)
``xinfer/budget_ms``       float > 0                response-time budget b_j in ms
                                                    (the server's ``--budget-ms``)
``xinfer/prev_chunk``      (H, D) or (H, D_out)     previous chunk for real-time chunking
                           float array              (none: no RTC); D_out-wide chunks (a
                                                    layout's reply width) are zero-padded
``xinfer/commit_steps``    int in [0, H]            keyframes of ``prev_chunk`` frozen, d
                                                    (8, capped at H; 0 without prev_chunk)
``xinfer/prev_shift``      int in [0, H]            s of RTC's Eq. 5: keyframes of the
                                                    previous chunk executed by now; its
                                                    rows from H − s on are padding and get
                                                    no guidance (0: every row is planned)
``xinfer/seed``            int                      flow-matching noise seed (a per-
                                                    connection counter)
=========================  =======================  =========================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from xinfer_ros.core.errors import BudgetError
from xinfer_ros.core.timing import budget_seconds
from xinfer_ros.model.errors import InputError
from xinfer_ros.openpi.errors import ObservationFieldError
from xinfer_ros.openpi.layouts import MISSING, Observation, lookup
from xinfer_ros.serving.frontend import commit_steps, prev_shift, previous_chunk

__all__ = [
    "KEY_BUDGET",
    "KEY_COMMIT",
    "KEY_PREV_CHUNK",
    "KEY_PREV_SHIFT",
    "KEY_ROBOT_ID",
    "KEY_SEED",
    "XINFER_KEYS",
    "RequestOptions",
    "parse_options",
    "valid_robot_id",
]

KEY_ROBOT_ID = "xinfer/robot_id"
KEY_BUDGET = "xinfer/budget_ms"
KEY_PREV_CHUNK = "xinfer/prev_chunk"
KEY_COMMIT = "xinfer/commit_steps"
KEY_PREV_SHIFT = "xinfer/prev_shift"
KEY_SEED = "xinfer/seed"
#: Every key this module reads (reported in the connection metadata).
XINFER_KEYS: tuple[str, ...] = (KEY_ROBOT_ID, KEY_BUDGET, KEY_PREV_CHUNK, KEY_COMMIT,
                                KEY_PREV_SHIFT, KEY_SEED)

#: Robot ids become engine keys and log fields: keep them short and printable.
_MAX_ID_CHARS = 64


@dataclass(frozen=True)
class RequestOptions:
    """The XInfer fields of one observation, validated.

    Attributes:
        robot_id: requested identity, or None.
        budget: the request's budget (s; ``xinfer/budget_ms`` converted once, here).
        budget_ms: the budget as the client sent it (ms), echoed in the response.
        prev_chunk: ``(H, D)`` float64 previous chunk, or None.
        commit_steps: frozen keyframes d (0 without ``prev_chunk``).
        seed: noise seed, or None for the server's counter.
        prev_shift: s of the previous chunk (0 without ``prev_chunk``).
    """

    robot_id: str | None
    budget: float
    budget_ms: float
    prev_chunk: np.ndarray | None
    commit_steps: int
    seed: int | None
    prev_shift: int = 0


def valid_robot_id(value: object) -> str | None:
    """Why ``value`` is not a usable robot id, or None when it is."""
    if not isinstance(value, str) or not value:
        return f"expected a non-empty string, got {value!r}"
    if len(value) > _MAX_ID_CHARS:
        return f"longer than {_MAX_ID_CHARS} characters"
    if not all(c.isalnum() or c in "_-." for c in value):
        return f"{value!r} may contain only letters, digits, '_', '-' and '.'"
    return None


def _budget(obs: Observation, default_ms: float, max_ms: float) -> tuple[float, float]:
    """The budget in seconds and as sent (ms): the key's, else the default."""
    raw = lookup(obs, KEY_BUDGET)
    sent = default_ms if raw is MISSING else raw
    try:
        return budget_seconds(sent, max_ms), float(cast(float, sent))  # a number: accepted
    except BudgetError as exc:
        raise ObservationFieldError(KEY_BUDGET, exc.detail) from None


def _prev_chunk(obs: Observation, horizon: int, dim: int,
                out_dim: int) -> np.ndarray | None:
    raw = lookup(obs, KEY_PREV_CHUNK)
    if raw is MISSING or raw is None:
        return None
    return previous_chunk(raw, horizon, dim, columns=out_dim, field=KEY_PREV_CHUNK)


def _int(obs: Observation, key: str) -> int | None:
    raw = lookup(obs, key)
    if raw is MISSING or raw is None:
        return None
    if isinstance(raw, (bool, np.bool_)) or not isinstance(raw, (int, np.integer)):
        raise ObservationFieldError(key, f"expected an integer, got {raw!r}")
    return int(raw)


def parse_options(obs: Observation, *, default_budget_ms: float, max_budget_ms: float,
                  horizon: int, action_dim: int, out_dim: int) -> RequestOptions:
    """Validate the ``xinfer/*`` fields of ``obs``.

    Args:
        obs: the decoded observation.
        default_budget_ms: budget when the observation carries none.
        max_budget_ms: largest accepted budget.
        horizon: the model's H.
        action_dim: the model's D.
        out_dim: action columns the layout returns (a ``prev_chunk`` may have these).

    Raises:
        ObservationFieldError: naming the malformed field.
    """
    robot = lookup(obs, KEY_ROBOT_ID)
    if robot is MISSING or robot is None:
        robot = None
    else:
        why = valid_robot_id(robot)
        if why is not None:
            raise ObservationFieldError(KEY_ROBOT_ID, why)
    budget, budget_ms = _budget(obs, default_budget_ms, max_budget_ms)
    raw_commit = _int(obs, KEY_COMMIT)  # malformed is refused even without a chunk
    raw_shift = _int(obs, KEY_PREV_SHIFT)
    try:
        prev = _prev_chunk(obs, horizon, action_dim, out_dim)
        commit = commit_steps(raw_commit, horizon, field=KEY_COMMIT) if prev is not None else 0
        shift = prev_shift(raw_shift, horizon, field=KEY_PREV_SHIFT) if prev is not None else 0
    except InputError as exc:
        raise ObservationFieldError(exc.field, str(exc).removeprefix(f"{exc.field}: ")) \
            from None
    seed = _int(obs, KEY_SEED)
    if seed is not None and not 0 <= seed < 2**63:
        raise ObservationFieldError(KEY_SEED, f"{seed} outside [0, 2**63)")
    robot_id = robot if isinstance(robot, str) else None  # valid_robot_id took only str
    return RequestOptions(robot_id, budget, budget_ms, prev, commit, seed, shift)
