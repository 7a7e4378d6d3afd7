"""Prediction error as a simulator input: how far the GPU strays from the predictor.

The simulated GPU runs the rate table the policies predict with. Two errors make it
stray, as a real GPU strays from a calibrated table:

* a per-unit work factor (``SimConfig.noise``): run-to-run jitter;
* a per-(stage, concurrency) rate factor fixed for the run (``SimConfig.rate_error``):
  the table misjudges some interference states consistently.

Both are log-normal. One size ``k`` sets both, in the proportion the engine's own
residuals show: on this machine's async engine (docs/BENCHMARKS.md, "Remaining-time
prediction") the signed mean error per stage is 24 %, 50 % and 26 % of its MAE (ViT,
Prefill, Action): about a third of the error is consistent, the rest spread. So the
rate factor gets :data:`SYSTEMATIC_SHARE` of ``k`` and the unit factor the rest (in
quadrature).

:func:`calibrate` finds ``k`` for a target running-stage MAE (ms) by bisection on
simulated runs of one policy (``xinfer-sim`` uses XInfer's, the predictor whose MAE
the paper reports; the error is the GPU's, so every policy then runs with the same
``k``), measuring the MAE with the engine's audit
(:class:`~xinfer_ros.core.prediction_audit.PredictionAudit`). Even with ``k = 0`` the
MAE is not zero: the predictor cannot foresee the launches that change a running
unit's rate after it was sampled. A target below that floor is refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from xinfer_ros.errors import XInferRosError
from xinfer_ros.sim.engine_loop import SimConfig, simulate

__all__ = ["SYSTEMATIC_SHARE", "ErrorCalibration", "PredictionErrorTargetError", "calibrate",
           "error_model"]

#: Share of the error's log-sigma that is consistent per (stage, concurrency) state.
SYSTEMATIC_SHARE = 1 / 3
#: Largest size tried (a log-sigma: unit durations off by a factor e^±1.5).
_MAX_SIZE = 1.5
#: Bisection steps: the size to within 1.5 / 2^10.
_STEPS = 10


class PredictionErrorTargetError(XInferRosError, ValueError):
    """The target prediction error cannot be produced."""


@dataclass(frozen=True)
class ErrorCalibration:
    """A size of the error model and the MAE it produced.

    Attributes:
        target_ms: The MAE asked for (ms).
        size: The log-sigma ``k`` found.
        noise: The per-unit factor's sigma it gives.
        rate_error: The per-state factor's sigma it gives.
        mae_ms: The MAE measured at that size (ms).
        floor_ms: The MAE with no execution error at all (ms).
        robots: The robot count it was calibrated at.
        policy: The policy whose predictor it was calibrated on.
    """

    target_ms: float
    size: float
    noise: float
    rate_error: float
    mae_ms: float
    floor_ms: float
    robots: int
    policy: str = ""

    def describe(self) -> str:
        """One line for a report."""
        return (f"prediction error: running-stage MAE {self.mae_ms:.2f} ms (target "
                f"{self.target_ms:g} ms; {self.floor_ms:.2f} ms with none; {self.policy} at "
                f"{self.robots} robots): unit noise sigma {self.noise:.3f}, rate error sigma "
                f"{self.rate_error:.3f}")


def error_model(size: float) -> tuple[float, float]:
    """``(noise, rate_error)`` sigmas for an error of log-sigma ``size``."""
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size!r}")
    return size * math.sqrt(1.0 - SYSTEMATIC_SHARE ** 2), size * SYSTEMATIC_SHARE


def _mae(cfg: SimConfig, size: float) -> float:
    noise, rate_error = error_model(size)
    result = simulate(cfg.with_(noise=noise, rate_error=rate_error, audit=True))
    assert result.prediction is not None  # audit=True
    return float(result.prediction.get("mae_ms", math.nan))


def calibrate(cfg: SimConfig, target_ms: float, *,
              measure: Callable[[SimConfig, float], float] = _mae) -> ErrorCalibration:
    """The error size whose running-stage MAE on ``cfg`` is ``target_ms``.

    Args:
        cfg: The run to calibrate on (its robots, workload, policy, table, seed).
        target_ms: The MAE wanted (ms).
        measure: MAE (ms) of ``cfg`` at an error size (tests replace the simulation).

    The MAE is taken to grow with the size (it does, from its floor; bisection keeps
    the size whose MAE straddles the target).

    Raises:
        PredictionErrorTargetError: When the target is not a positive number, lies below
            the MAE with no error, or above the MAE at the largest size tried.
    """
    if not (math.isfinite(target_ms) and target_ms > 0):
        raise PredictionErrorTargetError(f"the target MAE must be a number of ms > 0, got "
                                         f"{target_ms!r}")
    floor = measure(cfg, 0.0)
    if math.isnan(floor):
        raise PredictionErrorTargetError(
            f"no prediction was audited on {cfg.robots} robots (no unit ran in the window)")
    if not target_ms >= floor:
        raise PredictionErrorTargetError(
            f"a running-stage MAE of {target_ms:g} ms is below what the predictor errs with "
            f"no execution error at all ({floor:.2f} ms at {cfg.robots} robots: launches it "
            "cannot foresee change running units' rates)")
    top = measure(cfg, _MAX_SIZE)
    if not target_ms <= top:
        raise PredictionErrorTargetError(
            f"a running-stage MAE of {target_ms:g} ms is beyond the model's range "
            f"({top:.2f} ms at log-sigma {_MAX_SIZE:g})")
    low, high, mae = 0.0, _MAX_SIZE, floor
    for _ in range(_STEPS):
        mid = (low + high) / 2
        mae = measure(cfg, mid)
        if mae < target_ms:
            low = mid
        else:
            high = mid
    size = (low + high) / 2
    mae = measure(cfg, size)
    noise, rate_error = error_model(size)
    return ErrorCalibration(target_ms, size, noise, rate_error, mae, floor, cfg.robots,
                            cfg.policy)
