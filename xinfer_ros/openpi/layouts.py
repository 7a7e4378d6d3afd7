"""Observation layouts: where an openpi client puts cameras, state and prompt.

openpi clients send a flat or nested dict whose keys depend on the robot family. A
:class:`ObservationLayout` names, per model camera (in the model preset's order), the
observation key that feeds it, plus the state and prompt keys. Built-in layouts:

``libero`` (openpi ``LiberoInputs``/``LiberoOutputs``, config ``pi0_libero``)
    ``observation/image`` → camera 0, ``observation/wrist_image`` → camera 1 (both
    required), ``observation/state`` (8 values), ``prompt``. Replies carry the first 7
    action dimensions, as openpi's ``LiberoOutputs`` does. Transforms: the first 6
    action dimensions are predicted relative to the state (``extra_delta_transform``),
    prompt cleaning. ``pi0_libero`` is the same layout; ``pi05_libero`` has absolute
    actions (no extra delta).
``aloha`` (openpi ``AlohaInputs``/``AlohaOutputs``, config ``pi0_aloha``)
    ``images/cam_high`` → camera 0 (required), ``images/cam_left_wrist`` → camera 1,
    ``images/cam_right_wrist`` → camera 2, ``state`` (14 values), ``prompt``. Images
    may be CHW (as the ALOHA example client sends them) or HWC; ``cam_low`` is
    accepted and unused, as in openpi. Transforms: ``adapt_to_pi`` (joint flips and
    gripper conversion), joints relative to the state (``make_bool_mask(6, -1, 6,
    -1)``), prompt cleaning. ``pi0_aloha`` and ``pi05_aloha`` are the same layout;
    ``pi0_aloha_sim`` has absolute actions.

Every layout states its openpi data transforms (:mod:`xinfer_ros.openpi.transforms`):
a layout file without them, or with a setting this project does not know, is refused
when it is loaded (:class:`~xinfer_ros.openpi.errors.LayoutSettingError`).

A key is looked up literally first (``"observation/image"`` is one flat key in LIBERO
messages) and then as a ``/``-separated path through nested dicts (``images`` →
``cam_high``). Custom layouts load from YAML or JSON (see :meth:`ObservationLayout.
from_dict`).

Conversions, so that any client image fits the model:

* images: HWC or CHW, ``uint8`` or float in ``[0, 1]`` (scaled by 255 like openpi's
  ``convert_to_uint8``), resized to the model camera with OpenCV, by default keeping
  the aspect ratio and padding with black (openpi's ``resize_with_pad``).
* a model camera the layout lacks, or an optional camera the observation lacks, is
  **masked out**. π0 (``pi0``, ``pi0-tiny``, π0 checkpoints) masks it for real: the
  camera is passed as ``None`` and its visual tokens are left out of the prefix, as
  transformers' ``pixel_attention_mask`` does. The reference model has no per-camera
  mask, so it gets an all-zero image whose tokens are still computed. Either way the
  mask is recorded in :attr:`MappedObservation.image_mask` (and returned to the client
  as ``xinfer/image_mask``).
* state: zero-padded to the model's ``state_dim`` (openpi pads state to the model
  width with ``pad_to_dim``); a longer state is an error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeAlias, TypedDict, cast

import numpy as np
import numpy.typing as npt
import yaml

from xinfer_ros.model.images import RESAMPLE_MODES, Resample, ResizeMode, fit_image
from xinfer_ros.openpi.errors import LayoutSettingError, ObservationFieldError
from xinfer_ros.openpi.transforms import ALOHA_DIM, FloatArray, OpenPITransforms, TransformsFile

if TYPE_CHECKING:
    from xinfer_ros.model.presets import ModelIO

__all__ = [
    "ALOHA",
    "ALOHA_ABSOLUTE",
    "BUILTIN_LAYOUTS",
    "LIBERO",
    "LIBERO_ABSOLUTE",
    "MISSING",
    "CameraEntry",
    "CameraSource",
    "LayoutFile",
    "MappedObservation",
    "ModelCamera",
    "ModelSpec",
    "ModelSpecDict",
    "Observation",
    "ObservationLayout",
    "as_observation",
    "check_layout",
    "detect_layout",
    "fit_image",
    "load_layout",
    "lookup",
    "map_observation",
    "to_rgb_uint8",
]

#: Longest accepted prompt (characters); the tokenizer would truncate anyway.
MAX_PROMPT_CHARS = 4096
#: Largest accepted image side (pixels), a bound independent of the message size.
MAX_IMAGE_SIDE = 8192

#: A decoded openpi observation: string keys (``/`` paths into nested maps), values
#: as the client packed them (arrays, numbers, strings, maps); read through
#: :func:`lookup` and checked field by field.
Observation: TypeAlias = Mapping[str, object]


class ModelCamera(TypedDict):
    """One model camera in the connection metadata."""

    name: str
    height: int
    width: int


class ModelSpecDict(TypedDict):
    """:meth:`ModelSpec.to_dict`: what the served model takes and returns."""

    cameras: list[ModelCamera]
    state_dim: int
    action_horizon: int
    action_dim: int


class _CameraKey(TypedDict):
    key: str


class CameraEntry(_CameraKey, total=False):
    """A layout file's camera written as a mapping (``required`` optional on input)."""

    required: bool


