"""One row of issue 32's placement table traced: where the kept plan's step waits, and why.

    PYTHONPATH=$PWD python benchmarks/placement_trace.py --model nasnet --ratio sa --in-place

`benchmarks/placement.py` gives a row's fraction of ideal; this says what the plan
behind it does (issue 32, "NasNet at SwapAdvisor's ratio, traced"). It builds the
row's step as that benchmark does (`MODELS`, the peak with buffer reuse under
`--in-place`), plans it with `placement{search=belady recompute=on}`'s planning
(`plan_within`: the baselines, then the recomputation pricing and the joint choice on
the step's own schedule and the seed schedules; no GA, whose plan the recomputation
pricing starts from only when it found one that fits), with no deadline unless
`--timeout` gives one, and prints, on the simulated timeline of the plan kept:

- the CPU each phase took (`planner_seconds`) and the whole planning's;
- bytes swapped out and in, by value kind, against the host link (each way at its
  one-way bandwidth, both together at the shared one) and the ideal step;
- ops run again and their compute, and how long the compute stream waited, split by
  what each wait was for — a swap-in (and then why the copy ended late: queued behind
  other swap-ins, placed late in the schedule, waiting for room or for its own
  swap-out), or a swap-out whose bytes the op needed (the capacity's control edges);
- the largest waits one by one;
- the lower bound's floors, and how hard the capacity is: against the largest op's
  working set, the params, the saved activations.

Every time is simulated on `v100-swapadvisor`; the CPU is this process's.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from placement import MACHINE, MODELS, SWAPADVISOR_RATIOS, reused_peak, training_step

from tasoc.cost.machines import machine
from tasoc.ir.dag import Dag, Node, Value, from_module
from tasoc.ir.liveness import peak_memory, value_kinds
from tasoc.ir.memory import tensor_bytes
from tasoc.ir.placement_plan import Recompute, SwapIn, SwapOut
from tasoc.ir.program import entry_function
from tasoc.ir.training import TrainingSignature, training_signature
from tasoc.passes.placement.planning import PlanningOutcome, plan_within
from tasoc.passes.placement.problem import PlacementProblem
from tasoc.passes.placement.recompute import saved_activations
from tasoc.passes.placement.swap_planner import working_set
from tasoc.passes.search import Deadline
from tasoc.sim.placement import COMPUTE, SWAP_IN, SWAP_OUT, PlacedSimulation

GB = 1e9
MS = 1e3


@dataclass(frozen=True)
class Wait:
    """One wait of the compute stream: before `entry` (a schedule index) started."""

    entry: int
    seconds: float
    cause: str
    """`swap-in: <why the copy ended late>`, `swap-out (room)` or `other`."""
    value: Value | None
    """The value copied, for a wait on a copy."""


def waits(run: PlacedSimulation, schedule: Sequence[object]) -> list[Wait]:
    """The compute stream's waits on `run`, each attributed to the dependency that ended
    last: the copy the op read (or the swap-out it waited for room on)."""
    graph, start, end = run.graph, run.timeline.start, run.timeline.end
    copy_of = {task: i for i, task in enumerate(run.tasks) if task is not None}
    found, previous = [], None
    for index, task_id in enumerate(run.tasks):
        if task_id is None or graph[task_id].resource != COMPUTE:
            continue
        ready = end[previous] if previous is not None else 0.0
        previous = task_id
        if start[task_id] <= ready + 1e-12:
            continue
        binding = max(graph[task_id].deps, key=end.__getitem__)
        entry = schedule[copy_of[binding]] if binding in copy_of else None
        cause, value = "other", None
        if isinstance(entry, SwapIn):
            cause, value = f"swap-in: {_late(run, binding, copy_of, schedule)}", entry.value
        elif isinstance(entry, SwapOut):
            cause, value = "swap-out (room)", entry.value
        found.append(Wait(index, start[task_id] - ready, cause, value))
    return found


def _late(
    run: PlacedSimulation, copy: int, copy_of: dict[int, int], schedule: Sequence[object]
) -> str:
    """Why swap-in `copy` (its end task) ended when it did: queued behind other
    swap-ins on its stream, or its start waited for its place in the schedule (the op
    before it), for room (a swap-out), or for its own value's swap-out."""
    graph, start, end = run.graph, run.timeline.start, run.timeline.end
    one_way = next(d for d in graph[copy].deps if graph[d].resource == SWAP_IN)
    deps = graph[one_way].deps
    ready = max((end[d] for d in deps), default=0.0)
    if start[one_way] > ready + 1e-9:
        return "queued behind swap-ins"
    binding = max(deps, key=end.__getitem__)
    if graph[binding].resource == COMPUTE:
        return "placed late (its place in the schedule)"
    entry = schedule[copy_of[binding]] if binding in copy_of else None
    if isinstance(entry, SwapOut) and entry.value == schedule[copy_of[copy]].value:  # type: ignore[attr-defined]
        return "its own swap-out"
    return "room (a swap-out)"


