"""Delta vs full simulation (issue 16, thesis Table 3.4): simulations per second of
`tasoc.sim.simulate` and of `DeltaSimulator.update` after one edit, on 5,000-task graphs.

    .venv/bin/python benchmarks/sim_delta.py [--devices 16] [--tasks 5000] [--edits 300]

Two graphs, both with device memory as pools:

- `step`: a training step on `devices` devices — per layer and device a forward and a
  backward compute task chained on the device, every fourth layer a transfer to the next
  device on its link, a gradient all-reduce per layer and device on the device's network
  stream; activations held from forward to backward.
- `random`: each task on a random device, depending on 1-3 of the 64 tasks added before it.

Each edit scales one random task's duration by 1.5 or 1/1.5 (`task`), or every
device's task of one random layer (`op`, one operator's configuration: `step` only);
the same edit sequence is timed with a full simulation and with a delta update after each.

Measured on this 2-core machine (shared, so +-15 %), 2026-11-25, after the event loop
lost its per-user dependency scans and the cyclic GC was paused around simulations
(`tasoc.sim.core.paused_gc`), and the sparse update learnt to stop, or to take a block
of old tasks at once, where the edit's effect has closed up (before: 102, 104, 68 full
and 280, 129, 185 delta simulations/s at 16 devices):

    graph     tasks edit    full/s  delta/s  speedup     (16 devices)
    step       4992 task     133.5    361.3    2.71x
    step       4992 op       143.2    164.8    1.15x
    random     5000 task      85.5    244.9    2.87x
    step       4992 task     123.0    463.3    3.77x     (64 devices)
    step       4992 op       135.5    166.2    1.23x
    random     5000 task      74.9    385.8    5.15x

A one-task edit moves one device's chain, which the sparse update re-times alone; an
`op` edit moves every device's chain from its layer on to the end of the step (the
makespan moves), so the update re-runs the event loop from that layer: it saves the
part before the edit, never more, since an exact (float for float) update cannot shift
the later tasks by a constant and must re-time each of them.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from tasoc.sim import DeltaSimulator, Task, TaskGraph, simulate


def step_graph(devices: int, tasks: int, rng: random.Random) -> tuple[TaskGraph, list[list[int]]]:
    """The `step` graph and, per layer, its compute task ids (what one op's edit changes)."""
    graph = TaskGraph()
    layers = max(1, int(tasks / devices / 3.25))
    last: list[int | None] = [None] * devices
    forward: list[list[int]] = []
    for layer in range(layers):
        ids = []
        for device in range(devices):
            deps = () if last[device] is None else (last[device],)
            hbm = (("hbm", device), 4 << 20)
            ids.append(graph.add(Task(("gpu", device), rng.uniform(1e-4, 1e-3), deps, (hbm,))))
        if layer % 4 == 3:
            sends = [graph.add(Task(("link", d), 5e-4, (ids[d],))) for d in range(devices)]
            last = [sends[(d - 1) % devices] for d in range(devices)]
        else:
            last = list(ids)
        forward.append(ids)
    backward: list[list[int]] = []
    for layer in reversed(range(layers)):
        ids = []
        for device in range(devices):
            hbm = (("hbm", device), 4 << 20)
            deps = (last[device], forward[layer][device])
            ids.append(graph.add(Task(("gpu", device), rng.uniform(2e-4, 2e-3), deps, free=(hbm,))))
            graph.add(Task(("net", device), 3e-4, (ids[-1],)))
        last = list(ids)
        backward.append(ids)
    return graph, forward + backward


def random_graph(devices: int, tasks: int, rng: random.Random) -> TaskGraph:
    graph = TaskGraph()
    for index in range(tasks):
        earlier = range(max(0, index - 64), index)
        deps = tuple(rng.sample(earlier, min(len(earlier), rng.randint(1, 3))))
        hbm = (("hbm", rng.randrange(devices)), 1 << 20)
        graph.add(
            Task(("gpu", rng.randrange(devices)), rng.uniform(1e-4, 1e-3), deps, (hbm,), (hbm,))
        )
    return graph


def scale(graph: TaskGraph, task_ids: list[int], factor: float) -> None:
    for task_id in task_ids:
        old = graph[task_id]
        graph.replace(
            task_id, Task(old.resource, old.duration * factor, old.deps, old.alloc, old.free)
        )


def rate(
    graph: TaskGraph, edits: list[tuple[list[int], float]], simulate_one: Callable[[], object]
) -> float:
    """Simulations per second over `edits`, each applied and then simulated."""
    began = time.perf_counter()
    for task_ids, factor in edits:
        scale(graph, task_ids, factor)
        simulate_one()
    return len(edits) / (time.perf_counter() - began)


def measure(graph: TaskGraph, edits: list[tuple[list[int], float]]) -> tuple[float, float]:
    full = rate(graph, edits, lambda: simulate(graph))
    undo = [(task_ids, 1 / factor) for task_ids, factor in reversed(edits)]
    rate(graph, undo, lambda: None)
    delta = DeltaSimulator(graph)
    return full, rate(graph, edits, delta.update)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=16)
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--edits", type=int, default=300)
    args = parser.parse_args()
    rng = random.Random(0)
    step, layers = step_graph(args.devices, args.tasks, rng)
    graphs = {"step": step, "random": random_graph(args.devices, args.tasks, rng)}
    print(f"{'graph':8} {'tasks':>6} {'edit':5} {'full/s':>8} {'delta/s':>8} {'speedup':>8}")
    for name, graph in graphs.items():
        ids = list(graph.ids())
        kinds: dict[str, list[list[int]]] = {"task": [[task_id] for task_id in ids]}
        if name == "step":
            kinds["op"] = layers
        for kind, choices in kinds.items():
            edits = [(rng.choice(choices), rng.choice((1.5, 1 / 1.5))) for _ in range(args.edits)]
            full, delta = measure(graph, edits)
            print(f"{name:8} {len(graph):6} {kind:5} {full:8.1f} {delta:8.1f} {delta / full:7.2f}x")


if __name__ == "__main__":
    main()