class LayoutFile(TypedDict, total=False):
    """A layout file (YAML or JSON; see :meth:`ObservationLayout.from_dict`).

    ``cameras`` and ``state_key`` are required; a camera is a key or a mapping.
    """

    name: str
    cameras: list[str | CameraEntry]
    state_key: str
    prompt_key: str
    state_required: bool
    action_dim: int | None
    resize: ResizeMode
    resample: Resample
    transforms: TransformsFile | None


@dataclass(frozen=True)
class CameraSource:
    """Which observation key feeds one model camera.

    Attributes:
        key: observation key or ``/``-separated path.
        required: a missing image is an error (otherwise the camera is masked out).
    """

    key: str
    required: bool = False


@dataclass(frozen=True)
class ModelSpec:
    """What the served model takes and returns.

    Attributes:
        cameras: ``(name, height, width)`` per model camera, in request order.
        state_dim: state vector length.
        horizon: keyframes per chunk H.
        action_dim: action dimension D.
        masks_missing_cameras: the model masks a missing camera (π0) instead of
            taking a zero image for it.
    """

    cameras: tuple[tuple[str, int, int], ...]
    state_dim: int
    horizon: int
    action_dim: int
    masks_missing_cameras: bool = False

    @classmethod
    def from_io(cls, io: ModelIO) -> ModelSpec:
        """Build from what a backend serves (:attr:`Backend.io`)."""
        return cls(tuple((c.name, c.height, c.width) for c in io.cameras), io.state_dim,
                   io.horizon, io.action_dim, io.masks_missing_cameras)

    @classmethod
    def from_preset(cls, name: str, model_path: str | None = None) -> ModelSpec:
        """Build from a model preset (and π0 checkpoint directory), without weights."""
        from xinfer_ros.model.presets import model_io

        return cls.from_io(model_io(name, model_path))

    def to_dict(self) -> ModelSpecDict:
        """msgpack/JSON-ready form (sent in the connection metadata)."""
        return {"cameras": [{"name": n, "height": h, "width": w} for n, h, w in self.cameras],
                "state_dim": self.state_dim, "action_horizon": self.horizon,
                "action_dim": self.action_dim}


