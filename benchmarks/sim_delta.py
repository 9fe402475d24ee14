"""Delta vs full simulation (issues 16 and 31, thesis Table 3.4): the CPU time of
`DeltaSimulator.update` after an edit against `tasoc.sim.simulate` of the same graph, on
soap-shard's own edits of FlexFlow models' steps and on 5,000-task synthetic graphs.

    .venv/bin/python benchmarks/sim_delta.py [--soap rnnlm,inception_v3] \
        [--soap-devices 4,16,64] [--proposals 100] [--memory no,yes] [--skip-synthetic] \
        [--devices 16] [--tasks 5000] [--edits 300]

Times are CPU seconds of this process (`clock`): on a machine shared with other jobs
they count what the code did, not the time slices it waited for.

**soap-shard's edits** (`soap_edits`): soap-shard's MCMC chain (`mcmc.Chain`, seed 0,
half the proposals propagating) from data parallel, on 4, 16 and 64 devices of the
`k80-cluster` preset, on the training steps of RNNLM (40 steps unrolled) and
Inception-v3 (batch 64); every update it makes is timed against `simulate` of the same,
already built graph, the two taken in turns. Per edit kind (`op`: one op's
configuration; `propagated`: an op and the readers that followed it; `revert`: a
rejected proposal undone): the median update and full simulation, the median and
interquartile range of the per-edit ratio, and the median share of the step's tasks
whose start or end the update changed (`moved`) — what an exact update must write,
whatever it skips. A mesh's devices are simulated as one (`ShardedStep`'s collapse),
so the step has the same ~3,400 (RNNLM) and ~2,250 (Inception) tasks at every count.

Measured 2026-11-28 on the 2-core VM shared with two other engineers' jobs (load 7-11),
Python 3.12.1, memory off (what the search simulates without a memory cap), medians of
per-edit ratios, two runs each, main (before) against this file's branch (after):

    model         dev edit        n   before       after        moved
    rnnlm           4 op         86   0.94 0.87x   1.04 1.04x    45%
    rnnlm          16 op         88   0.93 0.91x   1.06 1.02x    45%
    rnnlm          64 op         90   0.90 0.93x   1.02 1.07x    44%
    rnnlm          16 propagated 12   1.01 1.04x   1.27 1.17x    56%
    inception_v3    4 op         86   1.14 1.21x   1.35 1.35x    51%
    inception_v3   16 op         82   1.22 1.28x   1.35 1.44x    60%
    inception_v3   64 op         84   1.22 1.25x   1.40 1.39x    60%
    inception_v3   16 propagated 18   1.02 0.93x   1.07 0.96x    74%
    inception_v3   16 revert     28   0.94 1.00x   1.08 1.03x    72%

With memory traced, both 1.0-1.3x (the memory trace is re-summed alike). The update
is nowhere near 3x: an op's edit moves 44-60 % of the step (the one device runs a deep
queue of ready ops, which the edit reorders until the step ends), and an exact update
costs per task what the event loop does, so it cannot beat 1/moved (the replay from
the edit's earliest effect re-runs some 70 % of RNNLM's tasks). docs/benchmarks.md
("Issue 31: delta simulation") has the full tables and what was tried.

**Synthetic graphs** (`--skip-synthetic` leaves them out), both with device memory as
pools:

- `step`: a training step on `devices` devices — per layer and device a forward and a
  backward compute task chained on the device, every fourth layer a transfer to the next
  device on its link, a gradient all-reduce per layer and device on the device's network
  stream; activations held from forward to backward.
- `random`: each task on a random device, depending on 1-3 of the 64 tasks added before it.

Each edit scales one random task's duration by 1.5 or 1/1.5 (`task`), or every
device's task of one random layer (`op`, one operator's configuration: `step` only);
the same edit sequence is timed with a full simulation and with a delta update after
each. Simulations per CPU second, 2026-11-28, same machine (load 8-10), main / branch:

    graph     tasks edit    full/s  delta/s  speedup     (16 devices)
    step       4992 task      67.4    157.4    2.34x  /  69.2  180.6  2.61x
    step       4992 op        61.8     80.1    1.30x  /  70.3   95.6  1.36x
    random     5000 task      38.8    117.0    3.02x  /  40.9  149.1  3.65x
    step       4992 task      64.1    221.6    3.46x  /  79.4  300.1  3.78x  (64 devices)
    step       4992 op        63.2     71.7    1.14x  /  75.4   93.4  1.24x
    random     5000 task      37.4    236.3    6.32x  /  38.6  248.7  6.45x

A one-task edit moves one device's chain, which the sparse update re-times alone; an
`op` edit moves every device's chain from its layer on to the end of the step (the
makespan moves), so the update re-runs the event loop from that layer: it saves the
part before the edit, never more, since an exact (float for float) update cannot shift
the later tasks by a constant and must re-time each of them.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))  # shard_checks, for `soap_edits`

from tasoc.sim import DeltaSimulator, Task, TaskGraph, Timeline, simulate
from tasoc.sim.core import paused_gc


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
    """Simulations per CPU second over `edits`, each applied and then simulated."""
    began = time.process_time()
    for task_ids, factor in edits:
        scale(graph, task_ids, factor)
        simulate_one()
    return len(edits) / (time.process_time() - began)


def measure(graph: TaskGraph, edits: list[tuple[list[int], float]]) -> tuple[float, float]:
    full = rate(graph, edits, lambda: simulate(graph))
    undo = [(task_ids, 1 / factor) for task_ids, factor in reversed(edits)]
    rate(graph, undo, lambda: None)
    delta = DeltaSimulator(graph)
    return full, rate(graph, edits, delta.update)


SOAP_MODELS: dict[str, dict[str, object]] = {"rnnlm": {"seq": 40}, "inception_v3": {"batch": 64}}
"""Options of the FlexFlow models whose training steps `soap_edits` runs by default: RNNLM
unrolled 40 steps, as the thesis runs it, and Inception-v3 at a global batch of 64
(another zoo model runs at its defaults)."""

SOAP_MACHINE = "k80-cluster"
"""FlexFlow's 64-GPU cluster (4, 16 and 64 of its devices)."""

