"""`placement`: place a training step's tensors in device or host memory.

    tasoc opt step.mlir -p 'placement{search=offload-all capacity=16GiB params=host}'

writes a memory-placed program (the `memory` dialect, docs/memory.md): the schedule,
host arguments, swaps and frees, and the module's `memory.capacity` and `memory.plan`.
The pass is a shell: read `@main` into the light graph with its op order (the
schedule), plan there (`offload.py`), write the plan back (`placement_plan.py`),
replay the placed schedule for the device memory it holds, report. `offload-all` is
the manual plan; SwapAdvisor's and ROC's planners join `search` next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from tasoc.ir import dag as dag_module
from tasoc.ir.limits import format_bytes
from tasoc.ir.memory import Replay, Space, is_placed, moved_bytes, replay, unplaced
from tasoc.ir.placement_plan import set_figures, write_placed
from tasoc.ir.program import entry_function
from tasoc.ir.training import training_signature
from tasoc.passes.options import (
    check_at_least,
    check_byte_size,
    check_option_types,
    parse_byte_size,
)
from tasoc.passes.placement.offload import offload_all
from tasoc.passes.report import current_report

Search = Literal["offload-all"]


class PlacementFailed(PassFailedException):
    """A program or capacity `placement` cannot plan for, in one line, which the driver
    prints as `tasoc: error: placement: ...`."""

    def __init__(self, message: str) -> None:
        super().__init__(f"placement: {message}")


@dataclass(frozen=True)
class PlacementPass(ModulePass):
    """Options (docs/memory.md), checked when the pass is built."""

    name: ClassVar[str] = "placement"

    search: Search = "offload-all"
    """How the plan is made: `offload-all` sends every saved activation to host memory
    between the forward and the backward pass."""
    capacity: int | float | str | None = None
    """Device memory (bytes, or a size such as 16GiB): written as `memory.capacity`,
    and a plan over it fails the pass, naming the op and the bytes."""
    params: Space = "device"
    """Where params and optimizer state live between steps: `host` swaps each in before
    its first reader and its new value out as soon as it is made."""
    prefetch: int = 1
    """How many ops before its reader a swap-in starts (0: right before it)."""
    min_bytes: int | float | str = 0
    """Saved activations smaller than this stay in device memory."""

    def __post_init__(self) -> None:
        check_option_types(self)
        check_at_least(self, "prefetch", 0)
        check_byte_size(self, "capacity")
        check_byte_size(self, "min_bytes")
        if self.capacity is not None and parse_byte_size(self.capacity) < 1:
            raise ValueError(f"capacity must be at least one byte, got {self.capacity}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if is_placed(op):
            raise PlacementFailed("the program is placed already (it has memory ops or spaces)")
        function = entry_function(op)
        signature = training_signature(function)
        if signature is None or signature.loss is None:
            raise PlacementFailed(
                f"search={self.search} moves a training step's saved activations, and @main "
                "computes no loss (apply autodiff first)"
            )
        before = replay(function)
        dag = dag_module.from_module(op, keep_order=True)
        capacity = None if self.capacity is None else parse_byte_size(self.capacity)
        choice = offload_all(
            dag,
            signature,
            params=self.params,
            prefetch=self.prefetch,
            min_bytes=parse_byte_size(self.min_bytes),
            capacity=capacity,
        )
        write_placed(op, dag, choice.plan)
        placed = entry_function(op)
        after = replay(placed)
        if capacity is not None and after.peak_bytes > capacity:
            raise PlacementFailed(
                f"search={self.search} holds {after.peak_bytes} bytes of device memory "
                f"{_where(after)}, over the capacity of {capacity} bytes "
                f"({format_bytes(capacity)})"
            )
        moved = moved_bytes(placed)
        figures = {
            "peak_bytes": after.peak_bytes,
            "unplaced_peak_bytes": before.peak_bytes,
            "swapped_out_bytes": moved["swap_out"],
            "swapped_in_bytes": moved["swap_in"],
        }
        set_figures(op, figures)
        current_report().section(self.name).update(
            search=self.search,
            params=self.params,
            prefetch=self.prefetch,
            capacity=capacity,
            offloaded_values=choice.offloaded,
            host_arguments=len(choice.plan.host_arguments),
            kept_on_device=choice.kept,
            peak_bytes=after.peak_bytes,
            unplaced_peak_bytes=before.peak_bytes,
            peak_op=_where(after),
            swapped_out_bytes=moved["swap_out"],
            swapped_in_bytes=moved["swap_in"],
        )

    def verification_pair(self, before: ModuleOp, after: ModuleOp) -> tuple[ModuleOp, ModuleOp]:
        """The two programs `tasoc opt --verify-each` compares: the placed program
        without its placement (moves dropped, spaces removed) against the input."""
        return before, unplaced(after)


def _where(run: Replay) -> str:
    at = run.peak_op
    if at is None:
        return "before the first op (the arguments)"
    return f"at op {at} ('{run.ops[at].name}')"