@dataclass(frozen=True)
class ObservationLayout:
    """Mapping of an openpi observation onto the model's inputs.

    Attributes:
        name: layout name (reported to clients).
        cameras: one source per model camera, in the model's order; model cameras
            beyond this list are always masked out, sources beyond the model's cameras
            are ignored.
        state_key: key of the state vector.
        prompt_key: key of the instruction string.
        state_required: a missing state is an error (otherwise zeros).
        action_dim: action columns returned to the client (None: all of the model's).
        resize: ``pad`` keeps the aspect ratio and pads black; ``stretch`` does not.
        transforms: the openpi data transforms the checkpoint was trained behind;
            required (None is refused: nothing in a checkpoint records them).
        resample: image resampling (:data:`~xinfer_ros.model.images.RESAMPLE_MODES`);
            openpi trains with PIL bilinear (``image_tools.resize_with_pad``).
    """

    name: str
    cameras: tuple[CameraSource, ...]
    state_key: str
    prompt_key: str = "prompt"
    state_required: bool = True
    action_dim: int | None = None
    resize: ResizeMode = "pad"
    transforms: OpenPITransforms | None = None
    resample: Resample = "pil_bilinear"

    def __post_init__(self) -> None:
        if self.resample not in RESAMPLE_MODES:
            raise LayoutSettingError("resample", f"must be one of {list(RESAMPLE_MODES)}, "
                                                 f"got {self.resample!r}")
        if self.transforms is None:
            raise LayoutSettingError("transforms", f"layout {self.name!r} states no openpi "
                                                   "transforms")
        self.transforms.check_widths(self.action_dim)
        if not self.cameras:
            raise ValueError(f"layout {self.name!r} names no camera")
        if self.resize not in ("pad", "stretch"):
            raise ValueError(f"layout {self.name!r}: resize must be pad or stretch, "
                             f"got {self.resize!r}")
        if self.action_dim is not None and self.action_dim < 1:
            raise ValueError(f"layout {self.name!r}: action_dim must be >= 1")

    @classmethod
    def from_dict(cls, data: LayoutFile) -> ObservationLayout:
        """Build from a mapping (a YAML or JSON layout file).

        Example::

            name: my_arm
            cameras:                      # model camera order
              - {key: obs/front, required: true}
              - {key: obs/wrist}
            state_key: obs/joints
            prompt_key: task              # optional, default "prompt"
            action_dim: 7                 # optional, default: all model dims
            resize: pad                   # optional: pad | stretch
            resample: pil_bilinear        # optional: openpi's (see model.images)
            transforms:                   # required, every key (openpi's data transforms)
              adapt_to_pi: false          # ALOHA joint flips + gripper conversion
              delta_action_mask: [true, true, true, true, true, true, false]  # or []
              clean_prompt: true          # openpi's prompt cleaning

        Raises:
            LayoutSettingError: on missing or unknown transform settings.
            ValueError: on a missing or malformed entry.
        """
        transforms = OpenPITransforms.from_dict(data.get("transforms"))
        try:
            cams = tuple(CameraSource(str(c["key"]), bool(c.get("required", False)))
                         if isinstance(c, Mapping) else CameraSource(str(c))
                         for c in data["cameras"])
            dim = data.get("action_dim")
            return cls(name=str(data.get("name", "custom")), cameras=cams,
                       state_key=str(data["state_key"]),
                       prompt_key=str(data.get("prompt_key", "prompt")),
                       state_required=bool(data.get("state_required", True)),
                       action_dim=None if dim is None else int(dim),
                       resize=data.get("resize", "pad"), transforms=transforms,
                       resample=data.get("resample", "pil_bilinear"))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed layout: {exc!r}") from exc

    def to_dict(self) -> LayoutFile:
        """msgpack/JSON-ready form (sent in the connection metadata)."""
        return {"name": self.name, "resize": self.resize, "resample": self.resample,
                "state_key": self.state_key,
                "prompt_key": self.prompt_key, "action_dim": self.action_dim,
                "cameras": [{"key": c.key, "required": c.required} for c in self.cameras],
                "transforms": self.transforms.to_dict() if self.transforms else None}


_LIBERO_CAMERAS = (CameraSource("observation/image", True),
                   CameraSource("observation/wrist_image", True))
_ALOHA_CAMERAS = (CameraSource("images/cam_high", True), CameraSource("images/cam_left_wrist"),
                  CameraSource("images/cam_right_wrist"))

