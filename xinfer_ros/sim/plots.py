"""Matplotlib figures in the style of the paper's Figures 2 and 8 (Agg backend, PNG)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: CI and remote machines have no display

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from xinfer_ros.core.baselines import EDFPolicy, FIFOPolicy, SlackGatePolicy
from xinfer_ros.core.constants import ATTAINMENT_TARGET
from xinfer_ros.core.xinfer_policy import XInferPolicy
from xinfer_ros.sim.projection import ProjectionPoint

__all__ = [
    "plot_attainment_over_time",
    "plot_per_budget",
    "plot_policy_sweep",
    "plot_projection",
]

_COLORS = {XInferPolicy.name: "#d62728", SlackGatePolicy.name: "#1f77b4",
           EDFPolicy.name: "#2ca02c", FIFOPolicy.name: "#7f7f7f"}


def _save(fig: Figure, path: Path) -> Path:
    """Lay out, write ``path`` (creating its folder) and free the figure."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _color(policy: str) -> str | None:
    """Paper-like colour per policy; ablations share XInfer's hue family."""
    return _COLORS.get(policy)


def _series(
    grid: Mapping[int, Mapping[str, float]], key: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(robots, mean, min, max) of metric ``key`` from ``{n: {"mean.key": ...}}``."""
    ns = np.array(sorted(grid))
    mean = np.array([grid[n].get(f"mean.{key}", np.nan) for n in ns])
    lo = np.array([grid[n].get(f"min.{key}", np.nan) for n in ns])
    hi = np.array([grid[n].get(f"max.{key}", np.nan) for n in ns])
    return ns, mean, lo, hi


def plot_policy_sweep(
    sweeps: Mapping[str, Mapping[int, Mapping[str, float]]],
    path: Path,
    title: str,
    erc: Mapping[str, int] | None = None,
    target: float = ATTAINMENT_TARGET,
) -> Path:
    """Figure 8(a-c): attainment, mean wide-budget latency and goodput vs robots.

    Args:
        sweeps: ``policy -> robots -> {"mean.attainment": ..., "min.attainment": ...}``.
        path: Output PNG.
        title: Figure title (the workload).
        erc: Optional ERC per policy, drawn as a large marker on the attainment curve.
        target: Attainment target line.
    """
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    panels = (
        ("attainment", "SLO attainment (%)", 100.0),
        ("mean_wide_latency_ms", "Mean wide-budget latency (ms)", 1.0),
        ("goodput_rps", "Goodput (on-time resp/s)", 1.0),
    )
    for ax, (key, label, scale) in zip(axes, panels, strict=True):
        for policy, grid in sweeps.items():
            ns, mean, lo, hi = _series(grid, key)
            # Clip float noise: a metric equal in every round gives tiny negatives.
            err = np.clip(np.vstack([mean - lo, hi - mean]) * scale, 0.0, None)
            ax.errorbar(ns, mean * scale, yerr=err, marker="o", ms=4, capsize=2,
                        label=policy, color=_color(policy))
            if key == "attainment" and erc and erc.get(policy):
                n = erc[policy]
                if n in grid:
                    ax.plot([n], [grid[n]["mean.attainment"] * 100], marker="*", ms=14,
                            color=_color(policy), markeredgecolor="k")
        if key == "attainment":
            ax.axhline(target * 100, ls="--", color="k", lw=0.8, label=f"{target:.0%} target")
        ax.set_xlabel("Robots")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    return _save(fig, path)


def plot_attainment_over_time(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    path: Path,
    title: str,
    shaded: Sequence[tuple[float, float]] = (),
) -> Path:
    """Figure 8(d): attainment in send-time bins, one curve per policy.

    Args:
        series: ``policy -> (bin_starts_s, attainment_fraction)`` (round means).
        path: Output PNG.
        title: Figure title.
        shaded: Intervals to shade (the added robots' active periods).
    """
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for t0, t1 in shaded:
        ax.axvspan(t0, t1, color="orange", alpha=0.15)
    for policy, (ts, att) in series.items():
        ax.plot(ts, np.asarray(att) * 100, label=policy, color=_color(policy), lw=1.2)
    ax.axhline(95, ls="--", color="k", lw=0.8)
    ax.set_xlabel("Robot send time (s)")
    ax.set_ylabel("SLO attainment (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_per_budget(
    per_budget: Mapping[str, Mapping[str, float]], path: Path, title: str
) -> Path:
    """Figure 8(e): attainment per response budget, grouped bars per policy.

    Args:
        per_budget: ``policy -> {budget_ms_str: attainment_fraction}``.
        path: Output PNG.
        title: Figure title.
    """
    budgets = sorted({b for d in per_budget.values() for b in d}, key=float)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    width = 0.8 / max(len(per_budget), 1)
    x = np.arange(len(budgets))
    for i, (policy, d) in enumerate(per_budget.items()):
        vals = [d.get(b, np.nan) * 100 for b in budgets]
        ax.bar(x + i * width, vals, width, label=policy, color=_color(policy))
    ax.set_xticks(x + width * (len(per_budget) - 1) / 2, budgets)
    ax.set_xlabel("Response budget (ms)")
    ax.set_ylabel("SLO attainment (%)")
    ax.set_ylim(0, 105)
    ax.axhline(95, ls="--", color="k", lw=0.8)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_projection(
    curves: Mapping[str, Sequence[ProjectionPoint]],
    path: Path,
    title: str = "Projected parcel throughput on one GPU",
    target_per_hour: float = 13_000.0,
) -> Path:
    """Figure 2: projected parcels/h vs robots with sensitivity bands.

    Points beyond the calibrated delay range (Eq. 6 extrapolation) are dashed and
    hatched, as in the paper.
    """
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, pts in curves.items():
        ns = np.array([p.robots for p in pts])
        q = np.array([p.parcels_per_hour for p in pts]) / 1000
        lo = np.array([p.band_low for p in pts]) / 1000
        hi = np.array([p.band_high for p in pts]) / 1000
        ext = np.array([p.extrapolated for p in pts])
        (line,) = ax.plot(ns[~ext], q[~ext], marker="o", ms=3, label=name, color=_color(name))
        color = line.get_color()
        if ext.any():
            first = max(int(np.argmax(ext)) - 1, 0)
            ax.plot(ns[first:], q[first:], ls="--", color=color)
            ax.fill_between(ns[first:], lo[first:], hi[first:], color=color, alpha=0.12,
                            hatch="//")
        ax.fill_between(ns[~ext], lo[~ext], hi[~ext], color=color, alpha=0.2)
        best = int(np.argmax(q))
        ax.annotate(f"{q[best]:.1f}k @ {ns[best]}", (ns[best], q[best]), fontsize=8,
                    textcoords="offset points", xytext=(4, 4), color=color)
    ax.axhline(target_per_hour / 1000, ls=":", color="k", lw=0.8,
               label=f"{target_per_hour / 1000:.0f}k target")
    ax.set_xlabel("Number of concurrent robots")
    ax.set_ylabel("Projected throughput (k parcels/h)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)