def kinds_of(values: Sequence[Value], kinds: dict[Value, str]) -> dict[str, int]:
    counted: Counter[str] = Counter()
    for value in values:
        counted[kinds[value]] += tensor_bytes(value.sig)
    return dict(counted)


def report(
    outcome: PlanningOutcome,
    problem: PlacementProblem,
    signature: TrainingSignature,
    cpu: float,
    top: int,
) -> None:
    """Print the trace of `outcome`'s plan (module docstring)."""
    dag, plan = problem.dag, outcome.plan
    run = outcome.simulated[outcome.plan_name]
    ideal = outcome.simulated["ideal"].seconds
    link = problem.machine.host
    kinds = value_kinds(dag, signature)
    print(f"planning: {cpu:.1f} s of CPU; phases (wall) {outcome.planner_seconds}")
    print(f"notes: {outcome.notes}")
    print(f"fractions of ideal: " + ", ".join(
        f"{name} {ideal / sim.seconds:.1%}" for name, sim in outcome.simulated.items()
    ))
    print(f"plan kept: {outcome.plan_name}")
    if outcome.recomputed is not None:
        rec = outcome.recomputed
        joint = rec.joint
        print(
            f"recompute rule: ratio {rec.rule.ratio}, several {rec.rule.several}, depth "
            f"{rec.rule.depth}, candidates {rec.candidates}; joint: "
            + (f"{joint.to_swap} to swap, {joint.to_recompute} to recompute, "
               f"{joint.evaluations} plans" if joint else "not run")
        )
    print(
        f"step {run.seconds * MS:.1f} ms against ideal {ideal * MS:.1f} ms: "
        f"{ideal / run.seconds:.1%}; over ideal {(run.seconds - ideal) * MS:.1f} ms"
    )
    ins = [e.value for e in plan.schedule if isinstance(e, SwapIn)]
    outs = [e.value for e in plan.schedule if isinstance(e, SwapOut)]
    again = [e.node for e in plan.schedule if isinstance(e, Recompute)]
    bytes_in = sum(tensor_bytes(v.sig) for v in ins)
    bytes_out = sum(tensor_bytes(v.sig) for v in outs)
    print(
        f"swapped in {bytes_in / GB:.2f} GB ({len(ins)} copies; {_gb(kinds_of(ins, kinds))}), "
        f"out {bytes_out / GB:.2f} GB ({len(outs)}; {_gb(kinds_of(outs, kinds))})"
    )
    both = link.shared_time(bytes_in + bytes_out)
    print(
        f"link: in alone {link.time(bytes_in) * MS:.1f} ms, out alone "
        f"{link.time(bytes_out) * MS:.1f} ms, both over the shared link "
        f"{(both or 0.0) * MS:.1f} ms, against ideal {ideal * MS:.1f} ms"
    )
    busy = Counter[object]()
    for task_id in run.graph.ids():
        task = run.graph[task_id]
        busy[task.resource] += run.timeline.end[task_id] - run.timeline.start[task_id]
    print(
        "busy: "
        + ", ".join(
            f"{r} {busy[r] * MS:.1f} ms ({busy[r] / run.seconds:.0%})"
            for r in (COMPUTE, SWAP_IN, SWAP_OUT, "host-link")
        )
    )
    recompute_s = sum(problem.seconds[node] for node in again)
    recomputed = sum(tensor_bytes(v.sig) for node in again for v in node.results)
    by_op = Counter(node.op for node in again)
    print(
        f"run again: {len(again)} ops, {recompute_s * MS:.1f} ms of compute, "
        f"{recomputed / GB:.2f} GB of results; {by_op.most_common(6)}"
    )
    found = waits(run, plan.schedule)
    causes: Counter[str] = Counter()
    for wait in found:
        causes[wait.cause] += wait.seconds
    stalled = sum(causes.values())
    print(f"compute stream waits {stalled * MS:.1f} ms in {len(found)} waits:")
    for cause, seconds in causes.most_common():
        print(f"  {cause}: {seconds * MS:.1f} ms")
    waited_for = Counter[str]()
    for wait in found:
        if wait.value is not None:
            waited_for[kinds[wait.value]] += wait.seconds
    print(f"  by the kind of the value copied: {_ms(waited_for)}")
    print(f"largest {top} waits:")
    for wait in sorted(found, key=lambda w: -w.seconds)[:top]:
        entry = plan.schedule[wait.entry]
        node = entry.node if isinstance(entry, Recompute) else entry
        value = wait.value
        what = "" if value is None else (
            f" for {_name(dag, value)} "
            f"({kinds[value]}, {tensor_bytes(value.sig) / 2**20:.0f} MiB)"
        )
        print(
            f"  {wait.seconds * MS:6.2f} ms before {getattr(node, 'op', node)} "
            f"(entry {wait.entry}){what}: {wait.cause}"
        )
    bound = outcome.bound
    if bound is not None:
        print(
            f"bound: {ideal / bound.seconds:.1%} ({bound.binds} binds): compute "
            f"{bound.compute_seconds * MS:.1f} ms, persistent {bound.persistent_seconds * MS:.1f}, "
            f"cut {bound.cut_seconds * MS:.1f} (excess {bound.cut_excess_bytes / GB:.2f} GB, "
            f"crossing {bound.crossing_bytes / GB:.2f} GB), chain {bound.chain_seconds * MS:.1f} "
            f"({bound.chain_cuts} cuts, {bound.chain_bytes / GB:.2f} GB in); least peak "
            f"{bound.least_peak_bytes / GB:.3f} GB"
        )
    hardness(dag, problem, signature, kinds)


