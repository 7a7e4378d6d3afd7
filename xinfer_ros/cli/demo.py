"""``make demo``: the README's main job.

Runs a small fleet with the embedded default model. The ROS fleet runner
(``xinfer-fleet``, issue 7) is not built yet; until it lands this entry point says
so and runs what exists: the closed-loop fleet simulator over the XInfer scheduler.
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the demo and return its exit status."""
    del argv
    print("xinfer_ros demo: the ROS fleet runner (xinfer-fleet) is not built yet.")
    if importlib.util.find_spec("xinfer_ros.cli.sim") is None:
        print("The fleet simulator is not built yet either; nothing to run.")
        return 0
    from xinfer_ros.cli import sim

    print("Running the closed-loop fleet simulator instead: 3 robots, phases, xinfer.\n")
    return sim.main(["run", "--policy", "xinfer", "--workload", "phases", "--robots", "3",
                     "--rounds", "1"])


if __name__ == "__main__":
    sys.exit(main())
