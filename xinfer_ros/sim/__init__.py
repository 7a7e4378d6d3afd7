"""Discrete-event closed-loop fleet simulator and workloads (no ROS, no torch).

Modules (one concern each):

* :mod:`~xinfer_ros.sim.gpu`: non-preemptive units at the rate table's concurrent rates;
* :mod:`~xinfer_ros.sim.workloads`: phases, bursty, multi_budget, parcel, uniform, custom;
* :mod:`~xinfer_ros.sim.engine_loop`: the event loop driving ``xinfer_ros.core`` policies;
* :mod:`~xinfer_ros.sim.runner`: rounds and robot counts in a process pool;
* :mod:`~xinfer_ros.sim.erc`: effective robot capacity search;
* :mod:`~xinfer_ros.sim.projection`: App. A.1 parcels/h projection (Eq. 5-7);
* :mod:`~xinfer_ros.sim.plots`: Figure 2 / Figure 8 style PNGs (Agg backend).

Metrics live in :mod:`xinfer_ros.core.metrics` and the closed-loop robots (Eq. 1) in
:mod:`xinfer_ros.core.clients`, so the engine and ROS nodes share them.
The command line is ``xinfer-sim`` (:mod:`xinfer_ros.cli.sim`).
"""

from xinfer_ros.sim.engine_loop import RunResult, SimConfig, Simulation, simulate
from xinfer_ros.sim.erc import Criterion, ErcResult, erc_from_grid, search_erc
from xinfer_ros.sim.workloads import WORKLOADS, Workload, build_workload

__all__ = [
    "WORKLOADS",
    "Criterion",
    "ErcResult",
    "RunResult",
    "SimConfig",
    "Simulation",
    "Workload",
    "build_workload",
    "erc_from_grid",
    "search_erc",
    "simulate",
]
