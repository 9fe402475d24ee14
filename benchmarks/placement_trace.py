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

`--shape` sets the model's options over `MODELS`' and `--capacity` the bytes over the
ratio's; `--hardness-only` prints the last line alone, without planning (SwapAdvisor's
NasNet-25 in 16 GB: `--shape repeat=25,batch=64 --capacity 16e9`). Every time is
simulated on `v100-swapadvisor`; the CPU is this process's.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from placement import (
    MACHINE,
    MODELS,
    QUICK_MODELS,
    SWAPADVISOR_RATIOS,
    reused_peak,
    training_step,
)

from tasoc.cost.machines import machine
from tasoc.ir.dag import Dag, Node, Value, from_module
from tasoc.ir.liveness import peak_memory, value_kinds
from tasoc.ir.memory import tensor_bytes
from tasoc.ir.placement_plan import PlacementPlan, Recompute, SwapIn, SwapOut
from tasoc.ir.program import entry_function
from tasoc.ir.training import TrainingSignature, training_signature
from tasoc.passes.placement.planning import PlanningOutcome, plan_within
from tasoc.passes.placement.problem import PlacementProblem
from tasoc.passes.placement.recompute import saved_activations
from tasoc.passes.placement.schedules import seed_orders
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
    copy: int | None = None
    """The schedule entry of that copy."""


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
        copy = copy_of.get(binding) if value is not None else None
        found.append(Wait(index, start[task_id] - ready, cause, value, copy))
    return found


def over_ideal(
    run: PlacedSimulation, schedule: Sequence[object], problem: PlacementProblem
) -> dict[str, float]:
    """Where `run`'s time over the ideal went, in seconds: `recompute` (the ops run
    again), `waits` (the compute stream's, `waits`) and `tail` (copies still running
    after the last op), beside `step` and `ideal` (the ops' own time)."""
    last_op = max(
        run.timeline.end[t] for t in run.tasks if t is not None and run.graph[t].resource == COMPUTE
    )
    return {
        "step": run.seconds,
        "ideal": run.compute_seconds,
        "recompute": sum(problem.seconds[e.node] for e in schedule if isinstance(e, Recompute)),
        "waits": sum(wait.seconds for wait in waits(run, schedule)),
        "tail": run.seconds - last_op,
    }


def _part(run: PlacedSimulation, copy: int) -> int:
    """The task of copy `copy` (its end task) that ended last: its run on its
    direction's stream, or its share of the link both directions share."""
    graph, end = run.graph, run.timeline.end
    if not isinstance(graph[copy].resource, tuple):  # one task: a link not shared
        return copy
    return max(graph[copy].deps, key=end.__getitem__)


def _late(
    run: PlacedSimulation, copy: int, copy_of: dict[int, int], schedule: Sequence[object]
) -> str:
    """Why swap-in `copy` (its end task) ended when it did: queued on its stream or on
    the shared link (the part of it that ended last), or its start waited for its place
    in the schedule (the op before it), for room (a swap-out), or for its own value's
    swap-out."""
    graph, start, end = run.graph, run.timeline.start, run.timeline.end
    part = _part(run, copy)
    deps = graph[part].deps
    ready = max((end[d] for d in deps), default=0.0)
    if start[part] > ready + 1e-9:
        return f"queued on the {graph[part].resource}"
    binding = max(deps, key=end.__getitem__)
    if graph[binding].resource == COMPUTE:
        return "placed late (its place in the schedule)"
    entry = schedule[copy_of[binding]] if binding in copy_of else None
    mine = schedule[copy_of[copy]]
    if isinstance(entry, SwapOut) and isinstance(mine, SwapIn) and entry.value == mine.value:
        return "its own swap-out"
    return "room (a swap-out)"


def queue_ahead(run: PlacedSimulation, schedule: Sequence[object], copy_entry: int) -> str:
    """The copies that ran where the copy of schedule entry `copy_entry` queued (the
    part of it that ended last: its stream, or the shared link) while it was ready:
    how many and their bytes, by direction."""
    graph, start, end = run.graph, run.timeline.start, run.timeline.end
    mine = run.tasks[copy_entry]
    assert mine is not None
    part = _part(run, mine)
    resource = graph[part].resource
    ready = max((end[d] for d in graph[part].deps), default=0.0)
    ahead: Counter[str] = Counter()
    count = 0
    for entry, task in enumerate(run.tasks):
        copy = schedule[entry]
        if task is None or task == mine or not isinstance(copy, SwapIn | SwapOut):
            continue
        parts = graph[task].deps if isinstance(graph[task].resource, tuple) else (task,)
        for other in parts:
            if graph[other].resource == resource and ready <= start[other] < start[part]:
                count += 1
                ahead[type(copy).__name__] += tensor_bytes(copy.value.sig)
    return f"{count} copies ran on the {resource} ahead of it while it was ready ({_mib(ahead)})"


def _mib(by: Counter[str]) -> str:
    return ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in by.most_common()) or "none"


