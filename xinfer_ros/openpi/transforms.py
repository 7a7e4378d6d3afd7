"""openpi's data transforms of a layout, stated as data and run on both request paths.

An openpi checkpoint was trained behind its training config's *data transforms*, which
sit between the robot's frame and the model's: nothing in a converted checkpoint
directory records them, so every openpi layout states them (:class:`OpenPITransforms`)
and the endpoint runs them on each request and each reply. What they follow in openpi
(``src/openpi``; our own code, same formulas):

``adapt_to_pi`` (``policies/aloha_policy.py``: ``AlohaInputs``/``AlohaOutputs`` with
``adapt_to_pi=True``)
    ALOHA's joint and gripper conventions differ from those π0 was pre-trained in.
    Requests: the 14-value state is multiplied by the joint flip mask
    ``[1,-1,-1,1,1,1,1, 1,-1,-1,1,1,1,1]`` and its grippers (6, 13) are mapped from
    ALOHA's linear gripper position to π0's normalised angle (``_gripper_to_angular``:
    un-normalise to metres in [0.01844, 0.05800], invert the Interbotix horn linkage
    with ``asin((h² + x² − a²) / (2 h x))``, a = 0.036, h = 0.022, normalise the angle
    over [0.5476, 1.6296]). Replies: the actions are flipped with the same mask and
    their grippers mapped with ``_gripper_from_angular`` (``(v + 0.5476 + 0.6213) /
    (1.4910 + 0.6213)``).
``delta_action_mask`` (``transforms.DeltaActions``/``AbsoluteActions``)
    The model predicts ``action − state`` on the masked dimensions (training ran
    ``DeltaActions``); a reply adds the state (in the model's frame, i.e. after
    ``adapt_to_pi``) back, after unnormalisation and before ``adapt_to_pi``'s output
    step, as openpi's output pipeline orders them. openpi's ``pi0_aloha`` configs use
    ``make_bool_mask(6, -1, 6, -1)``; ``pi0_libero`` (``extra_delta_transform=True``)
    ``make_bool_mask(6, -1)``; ``pi0_aloha_sim`` and ``pi05_libero`` none.
``clean_prompt`` (``models/tokenizer.py``: ``PaligemmaTokenizer.tokenize``)
    The instruction is stripped and ``_`` and newlines become spaces before it is
    tokenised, as openpi's tokenizer does.

A previous chunk for real-time chunking arrives in the robot's frame; it is taken to
the model's frame by the exact inverse of the reply path (``_gripper_from_angular``
inverted, flips, ``DeltaActions`` against this request's state), so guidance compares
like with like and the frozen keyframes come back bit-for-bit up to rounding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import numpy.typing as npt

from xinfer_ros.openpi.errors import LayoutSettingError

__all__ = [
    "ALOHA_DIM",
    "ALOHA_GRIPPERS",
    "IDENTITY_TRANSFORMS",
    "TRANSFORM_KEYS",
    "OpenPITransforms",
    "TransformsFile",
    "clean_prompt",
    "gripper_from_angular",
    "gripper_from_angular_inv",
    "gripper_to_angular",
    "joint_flip_mask",
]

#: A float64 vector or chunk (states, actions).
FloatArray = npt.NDArray[np.float64]


class TransformsFile(TypedDict):
    """A layout file's ``transforms`` mapping (:meth:`OpenPITransforms.from_dict`)."""

    adapt_to_pi: bool
    #: One flag per action dimension; ``[]`` or null: absolute actions.
    delta_action_mask: list[bool] | None
    clean_prompt: bool


#: Every key of a layout's ``transforms`` mapping; each one must be stated.
TRANSFORM_KEYS: tuple[str, ...] = ("adapt_to_pi", "delta_action_mask", "clean_prompt")

#: ALOHA's state and action width, and its gripper dimensions (left, right).
ALOHA_DIM = 14
ALOHA_GRIPPERS = (6, 13)

# ALOHA constants as openpi's aloha_policy states them (Interbotix and ALOHA code).
_GRIPPER_LINEAR = (0.01844, 0.05800)  # PUPPET_GRIPPER_POSITION_OPEN / _CLOSED (m)
_ARM_LENGTH, _HORN_RADIUS = 0.036, 0.022
_PI_GRIPPER_ANGLE = (0.5476, 1.6296)  # π0's gripper encoder range, in radians
_GRIPPER_JOINT = (-0.6213, 1.4910)  # PUPPET_GRIPPER_JOINT_OPEN / _CLOSE


