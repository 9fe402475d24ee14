"""The one simulator (DESIGN.md §1): tasks with durations on FIFO resources, dependencies,
and memory pools, simulated in full or by delta after edits (Jia thesis §3.4).

soap-shard prices parallelization strategies with it (devices and links as resources),
placement prices schedules and swap plans (compute and swap streams as resources,
device memory as a pool). See `tasoc.sim.core` for the exact semantics.
"""

from __future__ import annotations

from tasoc.sim.core import DeltaSimulator, SimulationError, Task, TaskGraph, Timeline, simulate

__all__ = ["DeltaSimulator", "SimulationError", "Task", "TaskGraph", "Timeline", "simulate"]
