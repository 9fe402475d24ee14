"""`offload-all`: every saved activation of a training step goes to host memory
between the forward and the backward pass (issue 17's manual placement, before the
planners of SwapAdvisor and ROC).

A saved activation is a value the loss depends on (a forward result, or an input or
label argument) that a backward op reads again. Each one is swapped out right after
it is made (an argument: at the start of the step), its device copy dies after its
last forward reader, and it is swapped back in `prefetch` ops before its first
backward reader, which and every later reader read the copy. A value whose last
forward reader is too close to its first backward one for the swap-in to start later
gains nothing and stays (`kept`). With `params=host`, the params and optimizer state
live in host memory between steps: each is swapped in `prefetch` ops before its first
reader, and its replacing result is swapped out as soon as it is made.
"""

from __future__ import annotations

from dataclasses import dataclass

from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.liveness import value_kinds
from tasoc.ir.memory import Space, space_of, tensor_bytes
from tasoc.ir.placement_plan import (
    PlacementPlan,
    Release,
    Slots,
    SwapIn,
    SwapOut,
    positions,
    readers_in_order,
)
from tasoc.ir.training import TrainingSignature


@dataclass(frozen=True, slots=True)
class OffloadChoice:
    """What `offload_all` decided: the plan, and what it moved and left alone."""

    plan: PlacementPlan
    offloaded: int
    """Saved activations sent to host memory."""
    kept: int
    """Saved activations left in device memory: too close to their backward reader."""


def offload_all(
    dag: Dag,
    signature: TrainingSignature,
    *,
    params: Space,
    prefetch: int,
    min_bytes: int,
    capacity: int | None = None,
) -> OffloadChoice:
    """The plan sending every saved activation of `dag` (ops in schedule order) of at
    least `min_bytes` to host memory, and the arguments `params` asks for (module
    docstring)."""
    assert signature.loss is not None
    order = dag.ops
    where = positions(order)
    loss_at = where[_loss_op(dag, signature.loss)]
    readers = readers_in_order(dag)
    returned = set(dag.outputs)
    slots = Slots()

    offloaded = kept = 0
    for value, kind in value_kinds(dag, signature).items():
        if kind not in ("activations", "inputs") or value in returned:
            continue
        if space_of(value.sig) == "host" or tensor_bytes(value.sig) < min_bytes:
            continue
        reads = [where[node] for node in readers.get(value, ())]
        backward = [p for p in reads if p > loss_at]
        if not backward:
            continue
        made = _made_at(value, where)
        last_forward = max([made, *(p for p in reads if p <= loss_at)])
        swap_in = max(backward[0] - prefetch, last_forward + 1)
        if swap_in <= last_forward + 1:
            kept += 1  # the device copy would be freed and taken again at once
            continue
        offloaded += 1
        slots.after[made].append(SwapOut(value))
        slots.releases[last_forward].append(Release(value))
        slots.before[swap_in].append(SwapIn(value))

    hosted = frozenset((*signature.params, *signature.state) if params == "host" else ()) & {
        i for i, arg in enumerate(dag.args) if arg.out in readers
    }
    for index in sorted(hosted):
        first = where[readers[dag.args[index].out][0]]
        slots.before[max(first - prefetch, 0)].append(SwapIn(dag.args[index].out))
    for result, argument in signature.replaces:
        value = dag.outputs[result]
        if argument in hosted and not value.node.is_arg:
            slots.after[where[value.node]].append(SwapOut(value))

    plan = PlacementPlan(slots.schedule(order), hosted, capacity)
    return OffloadChoice(plan, offloaded, kept)


def _loss_op(dag: Dag, loss: int) -> Node:
    """The op computing the loss: on a sharded step's device view, the graph op under
    the collectives that complete it (a data-parallel step all-reduces its loss at the
    end, which is not where the backward pass begins)."""
    node = dag.outputs[loss].node
    while node.op.startswith("parallel.") and not node.inputs[0].node.is_arg:
        node = node.inputs[0].node
    return node


def _made_at(value: Value, where: dict[Node, int]) -> int:
    return -1 if value.node.is_arg else where[value.node]