def joint_flip_mask() -> FloatArray:
    """ALOHA ↔ π0 joint sign flips, per dimension of the 14-value state or action."""
    return np.array([1, -1, -1, 1, 1, 1, 1, 1, -1, -1, 1, 1, 1, 1], dtype=np.float64)


def _to_unit(x: FloatArray, low: float, high: float) -> FloatArray:
    return (x - low) / (high - low)


def _from_unit(x: FloatArray, low: float, high: float) -> FloatArray:
    return x * (high - low) + low


def gripper_to_angular(value: FloatArray) -> FloatArray:
    """ALOHA's normalised linear gripper position → π0's normalised gripper angle."""
    linear = _from_unit(value, *_GRIPPER_LINEAR)
    cos_arg = (_HORN_RADIUS**2 + linear**2 - _ARM_LENGTH**2) / (2.0 * _HORN_RADIUS * linear)
    angle = np.arcsin(np.clip(cos_arg, -1.0, 1.0))
    return _to_unit(angle, *_PI_GRIPPER_ANGLE)


def gripper_from_angular(value: FloatArray) -> FloatArray:
    """π0's gripper action → ALOHA's normalised gripper joint command."""
    return _to_unit(value + _PI_GRIPPER_ANGLE[0], *_GRIPPER_JOINT)


def gripper_from_angular_inv(value: FloatArray) -> FloatArray:
    """The exact inverse of :func:`gripper_from_angular` (ALOHA command → π0 action)."""
    return _from_unit(value, *_GRIPPER_JOINT) - _PI_GRIPPER_ANGLE[0]


def clean_prompt(prompt: str) -> str:
    """The instruction as openpi cleans it: stripped; ``_`` and newlines become spaces."""
    return prompt.strip().replace("_", " ").replace("\n", " ")


def _flag(data: Mapping[str, object], key: str) -> bool:
    value = data[key]
    if not isinstance(value, bool):
        raise LayoutSettingError(f"transforms.{key}", f"expected true or false, got "
                                                         f"{value!r}")
    return value


def _mask(value: object) -> tuple[bool, ...]:
    field = "transforms.delta_action_mask"
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, bool) for v in value):
        raise LayoutSettingError(field, f"expected a list of true/false per action "
                                           f"dimension ([] or null: none), got {value!r}")
    return tuple(value)