#: openpi ``pi0_libero`` (``LeRobotLiberoDataConfig(extra_delta_transform=True)``).
LIBERO = ObservationLayout(
    name="libero", cameras=_LIBERO_CAMERAS, state_key="observation/state", action_dim=7,
    transforms=OpenPITransforms(adapt_to_pi=False, delta_action_mask=(True,) * 6 + (False,),
                                clean_prompt=True))

#: openpi ``pi05_libero`` (``extra_delta_transform=False``): LIBERO's actions as they are.
LIBERO_ABSOLUTE = ObservationLayout(
    name="pi05_libero", cameras=_LIBERO_CAMERAS, state_key="observation/state", action_dim=7,
    transforms=OpenPITransforms(adapt_to_pi=False, delta_action_mask=(), clean_prompt=True))

#: openpi ``pi0_aloha`` (``LeRobotAlohaDataConfig()``: ``adapt_to_pi``, delta joints).
ALOHA = ObservationLayout(
    name="aloha", cameras=_ALOHA_CAMERAS, state_key="state", action_dim=14,
    transforms=OpenPITransforms(
        adapt_to_pi=True, delta_action_mask=((True,) * 6 + (False,)) * 2, clean_prompt=True))

#: openpi ``pi0_aloha_sim`` (``use_delta_joint_actions=False``; ``adapt_to_pi`` stays on).
ALOHA_ABSOLUTE = ObservationLayout(
    name="pi0_aloha_sim", cameras=_ALOHA_CAMERAS, state_key="state", action_dim=14,
    transforms=OpenPITransforms(adapt_to_pi=True, delta_action_mask=(), clean_prompt=True))

#: Layouts selectable by name (``--layout``), under our names and openpi's config names;
#: ``auto`` picks ``libero`` or ``aloha`` per observation.
BUILTIN_LAYOUTS: dict[str, ObservationLayout] = {
    "libero": LIBERO, "aloha": ALOHA, "pi0_libero": LIBERO, "pi05_libero": LIBERO_ABSOLUTE,
    "pi0_aloha": ALOHA, "pi05_aloha": ALOHA, "pi0_aloha_sim": ALOHA_ABSOLUTE}


def load_layout(name_or_path: str) -> ObservationLayout | None:
    """A built-in layout by name, ``None`` for ``auto``, or one loaded from YAML/JSON.

    Raises:
        ValueError: on an unknown name or a malformed file (one line naming the file
            and, for transform settings, the field).
    """
    if name_or_path == "auto":
        return None
    if name_or_path in BUILTIN_LAYOUTS:
        return BUILTIN_LAYOUTS[name_or_path]
    path = Path(name_or_path)
    if not path.is_file():
        raise ValueError(f"unknown layout {name_or_path!r}: not one of "
                         f"{['auto', *BUILTIN_LAYOUTS]} and not a file")
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise ValueError(f"layout file {path}: {' '.join(str(exc).split())}") from None
    if not isinstance(data, Mapping):
        raise ValueError(f"layout file {path} does not hold a mapping")
    try:
        # A layout file as written: from_dict checks every field it reads.
        return ObservationLayout.from_dict(cast(LayoutFile, data))
    except ValueError as exc:
        raise ValueError(f"layout file {path}: {exc}") from None


def check_layout(layout: ObservationLayout, model: ModelSpec) -> None:
    """Refuse, at start-up, a layout whose transforms the served model cannot carry.

    Raises:
        LayoutSettingError: ``adapt_to_pi`` on a model with fewer than 14 state or
            action values, or a delta mask wider than the model's state or actions.
    """
    transforms = layout.transforms
    assert transforms is not None  # refused when the layout was built
    if transforms.adapt_to_pi and min(model.state_dim, model.action_dim) < ALOHA_DIM:
        raise LayoutSettingError(
            "transforms.adapt_to_pi", f"layout {layout.name!r} converts {ALOHA_DIM} ALOHA "
            f"values; the model has state_dim {model.state_dim}, action_dim "
            f"{model.action_dim}")
    width = len(transforms.delta_action_mask)
    for name, dim in (("state_dim", model.state_dim), ("action_dim", model.action_dim)):
        if width > dim:
            raise LayoutSettingError("transforms.delta_action_mask", f"{width} entries exceed "
                                                                     f"the model's {name} {dim}")


