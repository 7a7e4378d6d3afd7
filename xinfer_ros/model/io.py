"""What a served model takes and returns, known without loading weights.

:class:`ModelIO` is what the nodes, the openpi endpoint and the fleet runner need to
know about a model (cameras, state and action dimensions, chunk length). Each family
makes it from its own preset (:func:`reference_io` for the reference family); this
module imports neither torch nor any family.
"""

from __future__ import annotations

import dataclasses

from xinfer_ros.model.config import REFERENCE_FAMILY, VLAConfig

__all__ = ["COMPILE_MODES", "CameraIO", "ModelIO", "reference_io"]

#: How a served model's Action loop runs: ``off`` eager; ``on`` the expert step under
#: ``torch.compile``; ``cudagraphs`` the same replayed as CUDA graphs (CUDA only). Only
#: the π0 family has a compiled loop.
COMPILE_MODES: tuple[str, ...] = ("off", "on", "cudagraphs")


@dataclasses.dataclass(frozen=True)
class CameraIO:
    """One model camera: its name and the model's input size in pixels."""

    name: str
    height: int
    width: int


@dataclasses.dataclass(frozen=True)
class ModelIO:
    """What a served model takes and returns.

    Attributes:
        name: Preset name.
        family: ``reference`` or ``pi0``.
        cameras: The model's cameras in request order.
        state_dim: The robot's state dimension.
        action_dim: The robot's action dimension D.
        horizon: Keyframes per chunk H.
        num_steps: Denoising steps K.
        masks_missing_cameras: A request may leave cameras out (π0 masks them); else
            every camera is required.
        resizes_images: Images of any size are resized with padding (π0); else the
            aspect ratio must match the camera's.
    """

    name: str
    family: str
    cameras: tuple[CameraIO, ...]
    state_dim: int
    action_dim: int
    horizon: int
    num_steps: int
    masks_missing_cameras: bool
    resizes_images: bool

    @property
    def action_shape(self) -> tuple[int, int]:
        """``(H, D)`` of a returned chunk."""
        return self.horizon, self.action_dim


def reference_io(config: VLAConfig) -> ModelIO:
    """The :class:`ModelIO` of a reference-model configuration."""
    spec = config.action
    return ModelIO(
        name=config.name, family=REFERENCE_FAMILY,
        cameras=tuple(CameraIO(c.name, c.height, c.width) for c in config.cameras),
        state_dim=spec.state_dim, action_dim=spec.action_dim, horizon=spec.horizon,
        num_steps=spec.num_steps, masks_missing_cameras=False, resizes_images=False)
