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
from tasoc.ir.placement_plan import HostArgument, Offload, positions, readers_in_order
from tasoc.ir.training import TrainingSignature


@dataclass(frozen=True, slots=True)
class OffloadChoice:
    """What `offload_all` decided: the plan's parts and what it left alone."""

    offloads: tuple[Offload, ...]
    host_arguments: tuple[HostArgument, ...]
    kept: int
    """Saved activations left in device memory: too close to their backward reader."""


def offload_all(
    dag: Dag, signature: TrainingSignature, *, params: Space, prefetch: int, min_bytes: int
) -> OffloadChoice:
    """The offloads of every saved activation of `dag` (ops in schedule order) of at
    least `min_bytes`, and the host arguments `params` asks for (module docstring)."""
    assert signature.loss is not None
    order = dag.ops
    where = positions(order)
    loss_at = where[dag.outputs[signature.loss].node]
    readers = readers_in_order(dag)
    kinds = value_kinds(dag, signature)
    returned = set(dag.outputs)

    def swap_in_point(first_reader: int, earliest: int) -> int:
        return max(first_reader - prefetch, earliest)

    offloads = []
    kept = 0
    for value, kind in kinds.items():
        if kind not in ("activations", "inputs") or value in returned:
            continue
        if space_of(value.sig) == "host" or tensor_bytes(value.sig) < min_bytes:
            continue
        reads = [where[node] for node in readers.get(value, ())]
        backward = [p for p in reads if p > loss_at]
        if not backward:
            continue
        made = -1 if value.node.is_arg else where[value.node]
        last_forward = max([made, *(p for p in reads if p <= loss_at)])
        swap_in = swap_in_point(backward[0], last_forward + 1)
        if swap_in <= last_forward + 1:
            kept += 1  # the device copy would be freed and retaken at once
            continue
        offloads.append(
            Offload(
                value=value,
                swap_out_after=None if made < 0 else order[made],
                swap_in_before=order[swap_in],
                readers_from=order[backward[0]],
            )
        )
    hosted = []
    if params == "host":
        for index in (*signature.params, *signature.state):
            reads = readers.get(dag.args[index].out)
            if reads:
                hosted.append(HostArgument(index, order[swap_in_point(where[reads[0]], 0)]))
    offloads.sort(key=lambda o: (where[o.swap_in_before], _made_at(o.value, where)))
    return OffloadChoice(tuple(offloads), tuple(hosted), kept)


def _made_at(value: Value, where: dict[Node, int]) -> int:
    return -1 if value.node.is_arg else where[value.node]