class _Missing:
    """Type of :data:`MISSING` (``None`` is a value a client may send: msgpack nil)."""

    def __repr__(self) -> str:
        return "MISSING"


#: Returned by :func:`lookup` for an absent key.
MISSING: Final = _Missing()


def as_observation(obs: object) -> Observation:
    """``obs`` (a decoded message) as an observation map.

    Raises:
        ObservationFieldError: when it is not a map.
    """
    if not isinstance(obs, Mapping):
        raise ObservationFieldError("observation", f"expected a map, got {type(obs).__name__}")
    return obs


def lookup(obs: Observation, key: str) -> object:
    """The value at ``key`` (literal key first, then a ``/`` path), or :data:`MISSING`."""
    if key in obs:
        return obs[key]
    node: object = obs
    for part in key.split("/"):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def detect_layout(obs: Observation,
                  layouts: Sequence[ObservationLayout] = (LIBERO, ALOHA)) -> ObservationLayout:
    """The first layout whose first camera key is present in ``obs``.

    Raises:
        ObservationFieldError: when no layout matches.
    """
    for layout in layouts:
        if lookup(obs, layout.cameras[0].key) is not MISSING:
            return layout
    keys = sorted(str(k) for k in obs)[:12]
    raise ObservationFieldError(
        "observation", f"matches no known layout (looked for "
                       f"{[lay.cameras[0].key for lay in layouts]}); its keys are {keys}")


def to_rgb_uint8(value: object, name: str) -> npt.NDArray[np.uint8]:
    """An HxWx3 uint8 RGB array from an HWC/CHW, uint8/float[0, 1] image.

    Raises:
        ObservationFieldError: on a non-array, a wrong channel count or dtype, or bad values.
    """
    if not isinstance(value, np.ndarray):
        raise ObservationFieldError(name, f"expected an image array, got {type(value).__name__}")
    img = value
    if img.ndim != 3:
        raise ObservationFieldError(name, f"expected a 3-D HxWx3 or 3xHxW image, got shape "
                                     f"{img.shape}")
    if img.shape[-1] != 3 and img.shape[0] == 3:
        img = img.transpose(1, 2, 0)  # CHW, as openpi's ALOHA client sends
    if img.shape[-1] != 3:
        raise ObservationFieldError(name, f"expected 3 colour channels, got shape {value.shape}")
    if not (0 < img.shape[0] <= MAX_IMAGE_SIDE and 0 < img.shape[1] <= MAX_IMAGE_SIDE):
        raise ObservationFieldError(name, f"image size {img.shape[0]}x{img.shape[1]} outside "
                                     f"1..{MAX_IMAGE_SIDE}")
    if img.dtype == np.uint8:
        return np.ascontiguousarray(img)
    if np.issubdtype(img.dtype, np.floating):
        if not np.all(np.isfinite(img)):
            raise ObservationFieldError(name, "image contains NaN or Inf")
        return np.ascontiguousarray(
            np.clip(np.rint(img.astype(np.float32) * 255.0), 0, 255).astype(np.uint8))
    raise ObservationFieldError(name, f"expected dtype uint8 or float in [0, 1], got {img.dtype}")


@dataclass
class MappedObservation:
    """Model-ready inputs of one observation.

    Attributes:
        images: one HxWx3 uint8 image per model camera, at the model's size; a masked
            camera is ``None`` for a model that masks cameras, else a zero image.
        image_mask: False where the camera was masked out.
        state: float64 state in the model's frame (after the layout's input
            transforms), zero-padded to the model's ``state_dim``.
        state_dim_in: length of the state the client sent.
        prompt: the instruction (cleaned when the layout says so).
        layout: name of the layout used.
        transforms: that layout's openpi transforms (the reply path runs them too).
    """

    images: list[npt.NDArray[np.uint8] | None]
    image_mask: tuple[bool, ...]
    state: FloatArray
    state_dim_in: int
    prompt: str
    layout: str
    transforms: OpenPITransforms