def hardness(
    dag: Dag, problem: PlacementProblem, signature: TrainingSignature, kinds: dict[Value, str]
) -> None:
    """The capacity against what a step must hold: its largest op, its params, its
    saved activations."""
    capacity = problem.capacity
    op, needed = working_set(dag, problem.in_place)
    args = Counter[str]()
    for arg in dag.args:
        args[kinds[arg.out]] += tensor_bytes(arg.out.sig)
    saved = sum(tensor_bytes(v.sig) for v in saved_activations(problem))
    forward = sum(
        tensor_bytes(v.sig) for node in dag.ops for v in node.results
        if kinds[v] == "activations"
    )
    print(
        f"capacity {capacity / GB:.3f} GB: largest op {op.op} holds {needed / GB:.3f} GB "
        f"({capacity / needed:.2f}x); arguments {_gb(dict(args))} "
        f"(params {capacity / max(args['params'], 1):.2f}x); saved activations "
        f"{saved / GB:.2f} GB ({saved / capacity:.1f}x the capacity), every forward result "
        f"{forward / GB:.2f} GB"
    )


def _name(dag: Dag, value: Value) -> str:
    """`op#k` (the op's place in the step's own schedule), or `argument k`."""
    node = value.node
    return f"argument {dag.args.index(node)}" if node.is_arg else f"{node.op}#{dag.ops.index(node)}"


def _gb(by: dict[str, int]) -> str:
    return ", ".join(f"{k} {v / GB:.2f} GB" for k, v in sorted(by.items(), key=lambda i: -i[1]))


def _ms(by: Counter[str]) -> str:
    return ", ".join(f"{k} {v * MS:.1f} ms" for k, v in by.most_common())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="nasnet", choices=sorted(MODELS))
    parser.add_argument("--ratio", default="sa", help="a number, or sa (SwapAdvisor's own)")
    parser.add_argument("--in-place", action="store_true", help="in-place=on")
    parser.add_argument("--timeout", type=float, default=None, help="seconds; none: no limit")
    parser.add_argument("--top", type=int, default=12, help="the largest waits listed")
    args = parser.parse_args(argv)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.2f}")
    step = training_step(args.model, MODELS)
    function = entry_function(step)
    peak = reused_peak(step) if args.in_place else peak_memory(function).peak_bytes
    ratio = SWAPADVISOR_RATIOS[args.model] if args.ratio == "sa" else float(args.ratio)
    capacity = int(peak / ratio)
    signature = training_signature(function)
    assert signature is not None
    dag = from_module(step, keep_order=True)
    cluster = machine(MACHINE)
    print(f"# {args.model} x{ratio:g}: {len(dag.ops)} ops, peak {peak / GB:.3f} GB, "
          f"capacity {capacity / GB:.3f} GB")
    deadline = Deadline.after(args.timeout) if args.timeout is not None else None
    cpu = time.process_time()
    outcome = plan_within(
        dag,
        signature,
        capacity,
        peak_memory(function).peak_bytes,
        "belady",
        cluster,
        recompute=True,
        deadline=deadline,
        in_place=args.in_place,
    )
    cpu = time.process_time() - cpu
    problem = PlacementProblem.of(dag, signature, capacity, cluster, in_place=args.in_place)
    report(outcome, problem, signature, cpu, args.top)
    print(f"# load at the end {os.getloadavg()[0]:.2f}", file=sys.stderr)


if __name__ == "__main__":
    main()
