"""The request front end both servers share: chunking fields and the engine's inputs.

The ROS server (a ``PolicyRequest`` with a flat ``prev_chunk``) and the openpi endpoint
(an ``xinfer/prev_chunk`` array in a msgpack observation) accept the same request
fields; they validate them here, with the model layer's field-naming errors, and build
the one :class:`~xinfer_ros.model.inputs.RequestInputs` the engine's backends read. The
model checks the chunk against its own horizon again when it aligns it; these checks
answer the robot before any engine work is queued.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xinfer_ros.core.constants import COMMIT_LENGTH
from xinfer_ros.model.errors import ChunkShapeError, CommitLengthError, ImageError, InputError
from xinfer_ros.model.images import fit_image
from xinfer_ros.model.inputs import RequestInputs

__all__ = ["FlatChunk", "Observe", "camera_image", "commit_steps", "engine_inputs", "flat_chunk",
           "prev_shift", "previous_chunk", "request_inputs", "robot_state"]


@dataclass(frozen=True, slots=True)
class FlatChunk:
    """A previous chunk as a flat message carries it: values row by row and its shape.

    Attributes:
        values: The aligned previous chunk, row by row (row 0 at the send tick).
        horizon: Its rows.
        action_dim: Its columns.
        shift: ``s``, keyframes of the previous chunk executed by the send tick: its
            rows from ``horizon - s`` on are padding (``PolicyRequest.prev_shift``).
    """

    values: Sequence[float]
    horizon: int
    action_dim: int
    shift: int = 0


def previous_chunk(values: Any, horizon: int, action_dim: int, *,
                   columns: int | None = None, field: str = "prev_chunk") -> np.ndarray:
    """The robot's previous chunk as a finite ``(H, D)`` float64 array.

    Args:
        values: A 2-D array-like of the chunk.
        horizon: The model's H.
        action_dim: The model's D.
        columns: Fewer columns the client's layout uses, if any; such a chunk is
            zero-padded to D here, and :func:`engine_inputs` (``prev_dims``) tells the
            model to zero the padding in normalised units, where π0 was trained with
            zeros on padded dimensions.
        field: The request field named in errors.

    Raises:
        ChunkShapeError: When ``values`` is not numeric, has another shape or holds
            NaN or Inf.
    """
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ChunkShapeError(field, f"not a numeric array: {exc}") from exc
    widths = {action_dim} if columns is None else {action_dim, columns}
    if arr.ndim != 2 or arr.shape[0] != horizon or arr.shape[1] not in widths:
        want = " or ".join(f"({horizon}, {w})" for w in sorted(widths, reverse=True))
        raise ChunkShapeError(field, f"expected shape {want}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ChunkShapeError(field, "contains NaN or Inf")
    if arr.shape[1] == action_dim:
        return arr
    full = np.zeros((horizon, action_dim), dtype=np.float64)
    full[:, :arr.shape[1]] = arr
    return full


def flat_chunk(chunk: FlatChunk, horizon: int, action_dim: int) -> np.ndarray | None:
    """The previous chunk of a flat layout (``PolicyRequest.prev_chunk``); None if empty.

    Raises:
        ChunkShapeError: When the values do not fill the stated shape, or the chunk
            fails :func:`previous_chunk`.
    """
    if not len(chunk.values):
        return None
    rows, cols = chunk.horizon, chunk.action_dim
    if len(chunk.values) != rows * cols:
        raise ChunkShapeError("prev_chunk", f"{len(chunk.values)} values do not fill "
                                            f"prev_horizon x prev_action_dim {rows}x{cols}")
    return previous_chunk(np.asarray(chunk.values).reshape(rows, cols), horizon, action_dim)


def robot_state(positions: Sequence[float]) -> np.ndarray:
    """The joint positions as a finite float64 vector.

    Raises:
        InputError: When a position is NaN or Inf.
    """
    state = np.asarray(positions, dtype=np.float64)
    if not np.all(np.isfinite(state)):
        raise InputError("joint_states", "position contains NaN or Inf")
    return state


#: ``observe() -> (images, joint positions)``: the observation a request picks.
Observe = Callable[[], tuple[Sequence["np.ndarray | None"], Sequence[float]]]


def request_inputs(robot: str, claimed_robot: str, instruction: str, observe: Observe, *,
                   prev: FlatChunk, commit: int | None, action_shape: tuple[int, int],
                   seed: int) -> RequestInputs:
    """Validate a ROS-style request against the model and build the engine's inputs.

    The request's own fields are checked first; only a request that passes has its
    observation picked and decoded (``observe``), so a malformed request costs no image
    work and is refused for what is wrong with it, not for its observation's age.

    Args:
        robot: The robot the request came from (its namespace).
        claimed_robot: The id the request names itself, or "" for none.
        instruction: The language instruction.
        observe: Picks the observation: the decoded frames, one per camera at the
            model's sizes, and the joint positions in the model's order. Its own
            errors pass through.
        prev: The robot's previous chunk (empty values: none).
        commit: Its commit length d, or None for the paper's.
        action_shape: The model's (H, D).
        seed: The request's noise seed.

    Raises:
        InputError: A robot id that is not the sender's, or a non-finite state.
        ChunkShapeError: A previous chunk of another shape, or with NaN or Inf.
        CommitLengthError: A commit length outside ``[0, H]``.
    """
    if claimed_robot and claimed_robot != robot:
        raise InputError("robot_id", f"{claimed_robot!r} does not match namespace /{robot}")
    horizon, dim = action_shape
    d = commit_steps(commit, horizon)
    prev_chunk = flat_chunk(prev, horizon, dim)
    shift = prev_shift(prev.shift, horizon) if prev_chunk is not None else 0
    images, positions = observe()
    return engine_inputs(images, instruction, robot_state(positions), prev_chunk=prev_chunk,
                         commit=d, seed=seed, shift=shift)


def commit_steps(value: int | None, horizon: int, *, field: str = "commit_steps") -> int:
    """The commit length d for a request with a previous chunk (default: the paper's d).

    Raises:
        CommitLengthError: When ``value`` lies outside ``[0, horizon]``.
    """
    if value is None:
        return min(COMMIT_LENGTH, horizon)
    if not 0 <= value <= horizon:
        raise CommitLengthError(field, f"{value} outside [0, {horizon}]")
    return int(value)


def prev_shift(value: int | None, horizon: int, *, field: str = "prev_shift") -> int:
    """The request's shift ``s`` (0 when not given: every row of the chunk is real).

    Raises:
        CommitLengthError: When ``value`` lies outside ``[0, horizon]``.
    """
    if value is None:
        return 0
    if not 0 <= value <= horizon:
        raise CommitLengthError(field, f"{value} outside [0, {horizon}]")
    return int(value)


def engine_inputs(images: Sequence[np.ndarray | None], instruction: str, state: np.ndarray, *,
                  prev_chunk: np.ndarray | None, commit: int, seed: int,
                  shift: int = 0, prev_dims: int | None = None) -> RequestInputs:
    """The inputs every backend's ``prepare`` reads.

    A camera the client masked out is None. Without a previous chunk nothing is
    committed (d = 0).

    Requests carry the previous chunk *aligned* (row 0 at the send tick) with its
    shift ``s`` (RTC paper Eq. 5): only rows ``< H − s`` are the previous chunk, the
    rest repeat its last command. The models take the previous chunk on its own time
    axis with ``prev_shift`` and align it themselves, so it is put back there: row
    ``i`` of the request becomes row ``i + s``, and the guidance mask covers exactly
    the ``H − s`` real rows (Eq. 5; no weight on padding). The committed prefix is the
    exception: its ``d`` keyframes execute while the new chunk is computed, so when the
    robot holds its last command there (``H − s < d``) they stay pinned to it and
    ``s`` is capped at ``H − d``.

    ``prev_dims``: the previous chunk's real leading columns when a client sent fewer
    than the model's D (the rest is padding: the model zeroes it after normalising,
    so guidance does not pull those dimensions to ``−mean / std``).
    """
    if prev_chunk is None:
        return RequestInputs(images=tuple(images), instruction=instruction, state=state,
                             seed=seed)
    s, own = 0, prev_chunk
    if shift:
        horizon = len(prev_chunk)
        s = min(shift, horizon - commit)
        own = np.empty_like(prev_chunk)
        own[s:] = prev_chunk[:horizon - s]
        own[:s] = prev_chunk[0]  # executed already: the models drop these rows
    dims = prev_dims if prev_dims is not None and prev_dims < prev_chunk.shape[1] else None
    return RequestInputs(images=tuple(images), instruction=instruction, state=state,
                         prev_chunk=own, commit=commit, prev_shift=s, prev_dims=dims,
                         seed=seed)


def camera_image(rgb: np.ndarray, camera: int, size: tuple[int, int], *, strict: bool,
                 resizes: bool) -> np.ndarray:
    """An RGB frame at a size the model takes.

    Args:
        rgb: The decoded ``(height, width, 3)`` frame.
        camera: Its camera index (named in errors).
        size: The camera's model input ``(height, width)``.
        strict: Refuse a frame of another size instead of fitting it.
        resizes: The model resizes frames itself (π0): passed on as it is.

    Raises:
        ImageError: A frame of another size under ``strict``.
    """
    height, width = rgb.shape[:2]
    if (height, width) == size:
        return rgb
    if strict:
        raise ImageError(f"camera_{camera}", f"image is {width}x{height}; the model takes "
                                             f"{size[1]}x{size[0]} (strict_image_size)")
    return rgb if resizes else fit_image(rgb, *size)
