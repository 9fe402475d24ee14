"""The task graph of a sharded training step (`tasoc.sim.parallel`): its tasks, its
makespan on a case computed by hand, per-device memory, and one-op edits whose delta
simulation equals the full simulation of a step built afresh from the edited plan."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from soap_programs import MLP
from xdsl.parser import Parser

from tasoc.cost.devices import CPU, Device
from tasoc.cost.machines import Machine, MachineError, machine
from tasoc.driver.sources import make_context, verify_module
from tasoc.ir import dag as dag_module
from tasoc.ir import soap
from tasoc.ir.dag import Dag, Node
from tasoc.ir.program import entry_function
from tasoc.ir.shapes import TensorSig
from tasoc.ir.shard_plan import Plan, write_sharded
from tasoc.ir.soap import Mesh, Sharding, ShardingError
from tasoc.ir.training import TrainingSignature, training_signature
from tasoc.models.alexnet import alexnet
from tasoc.passes.autodiff import AutodiffPass
from tasoc.passes.soap.meshes import parse_mesh
from tasoc.passes.soap.plan import Problem, complete
from tasoc.passes.soap.strategies import STRATEGIES
from tasoc.sim.core import DeltaSimulator, Task, simulate
from tasoc.sim.parallel import MemoryBreakdown, ShardedStep

TINY = """
func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x4xf32> {graph.param}) -> tensor<4x4xf32> {
  %h = graph.matmul %x, %w : tensor<4x4xf32>
  %r = graph.relu %h : tensor<4x4xf32>
  func.return %r : tensor<4x4xf32>
}
"""


@dataclass(frozen=True)
class Planned:
    """A program, a plan of it and what `ShardedStep` needs besides."""

    dag: Dag
    plan: Plan
    mesh: Mesh
    signature: TrainingSignature | None

    def step(self, on: Machine, **options: object) -> ShardedStep:
        return ShardedStep(
            self.dag, self.plan, on, mesh=self.mesh, signature=self.signature, **options
        )


def training_plan(text_or_module: object, mesh: str, search: str) -> Planned:
    module = (
        Parser(make_context(), text_or_module).parse_module()
        if isinstance(text_or_module, str)
        else text_or_module
    )
    AutodiffPass(loss="softmax-cross-entropy", optimizer="sgd", lr=0.01).apply(
        make_context(),
        module,  # type: ignore[arg-type]
    )
    signature = training_signature(entry_function(module))  # type: ignore[arg-type]
    dag = dag_module.from_module(module)  # type: ignore[arg-type]
    problem = Problem(dag, parse_mesh(mesh), signature, {})
    return Planned(dag, complete(problem, STRATEGIES[search](problem)), problem.mesh, signature)


def copied(plan: Plan) -> Plan:
    return replace(
        plan,
        configs=dict(plan.configs),
        operands=dict(plan.operands),
        values=dict(plan.values),
        notes=list(plan.notes),
    )


def collectives(step: ShardedStep) -> Counter[str]:
    """Collective kinds in the graph, each counted once per collective (its tasks on
    a 1-axis mesh are one per device)."""
    size = len(step.meshes["mesh"].device_ids)
    kinds = Counter(
        step.graph[i].name.split(" of ")[0]
        for i in step.graph.ids()
        if step.graph[i].resource[0] == "net"
    )
    return Counter({kind: count // size for kind, count in kinds.items()})


# -------------------------------------------------------------- the task graph


def test_data_parallel_mlp_has_a_compute_task_per_op_and_device_and_an_all_reduce_per_weight():
    planned = training_plan(MLP, "8", "data-parallel")
    step = planned.step(machine("cpu-8"), collapse=False)
    tasks = [step.graph[i] for i in step.graph.ids()]
    computing = [t for t in tasks if t.resource[0] == "device"]
    ops = [node for node in planned.dag.ops if node.inputs]
    assert len(computing) == len(ops) * 8
    assert Counter(t.resource for t in computing) == {("device", d): len(ops) for d in range(8)}
    # One all-reduce of each weight's gradient (8x32 and 32x4 floats): a task on each
    # of the 8 devices, each waiting on the gradient's producer on all 8 (a barrier),
    # each making a buffer of the weight's size.
    reducing = [t for t in tasks if t.name.startswith("all_reduce")]
    assert all(len(t.deps) == 8 for t in reducing)
    made = Counter(t.alloc[0][1] for t in reducing if t.alloc)
    assert made[8 * 32 * 4] == 8 and made[32 * 4 * 4] == 8
    # The same collectives as the plan's writer inserts (all-slices are local: no task).
    written = write_sharded(
        dag_module.to_module(planned.dag), planned.dag, planned.plan, planned.mesh
    )
    assert collectives(step) == Counter(c.kind for c in written if c.kind != "all_slice")


class FixedMachine:
    """Two devices; every collective takes `COLLECTIVE_S`."""

    COLLECTIVE_S = 0.5
    name = "fixed"
    size = 2
    device = CPU
    collectives_block_compute = False

    def collective_time(self, kind: str, nbytes: int, group: Sequence[int]) -> float:
        return self.COLLECTIVE_S

    def step_overhead(self, arrays: int) -> float:
        return 0.0


def fixed_cost(
    node: Node, local_in: Sequence[TensorSig], local_out: Sequence[TensorSig], device: Device
) -> float:
    return {"matmul": 1.0, "relu": 2.0}[node.op]


def test_a_two_op_step_takes_compute_plus_the_all_reduce_between():
    """matmul split along its contraction on 2 devices -> partial sums -> all-reduce ->
    relu: 1 + 0.5 + 2 seconds; memory per device (4-byte floats): x and w halves (64 B
    each), the partial sums (64 B) until the all-reduce has read them, its result (64 B)
    until relu has; relu's result (64 B), a program result, held throughout as XLA
    gives an output its own allocation (the timeline's pool holds it from relu on)."""
    module = Parser(make_context(), TINY).parse_module()
    dag = dag_module.from_module(module)
    mesh = Mesh("mesh", (("d", 2),))
    x, w = (arg.out for arg in dag.args)
    matmul, relu = dag.ops
    split_k = {"k": ("d",)}
    plan = Plan(
        configs={matmul: split_k, relu: {}},
        operands={
            matmul: (Sharding("mesh", ((), ("d",))), Sharding("mesh", (("d",), ()))),
            relu: (Sharding.replicated("mesh", 2),),
        },
        values={
            x: Sharding("mesh", ((), ("d",))),
            w: Sharding("mesh", (("d",), ())),
            matmul.out: Sharding("mesh", ((), ()), ("d",)),
            relu.out: Sharding.replicated("mesh", 2),
        },
        outputs=(Sharding.replicated("mesh", 2),),
    )
    step = ShardedStep(dag, plan, FixedMachine(), fixed_cost, mesh=mesh, collapse=False)  # type: ignore[arg-type]
    timeline = simulate(step.graph)
    assert timeline.makespan == 1.0 + 0.5 + 2.0
    memory = step.memory()
    expected = MemoryBreakdown(params=64, inputs=64, activations=128, communication=64)
    assert memory == {0: expected, 1: expected}
    assert all(timeline.peak[("mem", d)] == 256 for d in (0, 1))


def test_memory_of_a_weight_replicated_and_split():
    """Data parallel: each device holds both weights whole, and at its peak XLA's copy
    of the second (the backward's `dx = dy @ W^T` reads it, the update does not wait
    for that: `ShardedStep.memory`), which lives until its update; a dense layer split
    by its output features (8 ways) holds 1/8 of its weight."""
    data = training_plan(MLP, "8", "data-parallel")
    copy = 32 * 4 * 4
    weights = (8 * 32) * 4 + copy
    step = data.step(machine("cpu-8"), collapse=False)
    memory = step.memory()
    assert {m.params for m in memory.values()} == {weights + copy}

    index = next(i for i, arg in enumerate(data.dag.args) if arg.out.sig.shape == (8, 32))
    split_columns = Sharding("mesh", ((), ("d",)))
    plan = copied(data.plan)
    plan.values[data.dag.args[index].out] = split_columns
    assert data.signature is not None
    result = data.signature.replaced_by[index]
    plan.outputs = tuple(split_columns if i == result else s for i, s in enumerate(plan.outputs))
    split = ShardedStep(data.dag, plan, machine("cpu-8"), mesh=data.mesh, signature=data.signature)
    assert {m.params for m in split.memory().values()} == {weights + copy - 8 * 32 * 4 * 7 // 8}


@settings(max_examples=8, deadline=None)
@given(
    start=st.sampled_from(
        [
            ("data-parallel", "8", "cpu-8"),
            ("expert", "8", "cpu-8"),
            ("data-parallel", "2x4", "k80-cluster"),
            ("expert", "4x2", "p100-cluster"),
        ]
    ),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), max_size=3),
)
def test_a_collapsed_step_simulates_as_every_device_would(
    start: tuple[str, str, str], edits: list[tuple[int, int]]
) -> None:
    """One device standing for its mesh (`_device_classes`) gives the per-device task
    graph's makespan and every device's memory, exactly, with a mesh's devices fewer
    tasks; after random edits too (the collapsed step edited, the other built afresh)."""
    search, mesh, name = start
    planned = alexnet_plan(search, mesh)
    on = machine(name)
    collapsed = planned.step(on)
    collapsed.plan = copied(planned.plan)
    assert all(len(devices) > 1 for devices in collapsed.stands_for.values())
    ops = [node for node in planned.dag.ops if node.inputs]
    for op_pick, config_pick in edits:
        node = ops[op_pick % len(ops)]
        configs = list(soap.configurations(collapsed.rules[node], collapsed.mesh_of(node)))
        with suppress(ShardingError):
            collapsed.set_config(node, configs[config_pick % len(configs)])
    every = ShardedStep(
        planned.dag,
        copied(collapsed.plan),
        on,
        mesh=planned.mesh,
        signature=planned.signature,
        collapse=False,
    )
    assert len(collapsed.graph) < len(every.graph)
    short, full = simulate(collapsed.graph), simulate(every.graph)
    assert short.makespan == full.makespan
    assert collapsed.memory() == every.memory()
    assert max(short.peak.values()) == max(full.peak.values())


