"""The task graph of a memory-placed training step (SwapAdvisor's dataflow simulation,
Huang thesis §4.4), on the one simulator of `tasoc.sim.core`.

A `PlacementPlan` (`tasoc.ir.placement_plan`: the placed block as a list of ops and
moves) runs on one device with three streams, SwapAdvisor's (§4.3.1): `COMPUTE` runs
the ops in the plan's order, `SWAP_OUT` and `SWAP_IN` copy tensors to and from host
memory over the machine's host link (`Machine.host`: size / bandwidth + latency,
FlexFlow's A2), each its own FIFO resource, so copies overlap compute and each other.
Where the link's two directions share a capacity (`Link.duplex_bandwidth`: SwapAdvisor's
PCIe, 12 GB/s one way, 20 GB/s both ways together), a copy is two tasks that start
together — one on its direction's stream at the one-way bandwidth, one on the shared
`HOST_LINK` at the duplex bandwidth — and ends when both have: alone it runs at the
one-way rate, and swap-outs and swap-ins together never pass the duplex rate.
Device memory is the pool `DEVICE`. One device of a sharded step (placement's device
view) runs its collectives on a fourth stream, `NETWORK`, in the schedule's order,
each waiting for the copies it reads, so communication overlaps compute and swaps as
on soap-shard's simulator.

- An op's task follows the op before it (the schedule), and waits for the swap-ins
  that made the device copies it reads. It takes its results' bytes when it starts.
  An op run again (`Recompute`) is an op like the others, on the compute stream, for
  the op's time again: what recomputation costs.
- A swap-out waits for the task that made the device copy it reads (as early as
  safe: right after its producer, Fig. 4.3); a swap-in waits for the swap-out that
  made the host copy, and for the op before it in the schedule to end — where it
  stands is when it may start, since memory freed by that op is what it takes. It
  takes its bytes when it starts.
- A device copy's bytes are given back when its last reader (op or swap-out) ends;
  an argument's only if the plan releases it (the caller holds it otherwise); a
  returned value's never. An op that writes its result over an operand's copy dying
  at it (`PlacementPlan.in_place`, `placement_plan.in_place_entries`: an element-wise
  op, as XLA's buffer assignment shares the buffer) takes no bytes for that result and
  gives none back for that copy: the bytes pass from one to the other; it also waits
  for a swap-out still copying that copy.
- With a `capacity`: the order-based replay (`memory.replay`) frees a copy whose last
  reader is a swap-out right after the swap-out *starts*, but the bytes come back only
  when the copy *ends*. So an op or swap-in that takes memory waits for the oldest
  swap-outs still copying until what the replay holds plus what those copies hold
  fits the capacity — SwapAdvisor's control edges from a swap-out to the allocation
  it makes room for. Without one, nothing waits for memory.
- Memory is counted in bytes, also for a plan with a memory pool (`PlacementPlan.pool`,
  SwapAdvisor §4.3.1): the pool's objects are counted by the replay (`memory.replay`,
  which the verifier runs and the swap planner plans by), and a pool holds at most its
  total bytes, within the capacity. The simulator prices the runtime that runs a placed
  program — XLA's allocator, which has no pool — so a swap-in waits for bytes, not for
  an object of its class.

`simulate_plan` gives the iteration time, the device peak over time (at most the
capacity when there is one), the bytes each way and the stall (time the compute
stream waited, the iteration time over the ops' own).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tasoc.cost.machines import Machine
from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.memory import Space, tensor_bytes
from tasoc.ir.placement_plan import (
    CopyKey,
    PlacementPlan,
    Recompute,
    SwapIn,
    SwapOut,
    check_plan,
    in_place_entries,
)
from tasoc.sim.core import Task, TaskGraph, Timeline, paused_gc, simulate

COMPUTE = "compute"
SWAP_OUT = "swap-out"
SWAP_IN = "swap-in"
NETWORK = "network"
HOST_LINK = "host-link"
DEVICE = "device"


def stream_of(node: Node) -> str:
    """The stream an op runs on: collectives (`parallel.*` nodes of a sharded step's
    device view) on the network stream, beside compute, every other op on compute."""
    return NETWORK if node.op.startswith("parallel.") else COMPUTE


def op_seconds(dag: Dag, machine: Machine) -> dict[Node, float]:
    """Each op's time on one device of `machine`, as the machine prices ops
    (`Machine.op_seconds`: what soap-shard's simulator charges, at full shapes)."""
    return {node: machine.op_seconds(node) for node in dag.ops}


@dataclass(frozen=True)
class PlacedSimulation:
    """A simulated iteration of a placed step (module docstring)."""

    seconds: float
    """The iteration time (makespan)."""
    compute_seconds: float
    """The compute stream's ops' own time, summed: the iteration time with infinite
    memory and, for a sharded step, communication hidden behind compute."""
    peak_bytes: int
    """The most device bytes held at any instant."""
    swapped_out_bytes: int
    swapped_in_bytes: int
    recomputed_bytes: int
    """Bytes of the results of ops run again (`Recompute`): what recomputation brought
    back instead of a swap-in."""
    timeline: Timeline
    graph: TaskGraph
    tasks: tuple[int | None, ...]
    """The task of each schedule entry (None for a `Release`): rows of a picture."""

    @property
    def stall_seconds(self) -> float:
        return self.seconds - self.compute_seconds

    @property
    def fraction_of_ideal(self) -> float:
        """The ideal (infinite memory: the ops alone) over this iteration's time."""
        return self.compute_seconds / self.seconds if self.seconds else 1.0


@paused_gc()  # some 10^4-10^5 tasks, no cycles among them: see `paused_gc`
def placed_task_graph(
    dag: Dag,
    plan: PlacementPlan,
    machine: Machine,
    seconds: Mapping[Node, float],
    spaces: Sequence[Space] | None = None,
) -> tuple[TaskGraph, tuple[int | None, ...]]:
    """The task graph of `plan` (module docstring) and each entry's task; PlanError
    for a plan that cannot run (`check_plan`)."""
    copies = check_plan(dag, plan, spaces)
    size = {key: tensor_bytes(value.sig) for key, value in copies.value_of.items()}
    # an op writing its result over an operand's copy (`PlacementPlan.in_place`) takes
    # no new bytes for it, and that copy's bytes are not given back at its end
    reused = {i: copies.reads[i][operand] for i, operand in in_place_entries(plan, copies).items()}
    reused_bytes = {i: size[key] for i, key in reused.items()}
    # A copy's bytes go back at the end of its last reader, unless it lives to the end.
    frees: dict[int, int] = {}
    dying: dict[int, int] = {}  # the replay's: bytes that die after each entry
    taken = set(reused.values())
    for key, dies in copies.dies.items():
        if dies is not None and key not in taken:
            at = copies.last_read[key]
            frees[at] = frees.get(at, 0) + size[key]
            dying[dies] = dying.get(dies, 0) + size[key]
    graph = TaskGraph()
    arguments = sum(size[key] for key in copies.value_of if key[0] < 0)
    start = graph.add(
        Task(COMPUTE, 0.0, (), ((DEVICE, arguments),), ((DEVICE, frees.get(-1, 0)),), "arguments")
    )
    made: dict[CopyKey, int] = {key: start for key in copies.value_of if key[0] < 0}
    host_made: dict[Value, int] = {}  # value -> the swap-out task of its host copy
    copied_out: dict[CopyKey, int] = {}  # a copy -> the swap-out task reading it
    room = _Room(plan.capacity, arguments)
    tasks: list[int | None] = []
    last_compute = start  # the last op's task, on either stream: where a swap-in stands
    last_on: dict[str, int] = {}
    for index, entry in enumerate(plan.schedule):
        free = ((DEVICE, frees.get(index, 0)),)
        task_id: int | None = None
        if isinstance(entry, Node | Recompute):
            node = entry if isinstance(entry, Node) else entry.node
            results = sum(tensor_bytes(v.sig) for v in node.results) - reused_bytes.get(index, 0)
            stream = stream_of(node)
            deps = (last_on.get(stream, start), *(made[key] for key in copies.reads[index]))
            if index in reused and reused[index] in copied_out:  # overwrite it once copied
                deps += (copied_out[reused[index]],)
            task_id = last_compute = last_on[stream] = graph.add(
                Task(
                    stream,
                    seconds[node],
                    (*deps, *room.take(results)),
                    ((DEVICE, results),),
                    free,
                    node.op,
                )
            )
            made.update({(index, v.index): task_id for v in node.results})
        elif isinstance(entry, SwapOut):
            (key,) = copies.reads[index]
            nbytes = size[key]
            task_id = _copy(graph, machine, SWAP_OUT, nbytes, (made[key],), (), free)
            host_made[entry.value] = copied_out[key] = task_id
            if copies.last_read[key] == index and copies.dies[key] is not None:
                room.copying(task_id, nbytes)  # the replay frees it by now; the copy ends later
        elif isinstance(entry, SwapIn):
            nbytes = size[(index, 0)]
            deps = (last_compute, *((host_made[entry.value],) if entry.value in host_made else ()))
            deps += room.take(nbytes)
            task_id = _copy(graph, machine, SWAP_IN, nbytes, deps, ((DEVICE, nbytes),), free)
            made[(index, 0)] = task_id
        tasks.append(task_id)
        room.release(dying.get(index, 0))
    return graph, tuple(tasks)


def _copy(
    graph: TaskGraph,
    machine: Machine,
    stream: str,
    nbytes: int,
    deps: tuple[int, ...],
    alloc: tuple[tuple[str, int], ...],
    free: tuple[tuple[str, int], ...],
) -> int:
    """Add a copy of `nbytes` over the host link on `stream` (module docstring): its
    task, or the task at the end of its two on a link whose directions share a
    capacity. `alloc` is taken when it starts, `free` given back when it ends."""
    shared = machine.host.shared_time(nbytes)
    own = machine.host.time(nbytes)
    if shared is None:
        return graph.add(Task(stream, own, deps, alloc, free, stream))
    one_way = graph.add(Task(stream, own, deps, alloc, (), stream))
    both = graph.add(Task(HOST_LINK, shared, deps, (), (), stream))
    return graph.add(Task(("end", one_way), 0.0, (one_way, both), (), free, stream))


class _Room:
    """The capacity's control edges (module docstring): the bytes the replay holds
    along the schedule, and the swap-outs whose copies it has freed but which may
    still be copying (oldest first: one swap-out stream ends them in order)."""

    def __init__(self, capacity: int | None, held: int) -> None:
        self.capacity = capacity
        self.held = held
        self.pending: deque[tuple[int, int]] = deque()  # (swap-out task, bytes)
        self.copying_bytes = 0

    def take(self, nbytes: int) -> tuple[int, ...]:
        """The swap-outs an entry taking `nbytes` waits for; the bytes are then held."""
        waits = []
        if self.capacity is not None:
            while self.pending and self.held + nbytes + self.copying_bytes > self.capacity:
                task, done = self.pending.popleft()
                waits.append(task)
                self.copying_bytes -= done
        self.held += nbytes
        return tuple(waits)

    def copying(self, task: int, nbytes: int) -> None:
        self.pending.append((task, nbytes))
        self.copying_bytes += nbytes

    def release(self, nbytes: int) -> None:
        self.held -= nbytes


def simulate_plan(
    dag: Dag,
    plan: PlacementPlan,
    machine: Machine,
    seconds: Mapping[Node, float] | None = None,
    spaces: Sequence[Space] | None = None,
) -> PlacedSimulation:
    """Simulate one iteration of `plan` on `machine` (op times: `seconds`, else the
    machine's prices, `op_seconds`)."""
    times = seconds if seconds is not None else op_seconds(dag, machine)
    graph, tasks = placed_task_graph(dag, plan, machine, times, spaces)
    timeline = simulate(graph)
    moved = {SwapOut: 0, SwapIn: 0, Recompute: 0}
    for entry in plan.schedule:
        if isinstance(entry, SwapOut | SwapIn):
            moved[type(entry)] += tensor_bytes(entry.value.sig)
        elif isinstance(entry, Recompute):
            moved[Recompute] += sum(tensor_bytes(v.sig) for v in entry.node.results)
    return PlacedSimulation(
        seconds=timeline.makespan,
        compute_seconds=sum(times[node] for node in dag.ops if stream_of(node) == COMPUTE),
        peak_bytes=timeline.peak.get(DEVICE, 0),
        swapped_out_bytes=moved[SwapOut],
        swapped_in_bytes=moved[SwapIn],
        recomputed_bytes=moved[Recompute],
        timeline=timeline,
        graph=graph,
        tasks=tasks,
    )
