"""`placement`: place a training step's tensors in device or host memory.

    tasoc opt step.mlir -p 'placement{search=offload-all capacity=16GiB params=host}'

writes a memory-placed program (the `memory` dialect, docs/memory.md): the schedule,
host arguments, swaps and frees, and the module's `memory.capacity` and `memory.plan`.
The pass is a shell: read `@main` into the light graph with its op order (the
schedule), plan there (`offload.py`), write the plan back (`placement_plan.py`),
replay the placed schedule for the device memory it holds, report. `offload-all` is
the manual plan; `belady` and `lru` plan swaps within a capacity (`planning.py`,
`swap_planner.py`), priced by the placed-step simulator (`tasoc.sim.placement`); `ga`
searches schedules and memory pools for the swap planner (`ga.py`). A searching
planner is one entry of `PlacementPass.searching`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, Literal, cast

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from tasoc.cost.machines import Machine, MachineError, machine
from tasoc.ir import dag as dag_module
from tasoc.ir.dag import Dag, Node
from tasoc.ir.limits import bytes_and_size, format_bytes
from tasoc.ir.liveness import peak_memory
from tasoc.ir.memory import Replay, Space, moved_bytes, replay, unplaced
from tasoc.ir.parallel import is_sharded, machine_of, meshes, unsharded
from tasoc.ir.placement_plan import PlacementPlan, set_figures, write_placed, write_placed_in
from tasoc.ir.program import entry_function
from tasoc.ir.training import TrainingSignature, training_signature
from tasoc.passes.kinds import Kind, PassContract, require
from tasoc.passes.options import (
    check_at_least,
    check_byte_size,
    check_fraction,
    check_option_types,
    parse_byte_size,
)
from tasoc.passes.placement.device_view import DeviceView, device_view
from tasoc.passes.placement.dp import DEFAULT_MAX_STATES, dp_search
from tasoc.passes.placement.ga import GASettings, ga_search, random_search
from tasoc.passes.placement.offload import offload_all
from tasoc.passes.placement.planning import Searching, plan_within
from tasoc.passes.placement.problem import Searcher, SearchLimits
from tasoc.passes.placement.roc_dp import StateSpaceTooLarge, roc_search
from tasoc.passes.placement.swap_planner import CapacityTooSmall, Policy
from tasoc.passes.report import current_report
from tasoc.passes.search import Deadline, resolve_seed
from tasoc.passes.summary import Summary, format_seconds, format_speedup, stop_line
from tasoc.sim.core import paused_gc

Search = Literal["offload-all", "belady", "lru", "ga", "random", "dp-fixed-order", "dp"]

_METHODS = {
    "exact": "DP (optimal in bytes moved)",
    "bounded": "DP bounded by max-states",
    "belady": "swap planner (the bounded DP moved more)",
    "lru": "swap planner (the bounded DP moved more)",
}
"""How a dp summary words the report's `method`."""

DEFAULT_MACHINE = "v100-swapadvisor"
"""What an unsharded step's plans are priced on unless `machine=` says: SwapAdvisor's
testbed."""


class PlacementFailed(PassFailedException):
    """A program or capacity `placement` cannot plan for, in one line, which the driver
    prints as `tasoc: error: placement: ...`."""

    def __init__(self, message: str) -> None:
        super().__init__(f"placement: {message}")