def test_a_step_collapses_only_where_devices_are_alike():
    """Groups of one collective with different shapes on the machine (a 2x3 mesh's
    rows of 3 on nodes of 4: one on a node, one across two) keep every device its own."""
    planned = training_plan(MLP, "2x3", "data-parallel")
    k80 = machine("k80-cluster")
    assert k80.group_shape([0, 1, 2]) != k80.group_shape([3, 4, 5])
    assert planned.step(k80).stands_for == {d: (d,) for d in range(6)}
    assert planned.step(machine("cpu-8")).stands_for == {0: tuple(range(6))}


def test_a_mesh_larger_than_the_machine_is_one_line():
    planned = training_plan(MLP, "8", "data-parallel")
    with pytest.raises(MachineError) as error:
        planned.step(machine("cpu-4"))
    assert str(error.value) == "mesh @mesh uses device 7 but machine cpu-4 has 4 devices"


# -------------------------------------------------------------- one-op edits


@functools.cache
def alexnet_plan(search: str, mesh: str) -> Planned:
    return training_plan(alexnet(batch=16, image=64, classes=10, width=0.25), mesh, search)


def snapshot(step: ShardedStep) -> dict[int, Task]:
    return {i: step.graph[i] for i in step.graph.ids()}


def test_set_config_edits_only_the_op_and_its_edges():
    planned = alexnet_plan("data-parallel", "8")
    step = planned.step(machine("cpu-8"))
    step.plan = copied(step.plan)
    before = snapshot(step)
    conv = next(node for node in planned.dag.ops if node.op == "conv2d")
    step.set_config(conv, {})  # replicated: every device computes the whole convolution
    after = snapshot(step)
    edited = {i for i in before.keys() | after.keys() if before.get(i) != after.get(i)}
    assert 0 < len(edited) < len(before) // 5
    assert step.plan.configs[conv] == {}


