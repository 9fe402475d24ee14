"""Hypothesis strategies for memory-placed programs (re-exported by `strategies`).

`placements(dag)` draws a `PlacementPlan` for a light graph: a schedule (any
topological order of its ops), arguments that arrive in host memory, and values sent
to host memory between two of their readers (swapped out when made, released after
the last reader before the gap, swapped in anywhere between that and the reader they
prefetch for). `placed_programs(module)` writes one
into a copy of a module (`write_placed`), and `capacities(module)` draws device
capacities from the smallest any schedule of it could run in to a little above what
its own schedule needs, so both sides of the verifier's capacity check get drawn:

    from hypothesis import given, strategies as st
    from tasoc.ir.memory import unplaced
    from tasoc.verify.equivalence import equivalent
    from tasoc.verify.strategies import graphs, placed_programs

    @given(graphs(max_ops=6).flatmap(lambda m: st.tuples(st.just(m), placed_programs(m))))
    def test_my_placed_backend(pair):
        module, placed = pair
        assert my_backend_runs_like(placed, unplaced(placed))
"""

from __future__ import annotations

from hypothesis import strategies as st
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from tasoc.ir import dag as dag_module
from tasoc.ir.dag import Dag, Node
from tasoc.ir.graph import sig_of
from tasoc.ir.memory import device_bytes, replay, space_of
from tasoc.ir.placement_plan import (
    PlacementPlan,
    Release,
    Slots,
    SwapIn,
    SwapOut,
    positions,
    readers_in_order,
    write_placed,
)
from tasoc.ir.program import entry_function


@st.composite
def _schedules(draw: st.DrawFn, dag: Dag) -> tuple[Node, ...]:
    """A topological order of `dag.ops`: each step takes one of the ready ops (shrinks
    towards the dag's own order)."""
    waiting = {node: sum(1 for v in node.inputs if not v.node.is_arg) for node in dag.ops}
    readers: dict[Node, list[Node]] = {}
    for node in dag.ops:
        for value in node.inputs:
            if not value.node.is_arg:
                readers.setdefault(value.node, []).append(node)
    ready = [node for node in dag.ops if waiting[node] == 0]
    order = []
    while ready:
        node = ready.pop(draw(st.integers(0, len(ready) - 1)))
        order.append(node)
        for reader in readers.get(node, ()):
            waiting[reader] -= 1
            if waiting[reader] == 0:
                ready.append(reader)
    return tuple(order)


@st.composite
def _placements(draw: st.DrawFn, dag: Dag) -> PlacementPlan:
    order = draw(_schedules(dag))
    where = positions(order)
    readers = readers_in_order(dag.scheduled(order))
    returned = set(dag.outputs)
    slots = Slots()

    hosted = set()
    for index, arg in enumerate(dag.args):
        reads = readers.get(arg.out)
        if reads and space_of(arg.out.sig) == "device" and draw(st.booleans()):
            hosted.add(index)
            slots.before[draw(st.integers(0, where[reads[0]]))].append(SwapIn(arg.out))

    values = [arg.out for i, arg in enumerate(dag.args) if i not in hosted]
    values += [v for node in order for v in node.results]
    for value in values:
        reads = [where[node] for node in readers.get(value, ())]
        if not reads or value in returned or not draw(st.booleans()):
            continue
        made = -1 if value.node.is_arg else where[value.node]
        back = draw(st.integers(0, len(reads) - 1))  # the first reader of the new copy
        last_old = reads[back - 1] if back else made  # the old copy's last reader
        slots.after[made].append(SwapOut(value))
        slots.releases[last_old].append(Release(value))
        slots.before[draw(st.integers(last_old + 1, reads[back]))].append(SwapIn(value))
    return PlacementPlan(slots.schedule(order), frozenset(hosted))


def placements(dag: Dag) -> st.SearchStrategy[PlacementPlan]:
    """Placement plans of `dag` (module docstring): a schedule, host arguments and
    offloads, each drawn independently. Shrinks towards `dag`'s order with nothing
    moved."""
    return _placements(dag)


@st.composite
def _placed_programs(draw: st.DrawFn, module: ModuleOp) -> ModuleOp:
    dag = dag_module.from_module(module, keep_order=True)
    placed = module.clone()
    write_placed(placed, dag, draw(placements(dag)))
    return placed


def placed_programs(module: ModuleOp) -> st.SearchStrategy[ModuleOp]:
    """Copies of `module` placed by a drawn `placements` plan (its `@main` rebuilt from
    the light graph, so equal ops are merged and unused ones dropped). Each verifies
    as a placed program with no capacity, and `memory.unplaced` of it computes what
    `module` does."""
    return _placed_programs(module)


def capacities(module: ModuleOp, slack: float = 1.25) -> st.SearchStrategy[int]:
    """Device capacities in bytes for `module`: from the largest device footprint of
    one op (its operands and results together, which no placement can split) to
    `slack` times the peak of its own schedule (`memory.replay`). Shrinks towards the
    smallest."""
    run = replay(entry_function(module))
    smallest = max((_footprint(op) for op in run.ops), default=0)
    return st.integers(max(smallest, 1), max(smallest, int(run.peak_bytes * slack), 1))


def _footprint(op: Operation) -> int:
    sigs = [sig_of(value.type) for value in {*op.operands, *op.results}]
    return sum(device_bytes(op, sig) for sig in sigs if space_of(sig) == "device")
