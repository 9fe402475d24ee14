"""`search=roc`'s first step, before the pass plans: the program's graph partitioned
for the mesh's devices and the program laid out by it (`vertex_layout.py`), and the
input laid out alike for `--verify-each` (`SoapShardPass.verification_pair`)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from xdsl.dialects.builtin import ArrayAttr, DenseArrayBase, ModuleOp, f64, i64

from tasoc.ir import dag as dag_module
from tasoc.ir.program import entry_function
from tasoc.ir.training import training_signature
from tasoc.passes.report import current_report
from tasoc.passes.search import Deadline
from tasoc.passes.soap import profile, vertex_layout
from tasoc.passes.soap.meshes import module_mesh

if TYPE_CHECKING:
    from tasoc.passes.soap.soap_shard import SoapShardPass


def laid_out(options: SoapShardPass, op: ModuleOp, deadline: Deadline) -> dict[str, Any]:
    """`search=roc`'s first step: the program's graph partitioned for the mesh's
    devices and the program laid out by it (`vertex_layout.py`), written back into
    `op`; the step is then split over its vertices like any data-parallel program.
    Returns the partition's figures (`VertexLayout.report`) and, for a partitioner
    other than `equal-vertex`, the simulated step of equal vertex ranges laid out
    alike: what the partition is measured against, since every baseline the pass
    simulates runs on the laid-out step."""
    mesh = module_mesh(op, options.mesh, options.machine)
    dag = dag_module.from_module(op)
    machine, seed = options.machine or "cpu", options.seed or 0
    graph, part, model = vertex_layout.partition(dag, mesh.size, options.partitioner, machine, seed)
    layout = vertex_layout.layout_of(graph, part)
    # A learned partition differs from run to run (it is timed): `--verify-each`
    # lays the input out by this one (`verification_pair`).
    object.__setattr__(options, "_layout", layout)
    laid = vertex_layout.lay_out(dag, layout)
    facts = layout.report(graph)
    if options.partitioner != "equal-vertex":
        even, _, _ = vertex_layout.roc_layout(dag, mesh.size, "equal-vertex", machine, seed)
        signature = training_signature(entry_function(op))
        planned = profile.plan_on(
            replace(options, search="data-parallel"), even, mesh, signature, deadline
        )
        facts["equal_vertex_seconds"] = planned.simulated["plan"].cost
    dag_module.write_back(op, laid)
    op.attributes[vertex_layout.BLOCKS_ATTR] = DenseArrayBase.from_list(
        i64, [int(size) for size in part.sizes()]
    )
    if model is not None:
        op.attributes[vertex_layout.POINTS_ATTR] = ArrayAttr(
            DenseArrayBase.from_list(f64, points.reshape(-1).tolist())
            for points in model.to_arrays()
        )
    return facts


def lay_out(options: SoapShardPass, op: ModuleOp, deadline: Deadline) -> dag_module.Dag:
    """`laid_out`, its figures in the report (the summary's partition line)."""
    facts = laid_out(options, op, deadline)
    current_report().section(options.name)["roc"] = {"partitioner": options.partitioner, **facts}
    return dag_module.from_module(op)


def laid_out_input(options: SoapShardPass, before: ModuleOp) -> ModuleOp:
    """`before` (the pass's input) laid out as `laid_out` laid the program out (the
    same partition), what `--verify-each` compares the sharded program with."""
    before = before.clone()
    laid = vertex_layout.lay_out(dag_module.from_module(before), options._layout)
    dag_module.write_back(before, laid)
    return before