EDIT_KINDS = ("op", "propagated", "revert")


class Edit(NamedTuple):
    """One update of a soap-shard chain, timed (`clock`) against `simulate`."""

    update_s: float
    simulate_s: float
    moved: float
    """The share of the step's tasks whose start or end the update changed (or added):
    what an exact update must write, whatever it skips."""


def clock(call: Callable[[], object]) -> float:
    """CPU seconds of this process one call of `call` takes: on a machine shared with
    other jobs, what the call did rather than how long it waited for a core."""
    began = time.process_time()
    call()
    return time.process_time() - began


def soap_edits(
    model: str, devices: int, proposals: int, memory: bool
) -> tuple[dict[str, list[Edit]], int]:
    """A chain of `proposals` of soap-shard's MCMC (seed 0, `mcmc.Chain`) from data
    parallel on `devices` of `SOAP_MACHINE`, every update it makes timed against
    `simulate` of the same, already built, graph (taken in turns: which runs first
    alternates), per edit kind: `op` (one op's configuration), `propagated` (an op and
    the readers that followed it), `revert` (a rejected proposal undone); and the
    step's task count."""
    # here, not at the top: the synthetic graphs need none of this (jax, xdsl, the zoo)
    from shard_checks import step_of

    from tasoc.cost.machines import machine
    from tasoc.ir import dag as dag_module
    from tasoc.ir.program import entry_function
    from tasoc.ir.training import training_signature
    from tasoc.passes.search import Deadline
    from tasoc.passes.soap import mcmc
    from tasoc.passes.soap.meshes import parse_mesh
    from tasoc.passes.soap.plan import Problem, complete
    from tasoc.passes.soap.problem import configurations
    from tasoc.passes.soap.simulated import SimulatedStrategy
    from tasoc.passes.soap.strategies import STRATEGIES

    step = step_of(model, SOAP_MODELS.get(model, {}))  # type: ignore[arg-type]
    dag = dag_module.from_module(step)
    problem = Problem(dag, parse_mesh(str(devices)), training_signature(entry_function(step)), {})
    plan = complete(problem, STRATEGIES["data-parallel"](problem))
    state = SimulatedStrategy.of(problem, plan, machine(SOAP_MACHINE), None, memory=memory)
    state.normalize()
    choices = {
        node: options
        for node, rule in problem.rules.items()
        if len(options := configurations(rule, problem.mesh)) > 1
    }
    chain = mcmc.Chain(state, choices, random.Random(0), 20.0)
    edits: dict[str, list[Edit]] = {kind: [] for kind in EDIT_KINDS}
    seen = [0, 0]  # the chain's proposals and propagated proposals at the last update
    simulator, graph, update = state.simulator, state.step.graph, state.simulator.update
    timelines: list[Timeline] = []

    def timed_update() -> Timeline:
        counts = [chain.proposals, chain.propagated]
        kind = "revert" if counts == seen else "propagated" if counts[1] > seen[1] else "op"
        seen[:] = counts
        before, update_first = simulator.timeline, len(edits[kind]) % 2 == 0
        if not update_first:
            full = clock(lambda: simulate(graph, memory=memory))
        delta = clock(lambda: timelines.append(update()))
        if update_first:
            full = clock(lambda: simulate(graph, memory=memory))
        after = timelines.pop()
        moved = sum(
            before.end.get(task_id) != end or before.start[task_id] != after.start[task_id]
            for task_id, end in after.end.items()
        )
        edits[kind].append(Edit(delta, full, moved / max(len(after.end), 1)))
        return after

    simulator.update = timed_update  # type: ignore[method-assign]
    with paused_gc():
        chain.run(proposals, Deadline.after(600))
    return edits, len(graph)