def _state(obs: Observation, layout: ObservationLayout, dim: int) -> tuple[FloatArray, int]:
    raw = lookup(obs, layout.state_key)
    if raw is MISSING:
        if layout.state_required:
            raise ObservationFieldError(layout.state_key, "required state is missing")
        return np.zeros(dim, dtype=np.float64), 0
    try:
        arr = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ObservationFieldError(layout.state_key, f"state is not numeric: {exc}") from exc
    if arr.ndim != 1:
        raise ObservationFieldError(layout.state_key, f"expected a 1-D state vector, got shape "
                                                 f"{arr.shape}")
    if arr.size > dim:
        raise ObservationFieldError(layout.state_key, f"state has {arr.size} values; the model "
                                                 f"takes at most {dim}")
    if not np.all(np.isfinite(arr)):
        raise ObservationFieldError(layout.state_key, "state contains NaN or Inf")
    out = np.zeros(dim, dtype=np.float64)
    out[:arr.size] = arr
    return out, int(arr.size)


def _prompt(obs: Observation, layout: ObservationLayout, default: str | None) -> str:
    raw = lookup(obs, layout.prompt_key)
    if raw is MISSING:
        if default is None:
            raise ObservationFieldError(layout.prompt_key, "prompt is missing and the server has "
                                                      "no default prompt")
        return default
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ObservationFieldError(layout.prompt_key, "prompt is not UTF-8") from exc
    if not isinstance(raw, str):
        raise ObservationFieldError(layout.prompt_key, f"expected a string, got "
                                                  f"{type(raw).__name__}")
    if len(raw) > MAX_PROMPT_CHARS:
        raise ObservationFieldError(layout.prompt_key, f"prompt longer than {MAX_PROMPT_CHARS} "
                                                  "characters")
    return raw


def map_observation(obs: object, layout: ObservationLayout | None, model: ModelSpec,
                    default_prompt: str | None = None) -> MappedObservation:
    """Map one decoded observation onto the model's cameras, state and prompt.

    Args:
        obs: the decoded message (a mapping).
        layout: the layout, or None to detect a built-in one from the keys.
        model: what the model takes.
        default_prompt: used when the observation has no prompt (None: required).

    Raises:
        ObservationFieldError: naming the first missing or malformed field.
    """
    obs = as_observation(obs)
    layout = layout if layout is not None else detect_layout(obs)
    transforms = layout.transforms
    assert transforms is not None  # ObservationLayout refuses a layout without them
    state, state_in = _state(obs, layout, model.state_dim)
    if transforms.adapt_to_pi and min(model.state_dim, model.action_dim) < ALOHA_DIM:
        raise ObservationFieldError(layout.state_key, f"layout {layout.name!r} converts "
                                    f"{ALOHA_DIM} ALOHA values; the model has state_dim "
                                    f"{model.state_dim}, action_dim {model.action_dim}")
    state = transforms.state_in(state)
    prompt = transforms.prompt_in(_prompt(obs, layout, default_prompt))
    images: list[npt.NDArray[np.uint8] | None] = []
    mask: list[bool] = []
    for index, (_, height, width) in enumerate(model.cameras):
        source = layout.cameras[index] if index < len(layout.cameras) else None
        raw = lookup(obs, source.key) if source is not None else MISSING
        if raw is MISSING or source is None:
            if source is not None and source.required:
                raise ObservationFieldError(source.key, "required camera image is missing")
            images.append(None if model.masks_missing_cameras
                          else np.zeros((height, width, 3), dtype=np.uint8))
            mask.append(False)
            continue
        rgb = to_rgb_uint8(raw, source.key)
        images.append(fit_image(rgb, height, width, layout.resize, layout.resample))
        mask.append(True)
    return MappedObservation(images, tuple(mask), state, state_in, prompt, layout.name,
                             transforms)