@dataclass(frozen=True)
class PlacementPass(ModulePass):
    """Options (docs/memory.md), checked when the pass is built."""

    name: ClassVar[str] = "placement"

    contract: ClassVar[PassContract] = PassContract(
        requires={
            Kind.TRAINING: "@main is not a training step (it computes no loss); run autodiff "
            "before placement",
        },
        refuses={
            Kind.PLACED: "the program is placed already (it has memory ops or spaces); "
            "placement plans an unplaced training step, once",
        },
        adds=frozenset({Kind.PLACED}),
    )
    """A sharded training step is taken: its plan is per device (DESIGN.md §8)."""

    search: Search = "offload-all"
    """How the plan is made: `offload-all` sends every saved activation to host memory
    between the forward and the backward pass; `belady` is SwapAdvisor's swap planner
    (Belady's eviction, swap-ins prefetched as early as memory allows) and `lru` its
    on-demand LRU baseline (ODSwap), both on the step's own schedule within `capacity`;
    `ga` is SwapAdvisor's genetic algorithm over schedules and memory pools, `random`
    random variants of the GA's seeds for the same budget (at equal evaluations it
    matched or beat the GA: docs/decisions.md, issue 32);
    `dp-fixed-order` a caching DP on the step's own schedule, fewest bytes moved;
    `dp` ROC's DP (`roc_dp.py`), which also chooses the order of the ops."""
    capacity: int | float | str | None = None
    """Device memory (bytes, or a size such as 16GiB) — one device's, for a sharded
    step: written as `memory.capacity`, and a plan over it fails the pass, naming the op
    and the bytes. The planners (`belady`, `lru`, `ga`, `dp`) take the machine's device
    memory when it is not given; `offload-all` then checks none."""
    machine: str | None = None
    """What the plans are simulated on (`belady`, `lru`, `ga`, `dp-fixed-order`): a preset, `cpu-N`
    or a machine file; its host link is what swaps cross. By default the machine
    soap-shard planned a sharded step on, else `v100-swapadvisor`."""
    params: Space = "device"
    """offload-all: where params and optimizer state live between steps: `host` swaps each in before
    its first reader and its new value out as soon as it is made."""
    prefetch: int = 1
    """offload-all: how many ops before its reader a swap-in starts (0: right before it)."""
    min_bytes: int | float | str = 0
    """offload-all: saved activations smaller than this stay in device memory."""
    budget: int = 1000
    """ga, random: the most plans simulated (distinct schedules and allocations)."""
    timeout: int | float = 60
    """Seconds the whole pass may take (docs/placement.md): the search, belady's
    prefetch tuning and the pricing of `recompute=on` stop there with the best plan so
    far; only the baselines' first plans are made whatever the clock says."""
    seed: int | None = None
    """ga, random: the seed of its random choices; the run's `--seed` when not given."""
    population: int = 16
    """ga: chromosomes that survive each generation (N_p)."""
    mutation: int | float = 0.03
    """ga: the probability of each random choice of a mutation (P; the thesis' 10 % is
    for far more evaluations than a pass makes)."""
    recompute: Literal["on", "off"] = "off"
    """`on`: a swapping planner (`belady`, `lru`, `ga`, `dp-fixed-order`) may also
    release a saved activation and run its op again where the backward pass reads it,
    instead of swapping it (Checkmate-style, beyond SwapAdvisor): the swap planner's
    recomputing plans are priced beside the search's, and the fastest is kept."""
    in_place: Literal["on", "off"] = "off"
    """`on`: the swap planner's plans (`belady`, `lru`, `ga`, `random`, and with
    `recompute=on` the recomputing ones) let an element-wise op write its result over an
    operand of its type that dies at it (the SGD update over its scaled gradient), as
    XLA's buffer assignment does: counted, simulated and verified so, each such op
    marked `memory.in_place`, and donated by `tasoc run --mode runtime`. A step on one
    device only (a sharded step is refused)."""
    max_states: int | None = None
    """dp-fixed-order: states kept at a step before the exact DP becomes its bounded form (then
    compared with Belady and LRU; the report's `method` says which ran), 1000 when not
    given. dp: the (execution state, cached tensor set) pairs ROC's DP may evaluate,
    65,536 when not given; the step is coarsened until the DP fits, and the pass fails
    when even the step as one op does not."""

    def __post_init__(self) -> None:
        check_option_types(self)
        check_at_least(self, "prefetch", 0)
        check_at_least(self, "budget", 1)
        check_at_least(self, "timeout", 0, exclusive=True)
        check_at_least(self, "seed", 0)
        check_at_least(self, "population", 2)
        check_at_least(self, "max_states", 1)
        check_fraction(self, "mutation", top_included=True)
        check_byte_size(self, "capacity")
        check_byte_size(self, "min_bytes")
        if self.recompute == "on" and self.search == "offload-all":
            raise ValueError(
                "recompute=on needs a swapping planner (belady, lru, ga, dp-fixed-order); "
                "offload-all only swaps"
            )
        if self.in_place == "on" and self.search == "offload-all":
            raise ValueError(
                "in-place=on needs a swapping planner (belady, lru, ga, random); "
                "offload-all plans no memory to reuse"
            )
        if self.capacity is not None and parse_byte_size(self.capacity) < 1:
            raise ValueError(f"capacity must be at least one byte, got {self.capacity}")

    @property
    def searching(self) -> dict[str, Searcher]:
        """The searching planners by `search` name, with their options."""
        settings = GASettings(self.population, float(self.mutation))
        return {
            "ga": partial(ga_search, settings=settings),
            "random": partial(random_search, settings=settings),
            "dp-fixed-order": partial(dp_search, max_states=self.max_states or DEFAULT_MAX_STATES),
            "dp": roc_search
            if self.max_states is None
            else partial(roc_search, max_states=self.max_states),
        }

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        deadline = Deadline.after(self.timeout)
        require(self.contract, op, PlacementFailed)
        function = entry_function(op)
        signature = training_signature(function)
        assert signature is not None  # the contract requires a training step
        with paused_gc():  # the peak without placement (docs/memory.md): 10^4-10^5 values
            before = peak_memory(function)
        if self.in_place == "on" and is_sharded(op):
            raise PlacementFailed(
                "in-place=on plans one device's step, not a sharded one: two blocks of one "
                "local shape may belong to tensors of other shardings, whose buffers a "
                "result may not take"
            )
        view = self._device_view(op) if is_sharded(op) else None
        dag = view.dag if view is not None else dag_module.from_module(op, keep_order=True)
        capacity = None if self.capacity is None else parse_byte_size(self.capacity)
        section = current_report().section(self.name)
        section.update(search=self.search, capacity=capacity)
        if view is not None:
            section.update(per_device=True, devices=max(m.size for m in meshes(op).values()))
        if self.search == "offload-all":
            choice = offload_all(
                dag,
                signature,
                params=self.params,
                prefetch=self.prefetch,
                min_bytes=parse_byte_size(self.min_bytes),
                capacity=capacity,
            )
            plan = choice.plan
            section.update(
                params=self.params,
                prefetch=self.prefetch,
                offloaded_values=choice.offloaded,
                host_arguments=len(plan.host_arguments),
                kept_on_device=choice.kept,
            )
        else:
            seconds = view.seconds if view is not None else None
            plan = self._planned(
                op, dag, signature, capacity, before.peak_bytes, section, deadline, seconds
            )
        with paused_gc():  # 10^4-10^5 ops written and replayed, none garbage
            if view is None:
                write_placed(op, dag, plan)
            else:
                write_placed_in(op, dag, plan, view.ops)
            placed = entry_function(op)
            after = replay(placed)
        if capacity is not None and after.peak_bytes > capacity:
            raise PlacementFailed(
                f"search={self.search} holds {bytes_and_size(after.peak_bytes)} of device "
                f"memory {_where(after)}, over the capacity of {bytes_and_size(capacity)}"
            )
        moved = moved_bytes(placed)
        figures: dict[str, int | float] = {
            "peak_bytes": after.peak_bytes,
            "unplaced_peak_bytes": before.peak_bytes,
            "swapped_out_bytes": moved["swap_out"],
            "swapped_in_bytes": moved["swap_in"],
        }
        figures.update(section.get("simulated_seconds", {}))
        set_figures(op, figures)
        section.update(
            peak_bytes=after.peak_bytes,
            unplaced_peak_bytes=before.peak_bytes,
            peak_op=_where(after),
            swapped_out_bytes=moved["swap_out"],
            swapped_in_bytes=moved["swap_in"],
        )

    def _planned(
        self,
        module: ModuleOp,
        dag: Dag,
        signature: TrainingSignature,
        capacity: int | None,
        unplaced_peak: int,
        section: dict[str, Any],
        deadline: Deadline,
        seconds: Mapping[Node, float] | None,
    ) -> PlacementPlan:
        """The swap plan of `search` within `capacity`, with the baselines priced beside
        it on the machine by the simulator (`planning.py`); `seconds` are the ops' times
        of a sharded step's device view."""
        cluster = self._machine(module)
        if capacity is None:  # the device's own memory
            capacity = int(cluster.device.memory_bytes)
            section.update(capacity=capacity, capacity_from=f"machine {cluster.name}")
        if self.search in self.searching:
            limits = SearchLimits(self.budget, deadline, resolve_seed(self.seed))
            search: Policy | Searching = Searching(
                self.search, self.searching[self.search], limits, *self._progress_of(dag)
            )
        else:
            search = cast(Policy, self.search)  # offload-all never plans here
        try:
            outcome = plan_within(
                dag,
                signature,
                capacity,
                unplaced_peak,
                search,
                cluster,
                seconds,
                recompute=self.recompute == "on",
                deadline=deadline,
                in_place=self.in_place == "on",
            )
        except (CapacityTooSmall, StateSpaceTooLarge) as err:
            raise PlacementFailed(str(err)) from None
        section.update(outcome.report())
        # drawn only when asked for (`--plots`): its series walk three simulations' tasks
        current_report().figure(f"{self.name}-memory", outcome.memory_figure)
        return outcome.plan

    def summary(self, section: Mapping[str, Any]) -> Summary:
        """The planner, the peak against the capacity (one device's, for a sharded
        step), the bytes moved, the simulated speed against the ideal and LRU, and how
        a searching planner stopped (`summary.py`)."""
        capacity = section.get("capacity")
        each = f" per device ({section['devices']} devices)" if section.get("per_device") else ""
        within = f" of {format_bytes(capacity)}" if capacity is not None else ""
        headline = (
            f"{section['search']}: device memory peak {format_bytes(section['peak_bytes'])}"
            f"{within}{each}, {format_bytes(section['unplaced_peak_bytes'])} without placement"
        )
        moved = (
            f"moved {format_bytes(section['swapped_out_bytes'])} to host and "
            f"{format_bytes(section['swapped_in_bytes'])} back"
        )
        recomputed = section.get("saved_bytes", {}).get("recomputation")
        if recomputed:
            moved += f"; recomputed {format_bytes(recomputed)} instead of swapping it"
        if "offloaded_values" in section:
            moved += (
                f"; {section['offloaded_values']} values offloaded, "
                f"{section['host_arguments']} arguments on the host"
            )
        details = [moved]
        fractions = section.get("fraction_of_ideal")
        if fractions:
            details.append(
                f"simulated at {fractions[section['plan']]:.0%} of the ideal's speed "
                "(the step with infinite memory), "
                f"{format_speedup(section['speedup_over_lru'])} over LRU"
            )
        if "method" in section:  # dp-fixed-order: the plan the bounded DP or its baselines gave
            details.append(f"plan of the {section['method']} {_METHODS[section['method']]}")
        elif "dp_note" in section:  # dp: what ROC's DP ran on and whose order was kept
            details.append(section["dp_note"])
        steps = f"{section['evaluations']} evaluations" if "evaluations" in section else None
        stopped = stop_line(section, steps)
        if stopped is not None:
            details.append(stopped)
        return Summary(headline, (*details, *section.get("notes", ())))

    def _progress_of(self, dag: Dag) -> tuple[str, int, str, Callable[[float], str]]:
        """What the searching planner's progress counts, out of how many, and its
        figure: plans simulated (ga, the best seconds), ops (dp-fixed-order, the least
        bytes moved)."""
        if self.search == "dp-fixed-order":
            return "op", dag.num_ops, "moved", lambda moved: format_bytes(int(moved))
        return "plan", self.budget, "best", format_seconds

    def _machine(self, module: ModuleOp) -> Machine:
        """The machine plans are priced on: `machine=`, else the one soap-shard planned
        a sharded step on (`parallel.machine`), else SwapAdvisor's V100."""
        spec = self.machine or machine_of(module) or DEFAULT_MACHINE
        try:
            return machine(spec)
        except MachineError as err:
            raise PlacementFailed(str(err)) from None

    def _device_view(self, module: ModuleOp) -> DeviceView:
        """One device's view of a sharded step (`device_view.py`), priced on the machine
        when a planner simulates plans."""
        try:
            priced = None if self.search == "offload-all" else self._machine(module)
            return device_view(module, priced)
        except ValueError as err:
            raise PlacementFailed(str(err)) from None

    def verification_pair(self, before: ModuleOp, after: ModuleOp) -> tuple[ModuleOp, ModuleOp]:
        """The two programs `tasoc opt --verify-each` compares: the placed program
        without its placement (moves dropped, spaces removed) against the input, both
        on one device when sharded."""
        return unsharded(before), unsharded(unplaced(after))


def _where(run: Replay) -> str:
    at = run.peak_op
    if at is None:
        return "before the first op (the arguments)"
    return f"at op {at} ('{run.ops[at].name}')"