def soap_table(
    models: list[str], device_counts: list[int], proposals: int, memory: bool
) -> list[str]:
    """`soap_edits` per model and device count, one row per edit kind: the median update
    and full simulation, the median and interquartile range of their per-edit ratio,
    and the median share of tasks an update moved."""
    rows = [
        f"soap-shard MCMC edits ({proposals} proposals from data parallel, {SOAP_MACHINE}, "
        f"memory={memory}), CPU time, load {os.getloadavg()[0]:.2f}:",
        f"{'model':13} {'dev':>3} {'tasks':>6} {'edit':10} {'n':>4} {'update ms':>9} "
        f"{'full ms':>8} {'full/update':>11} {'IQR':>12} {'moved':>6}",
    ]
    for model in models:
        for devices in device_counts:
            edits, tasks = soap_edits(model, devices, proposals, memory)
            for kind, timed in edits.items():
                if not timed:
                    continue
                ratios = [edit.simulate_s / edit.update_s for edit in timed]
                low, high = quartiles(ratios)
                update = statistics.median(edit.update_s for edit in timed) * 1e3
                full = statistics.median(edit.simulate_s for edit in timed) * 1e3
                moved = statistics.median(edit.moved for edit in timed)
                rows.append(
                    f"{model:13} {devices:3} {tasks:6} {kind:10} {len(timed):4} {update:9.2f} "
                    f"{full:8.2f} {statistics.median(ratios):10.2f}x {low:5.2f}-{high:5.2f}x "
                    f"{moved:6.0%}"
                )
    rows.append(f"load {os.getloadavg()[0]:.2f} at the end")
    return rows


def quartiles(values: list[float]) -> tuple[float, float]:
    """The first and third quartiles, within the values (both the value, for one)."""
    if len(values) < 2:
        return values[0], values[0]
    low, _, high = statistics.quantiles(values, n=4, method="inclusive")
    return low, high


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=16)
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--edits", type=int, default=300)
    parser.add_argument("--soap", default="rnnlm,inception_v3", help="models ('' skips)")
    parser.add_argument("--soap-devices", default="4,16,64")
    parser.add_argument("--proposals", type=int, default=100)
    parser.add_argument("--memory", default="no,yes", help="soap runs without/with memory")
    parser.add_argument("--skip-synthetic", action="store_true")
    args = parser.parse_args(argv)
    if args.soap:
        counts = [int(count) for count in args.soap_devices.split(",")]
        for memory in args.memory.split(","):
            rows = soap_table(args.soap.split(","), counts, args.proposals, memory == "yes")
            print("\n".join(rows), end="\n\n")
    if args.skip_synthetic:
        return
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
