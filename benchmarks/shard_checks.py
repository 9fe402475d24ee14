"""What the benchmarks that run sharded training steps share: the step of a model, and
the collectives the simulator prices for a plan (set beside the IR's and the compiled
HLO's, `tasoc.backends.jax.audit`)."""

from __future__ import annotations

from collections import Counter

from autodiff import MODELS, applied, pass_options
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends.jax.audit import Audit
from tasoc.cost.machines import COLLECTIVE_KINDS
from tasoc.models.registry import OptionValue, get_model
from tasoc.passes.soap.simulated import SimulatedStrategy
from tasoc.sim.core import Task


def step_of(name: str, options: dict[str, OptionValue]) -> ModuleOp:
    """`name`'s training step (sgd), with `benchmarks/autodiff.py`'s loss for it (a model
    that table leaves out, such as resnet101: the zoo's own training loss)."""
    model = get_model(name)
    loss = MODELS[name][1] if name in MODELS else model.loss
    return applied(pass_options(loss, "sgd"), model.build(**options))


def is_collective(task: Task) -> bool:
    """Whether `task` is a collective's: on a link (`net`), or, where collectives block
    compute (`Machine.collectives_block_compute`), on the device, named by its kind."""
    if not isinstance(task.resource, tuple):
        return False
    return task.resource[0] == "net" or (
        task.resource[0] == "device" and task.name.split(" of ")[0] in COLLECTIVE_KINDS
    )


def predicted_collectives(simulated: SimulatedStrategy) -> dict[str, int]:
    """Collectives per HLO kind the simulated step prices. A collective is one task per
    device it joins, added one after another, named `<kind> of <value>` and waiting on
    the same tasks; a run of such tasks ends where the name or waits change or a device
    comes again. (On a one-axis mesh each is one collective of the IR.)"""
    graph = simulated.step.graph
    counts: Counter[str] = Counter()
    current: tuple[str, tuple[int, ...]] | None = None
    joined: set[int] = set()
    for task_id in sorted(graph.ids()):
        task = graph[task_id]
        if not is_collective(task):
            continue
        device = task.resource[1]
        if (task.name, task.deps) != current or device in joined:
            current, joined = (task.name, task.deps), set()
            counts[task.name.split(" of ")[0].replace("_", "-")] += 1
        joined.add(device)
    return dict(sorted(counts.items()))


def ir_collectives(found: Audit) -> dict[str, int]:
    """Collectives per kind the written IR asks for (those it asks at all)."""
    return {r.kind: r.asked for r in found.rows if r.asked}


def hlo_collectives(found: Audit) -> dict[str, int]:
    """Collectives per kind the compiled HLO holds (those it holds at all)."""
    return {r.kind: r.found for r in found.rows if r.found}