@dataclass(frozen=True)
class OpenPITransforms:
    """The data transforms of one openpi layout (see the module docstring).

    Attributes:
        adapt_to_pi: ALOHA ↔ π0 joint flips and gripper conversion (14 dimensions).
        delta_action_mask: Per action dimension, whether the model predicts it
            relative to the state (empty: absolute actions throughout).
        clean_prompt: Apply openpi's prompt cleaning before tokenising.
    """

    adapt_to_pi: bool
    delta_action_mask: tuple[bool, ...]
    clean_prompt: bool

    @classmethod
    def from_dict(cls, data: object) -> OpenPITransforms:
        """Build from a layout file's ``transforms`` mapping; every key must be stated.

        Raises:
            LayoutSettingError: On a missing, unknown or malformed key.
        """
        if not isinstance(data, Mapping):
            raise LayoutSettingError("transforms", f"required: a mapping with "
                                                      f"{list(TRANSFORM_KEYS)}, got {data!r}")
        unknown = sorted(str(k) for k in data if k not in TRANSFORM_KEYS)
        if unknown:
            raise LayoutSettingError(f"transforms.{unknown[0]}",
                                        f"unknown transform; known: {list(TRANSFORM_KEYS)}")
        missing = [k for k in TRANSFORM_KEYS if k not in data]
        if missing:
            raise LayoutSettingError(f"transforms.{missing[0]}",
                                        "missing: every openpi transform must be stated")
        return cls(_flag(data, "adapt_to_pi"), _mask(data["delta_action_mask"]),
                   _flag(data, "clean_prompt"))

    def to_dict(self) -> TransformsFile:
        """msgpack/JSON/YAML-ready form (the layout file's ``transforms`` mapping)."""
        return {"adapt_to_pi": self.adapt_to_pi,
                "delta_action_mask": list(self.delta_action_mask),
                "clean_prompt": self.clean_prompt}

    def check_widths(self, action_dim: int | None, state_dim: int | None = None) -> None:
        """Refuse settings the layout's widths cannot carry (at start-up).

        Raises:
            LayoutSettingError: ``adapt_to_pi`` without 14 action values, or a delta
                mask wider than the actions or the state.
        """
        if self.adapt_to_pi and action_dim != ALOHA_DIM:
            raise LayoutSettingError(
                "transforms.adapt_to_pi", f"ALOHA's conversion needs action_dim "
                                          f"{ALOHA_DIM}, the layout has {action_dim}")
        width = len(self.delta_action_mask)
        for name, dim in (("action_dim", action_dim), ("state_dim", state_dim)):
            if width and dim is not None and width > dim:
                raise LayoutSettingError(
                    "transforms.delta_action_mask",
                    f"{width} entries exceed the layout's {name} {dim}")

    # -- request path ---------------------------------------------------------------------
    def state_in(self, state: FloatArray) -> FloatArray:
        """The robot's state in the model's frame (``AlohaInputs``' state step)."""
        out = np.array(state, dtype=np.float64)
        if self.adapt_to_pi:
            head = out[:ALOHA_DIM] * joint_flip_mask()
            grip = list(ALOHA_GRIPPERS)
            head[grip] = gripper_to_angular(head[grip])
            out[:ALOHA_DIM] = head
        return out

    def prompt_in(self, prompt: str) -> str:
        """The instruction as the checkpoint's tokenizer saw it in training."""
        return clean_prompt(prompt) if self.clean_prompt else prompt

    def actions_in(self, actions: FloatArray, model_state: FloatArray) -> FloatArray:
        """A chunk in the robot's frame → the model's frame (inverse of :meth:`actions_out`).

        Args:
            actions: ``(H, D_out)`` in the robot's frame (the columns the client uses).
            model_state: This request's state after :meth:`state_in`.
        """
        out = np.array(actions, dtype=np.float64)
        if self.adapt_to_pi:
            head = out[:, :ALOHA_DIM] * joint_flip_mask()
            grip = list(ALOHA_GRIPPERS)
            head[:, grip] = gripper_from_angular_inv(head[:, grip])
            out[:, :ALOHA_DIM] = head
        return out - self._delta(out.shape[1], model_state)

    # -- reply path -----------------------------------------------------------------------
    def actions_out(self, actions: FloatArray, model_state: FloatArray,
                    out_dim: int) -> FloatArray:
        """The model's unnormalised chunk → the robot's frame, ``(H, out_dim)``.

        openpi's order: ``AbsoluteActions`` on the model's width, then the layout's
        output slice and ``AlohaOutputs``' conversion.
        """
        out = np.array(actions, dtype=np.float64)
        out = (out + self._delta(out.shape[1], model_state))[:, :out_dim]
        if self.adapt_to_pi:
            head = out[:, :ALOHA_DIM] * joint_flip_mask()
            grip = list(ALOHA_GRIPPERS)
            head[:, grip] = gripper_from_angular(head[:, grip])
            out[:, :ALOHA_DIM] = head
        return out

    def _delta(self, width: int, model_state: FloatArray) -> FloatArray:
        """The per-dimension offset ``state`` on the mask, 0 elsewhere, ``(width,)``."""
        offset = np.zeros(width, dtype=np.float64)
        n = min(len(self.delta_action_mask), width)
        mask = np.asarray(self.delta_action_mask[:n], dtype=bool)
        offset[:n] = np.where(mask, np.asarray(model_state, dtype=np.float64)[:n], 0.0)
        return offset

    def describe(self) -> str:
        """One line for start-up logs."""
        mask = self.delta_action_mask
        delta = (f"delta on dims {[i for i, m in enumerate(mask) if m]}" if any(mask)
                 else "absolute actions")
        return (f"adapt_to_pi={'on' if self.adapt_to_pi else 'off'}, {delta}, "
                f"prompt cleaning {'on' if self.clean_prompt else 'off'}")


#: No transform at all (still stated: a layout file writes it out key by key).
IDENTITY_TRANSFORMS = OpenPITransforms(adapt_to_pi=False, delta_action_mask=(),
                                       clean_prompt=False)