def first_readers(schedule: Sequence[object]) -> dict[int, int]:
    """Each swap-in's entry -> the entry of the first op that reads the copy it makes."""
    pending: dict[Value, int] = {}
    found: dict[int, int] = {}
    for index, entry in enumerate(schedule):
        if isinstance(entry, SwapIn):
            pending[entry.value] = index
        elif isinstance(entry, Node | Recompute):
            node = entry.node if isinstance(entry, Recompute) else entry
            for value in node.inputs:
                if value in pending:
                    found[pending.pop(value)] = index
    return found


def phases(run: PlacedSimulation, schedule: Sequence[object], kinds: dict[Value, str]) -> None:
    """The forward pass (up to the start of the first op making a gradient) and the
    backward (the rest: an order from the outputs may run the loss's own ops last, so
    the last forward op is not where the backward starts): each one's length, and how
    busy compute and the copy streams were in it."""
    graph, start, end = run.graph, run.timeline.start, run.timeline.end
    last = min(
        start[task]
        for entry, task in zip(schedule, run.tasks, strict=True)
        if isinstance(entry, Node) and task is not None and kinds[entry.results[0]] == "gradients"
    )
    spans = {"forward": (0.0, last), "backward": (last, run.seconds)}
    for name, (lo, hi) in spans.items():
        busy = Counter[object]()
        for task_id in graph.ids():
            overlap = min(end[task_id], hi) - max(start[task_id], lo)
            if overlap > 0:
                busy[graph[task_id].resource] += overlap
        print(
            f"{name}: {(hi - lo) * MS:.1f} ms; busy "
            + ", ".join(
                f"{r} {busy[r] * MS:.1f}" for r in (COMPUTE, SWAP_IN, SWAP_OUT, "host-link")
            )
        )


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
) -> dict[str, float]:
    """Print the trace of `outcome`'s plan (module docstring); return where its time
    over the ideal went (`over_ideal`)."""
    dag, plan = problem.dag, outcome.plan
    run = outcome.simulated[outcome.plan_name]
    ideal = outcome.simulated["ideal"].seconds
    link = problem.machine.host
    kinds = value_kinds(dag, signature)
    print(f"planning: {cpu:.1f} s of CPU; phases (wall) {outcome.planner_seconds}")
    print(f"notes: {outcome.notes}")
    print(
        "fractions of ideal: "
        + ", ".join(f"{name} {ideal / sim.seconds:.1%}" for name, sim in outcome.simulated.items())
    )
    print(f"plan kept: {outcome.plan_name}")
    if outcome.recomputed is not None:
        rec = outcome.recomputed
        joint = rec.joint
        print(
            f"recompute rule: ratio {rec.rule.ratio}, several {rec.rule.several}, depth "
            f"{rec.rule.depth}, candidates {rec.candidates}; joint: "
            + (
                f"{joint.to_swap} to swap, {joint.to_recompute} to recompute, "
                f"{joint.evaluations} plans"
                if joint
                else "not run"
            )
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
    phases(run, plan.schedule, kinds)
    over = over_ideal(run, plan.schedule, problem)
    recompute_s = over["recompute"]
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
    print(
        f"compute stream waits {over['waits'] * MS:.1f} ms in {len(found)} waits, and copies "
        f"run {over['tail'] * MS:.1f} ms after the last op:"
    )
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
        what = (
            ""
            if value is None
            else (
                f" for {_name(dag, value)} "
                f"({kinds[value]}, {tensor_bytes(value.sig) / 2**20:.0f} MiB)"
            )
        )
        print(
            f"  {wait.seconds * MS:6.2f} ms before {getattr(node, 'op', node)} "
            f"(entry {wait.entry}){what}: {wait.cause}{_ahead(run, plan.schedule, wait)}"
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
    return over


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
        tensor_bytes(v.sig) for node in dag.ops for v in node.results if kinds[v] == "activations"
    )
    every = sum(tensor_bytes(v.sig) for node in dag.ops for v in node.results)
    print(
        f"capacity {capacity / GB:.3f} GB: largest op {op.op} holds {needed / GB:.3f} GB "
        f"({capacity / needed:.2f}x); arguments {_gb(dict(args))} "
        f"(params {capacity / max(args['params'], 1):.2f}x); saved activations "
        f"{saved / GB:.2f} GB ({saved / capacity:.2f}x the capacity); every forward result "
        f"{forward / GB:.2f} GB, every result {every / GB:.2f} GB"
    )


def _ahead(run: PlacedSimulation, schedule: Sequence[object], wait: Wait) -> str:
    """For a wait on a queued copy (or on its value's queued swap-out): what ran ahead of
    it where it queued."""
    if wait.copy is None:
        return ""
    entry = wait.copy
    if "own swap-out" in wait.cause:  # the value's swap-out before this swap-in
        entry = max(
            i
            for i in range(wait.copy)
            if isinstance(schedule[i], SwapOut) and schedule[i].value == wait.value  # type: ignore[attr-defined]
        )
    elif "queued" not in wait.cause:
        return ""
    return f" [{queue_ahead(run, schedule, entry)}]"


def _options(given: str) -> dict[str, int | float | str]:
    """`key=value,...` (`--shape`) as model options, numbers as numbers."""
    found: dict[str, int | float | str] = {}
    for item in filter(None, given.split(",")):
        key, value = item.split("=", 1)
        for kind in (int, float):
            try:
                found[key] = kind(value)
                break
            except ValueError:
                continue
        else:
            found[key] = value
    return found


def _records(prices: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The prices that beat every earlier one (the plans priced after the ideal's)."""
    best, found = float("inf"), []
    for cpu_s, seconds in prices:
        if seconds < best:
            best = seconds
            found.append((cpu_s, seconds))
    return found


def _name(dag: Dag, value: Value) -> str:
    """`op#k` (the op's place in the step's own schedule), or `argument k`."""
    node = value.node
    return f"argument {dag.args.index(node)}" if node.is_arg else f"{node.op}#{dag.ops.index(node)}"


def _gb(by: dict[str, int]) -> str:
    return ", ".join(f"{k} {v / GB:.2f} GB" for k, v in sorted(by.items(), key=lambda i: -i[1]))


def _ms(by: Counter[str]) -> str:
    return ", ".join(f"{k} {v * MS:.1f} ms" for k, v in by.most_common())


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="nasnet", choices=sorted(MODELS))
    parser.add_argument("--quick", action="store_true", help="a tiny RNN (smoke test)")
    parser.add_argument("--ratio", default="sa", help="a number, or sa (SwapAdvisor's own)")
    parser.add_argument("--in-place", action="store_true", help="in-place=on")
    parser.add_argument("--timeout", type=float, default=None, help="seconds; none: no limit")
    parser.add_argument("--top", type=int, default=12, help="the largest waits listed")
    parser.add_argument(
        "--shape", default="", help="the model's options over MODELS', e.g. repeat=25,batch=64"
    )
    parser.add_argument("--capacity", type=float, help="bytes, instead of the ratio's")
    parser.add_argument(
        "--hardness-only", action="store_true", help="the capacity against the step; no plan"
    )
    args = parser.parse_args(argv)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.2f}")
    models = dict(QUICK_MODELS if args.quick else MODELS)
    name = next(iter(QUICK_MODELS)) if args.quick else args.model
    options, loss = models[name]
    models[name] = (options | _options(args.shape), loss)
    step = training_step(name, models)
    function = entry_function(step)
    peak = reused_peak(step) if args.in_place else peak_memory(function).peak_bytes
    ratio = SWAPADVISOR_RATIOS[name] if args.ratio == "sa" else float(args.ratio)
    capacity = int(args.capacity) if args.capacity is not None else int(peak / ratio)
    signature = training_signature(function)
    assert signature is not None
    dag = from_module(step, keep_order=True)
    cluster = machine(MACHINE)
    print(
        f"# {name} {models[name][0]}: {len(dag.ops)} ops, peak {peak / GB:.3f} GB, "
        f"capacity {capacity / GB:.3f} GB (x{peak / capacity:.3g})"
    )
    if args.hardness_only:
        problem = PlacementProblem.of(dag, signature, capacity, cluster, in_place=args.in_place)
        hardness(dag, problem, signature, value_kinds(dag, signature))
        return {}
    deadline = Deadline.after(args.timeout) if args.timeout is not None else None
    cpu = time.process_time()
    prices: list[tuple[float, float]] = []  # (CPU so far, simulated seconds) per plan priced
    simulate = PlacementProblem.simulate

    def probed(self: PlacementProblem, plan: PlacementPlan) -> PlacedSimulation:
        """The one simulator, unchanged, with the CPU at which each plan was priced."""
        run = simulate(self, plan)
        prices.append((time.process_time() - cpu, run.seconds))
        return run

    PlacementProblem.simulate = probed  # type: ignore[method-assign]
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
    PlacementProblem.simulate = simulate  # type: ignore[method-assign]
    problem = PlacementProblem.of(dag, signature, capacity, cluster, in_place=args.in_place)
    kept = outcome.simulated[outcome.plan_name].seconds
    ideal = outcome.simulated["ideal"].seconds
    reached = next(i for i, (_, seconds) in enumerate(prices) if seconds == kept)
    print(
        f"the kept plan's time was first priced after {prices[reached][0]:.1f} s of CPU, "
        f"plan {reached + 1} of the {len(prices)} priced; the best so far as the CPU went "
        "(s: % of ideal): "
        + ", ".join(
            f"{cpu_s:.1f}: {ideal / seconds:.1%}" for cpu_s, seconds in _records(prices[1:])
        )
    )
    orders = {"own": tuple(dag.ops)} | {
        f"seed {i}": tuple(order) for i, order in enumerate(seed_orders(dag))
    }
    print(f"its schedule: {[k for k, o in orders.items() if o == tuple(outcome.plan.order)]}")
    accounted = report(outcome, problem, signature, cpu, args.top)
    print(f"# load at the end {os.getloadavg()[0]:.2f}", file=sys.stderr)
    return accounted


if __name__ == "__main__":
    main()