def test_an_impossible_config_leaves_the_step_unchanged():
    """A producer of partial sums that a reader keeps as partial sums cannot stop
    making them: ShardingError, and nothing changes."""
    planned = alexnet_plan("data-parallel", "8")
    step = planned.step(machine("cpu-8"))
    step.plan = copied(step.plan)
    uses = planned.dag.consumers()
    partial = next(
        node
        for node in planned.dag.ops
        if any(
            step.plan.operands[use.node][use.operand].unreduced
            for value in node.results
            for use in uses.get(value, ())
        )
    )
    before, configs = snapshot(step), dict(step.plan.configs)
    with pytest.raises(ShardingError):
        step.set_config(partial, {})
    assert snapshot(step) == before and step.plan.configs == configs


@settings(max_examples=6, deadline=None)
@given(
    start=st.sampled_from([("data-parallel", "8"), ("expert", "8"), ("data-parallel", "2x4")]),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), min_size=1, max_size=4),
)
def test_delta_after_set_config_equals_a_fresh_step(
    start: tuple[str, str], edits: list[tuple[int, int]]
) -> None:
    """Random ops in random legal configurations: after each edit the delta simulation
    equals the full simulation of the edited graph task by task, and a step built
    afresh from the edited plan has the same makespan and memory peaks; the plan still
    writes a program that verifies."""
    planned = alexnet_plan(*start)
    cpu8 = machine("cpu-8")
    step = planned.step(cpu8)
    step.plan = copied(planned.plan)
    delta = DeltaSimulator(step.graph)
    ops = [node for node in planned.dag.ops if node.inputs]
    for op_pick, config_pick in edits:
        node = ops[op_pick % len(ops)]
        configs = list(soap.configurations(step.rules[node], step.mesh_of(node)))
        try:
            step.set_config(node, configs[config_pick % len(configs)])
        except ShardingError:
            continue
        timeline = delta.update()
        full = simulate(step.graph)
        assert timeline.start == full.start and timeline.end == full.end
        fresh = ShardedStep(
            planned.dag, copied(step.plan), cpu8, mesh=planned.mesh, signature=planned.signature
        )
        again = simulate(fresh.graph)
        assert again.makespan == timeline.makespan
        assert again.peak == timeline.peak
    module = dag_module.to_module(planned.dag)
    write_sharded(module, planned.dag, step.plan, planned.mesh)
    verify_module(module)
