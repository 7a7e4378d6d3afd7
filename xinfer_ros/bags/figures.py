"""The replay report's figure: what the actions and the latency did, before and after.

One row per robot: the first action of every chunk per joint over the recording's time
line (recorded or golden chunks dashed, the replay's solid), and the latency CDF of
both runs. A robot with nothing recorded shows the replay alone. ROS-free (matplotlib,
headless).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")  # headless: CI machines have no display

import matplotlib.pyplot as plt
import numpy as np

from xinfer_ros.bags.outcome import ReplayOutcome
from xinfer_ros.bags.scan import RecordedChunk, RecordedRun

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["MAX_JOINTS", "write_replay_figure"]

#: Joints drawn per robot (the first ones); more would be unreadable.
MAX_JOINTS = 7
_OK = 0


def _first_actions(points: list[tuple[float, RecordedChunk]]) -> tuple[np.ndarray, np.ndarray]:
    """Times and first action rows of the OK chunks among ``points``."""
    rows = [(t, c.actions[0]) for t, c in sorted(points, key=lambda p: p[0])
            if c.status == _OK and c.actions.ndim == 2 and c.actions.shape[0]]
    if not rows:
        return np.zeros(0), np.zeros((0, 0))
    return np.asarray([t for t, _ in rows]), np.vstack([a for _, a in rows])


def _cdf(ax: Axes, latencies_ms: list[float], label: str, style: str) -> None:
    if latencies_ms:
        values = np.sort(np.asarray(latencies_ms))
        ax.step(values, np.arange(1, values.size + 1) / values.size, style, where="post",
                label=f"{label} (n={values.size})")


def write_replay_figure(run: RecordedRun, result: ReplayOutcome, path: Path | str) -> Path:
    """Draw the figure of one replay into ``path`` (PNG).

    Args:
        run: The replayed bag, with its recorded (or golden) requests and chunks.
        result: The player's result (what was sent and answered).
        path: The PNG to write.

    Returns:
        ``path``.
    """
    robots = sorted(run.robots)
    fig, axes = plt.subplots(len(robots), 2, figsize=(12, 3.2 * len(robots)), squeeze=False,
                             gridspec_kw={"width_ratios": [2.2, 1]})
    for row, name in zip(axes, robots, strict=True):
        track = run.robots[name]
        requests = {q.seq: q for q in track.replayable}
        before = [((requests[s].log_ns - run.start_ns) / 1e9, c)
                  for s, c in track.chunks.items() if s in requests]
        sent = {s.seq: s for s in result.sent.get(name, [])}
        answers = result.chunks.get(name, {})
        after = [((sent[s].bag_ns - run.start_ns) / 1e9, c)
                 for s, c in answers.items() if s in sent]
        ax = row[0]
        t_after, a_after = _first_actions(after)
        t_before, a_before = _first_actions(before)
        joints = min(MAX_JOINTS, max(a_after.shape[1] if a_after.size else 0,
                                     a_before.shape[1] if a_before.size else 0))
        colours = plt.get_cmap("tab10")
        for j in range(joints):
            if a_before.size:
                ax.plot(t_before, a_before[:, j], "--", color=colours(j), alpha=0.7)
            if a_after.size:
                ax.plot(t_after, a_after[:, j], "-", color=colours(j), label=f"joint {j}")
        ax.set_title(f"{name}: first action per chunk "
                     "(dashed: before, recorded or golden; solid: replay)")
        ax.set_xlabel("recording time (s)")
        if joints:
            ax.legend(fontsize=7, ncol=min(joints, 4), loc="upper right")
        ax = row[1]
        _cdf(ax, [(c.log_ns - requests[s].log_ns) / 1e6 for s, c in track.chunks.items()
                  if s in requests], "before", "--")
        _cdf(ax, [(c.log_ns - sent[s].send_ns) / 1e6 for s, c in answers.items() if s in sent],
             "replay", "-")
        ax.set_title(f"{name}: latency CDF")
        ax.set_xlabel("latency (ms)")
        ax.set_ylim(0, 1.02)
        if ax.lines:
            ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
