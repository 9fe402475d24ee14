"""The simulator's per-device peak memory against XLA's (issue 30; the figures of
`benchmarks/sim_memory.py`): plans compiled on the suite's 8 fake CPU devices, with
the replaced weights donated as a training loop donates them.

XLA's `memory_analysis()` is the same at the suite's `-O0` as at XLA's default level
(the optimization level is LLVM's code generation; fusion, scheduling and buffer
assignment are HLO passes that run either way): checked on these plans."""

from __future__ import annotations

import pytest
from conftest import load_benchmark
from xdsl.context import Context
from xdsl.parser import Parser

from tasoc.backends.jax.sharded import lower_sharded
from tasoc.cost.machines import machine
from tasoc.driver.sources import make_context
from tasoc.ir import dag as dag_module
from tasoc.ir.program import entry_function
from tasoc.ir.shard_plan import Plan, write_sharded
from tasoc.ir.soap import Sharding
from tasoc.ir.training import training_signature
from tasoc.models.layers import ConvNet, bottleneck
from tasoc.models.registry import get_model
from tasoc.passes.autodiff import AutodiffPass
from tasoc.passes.search import Deadline
from tasoc.passes.soap import mcmc
from tasoc.passes.soap.cost_searches import cost_model, evaluate, search_ilp
from tasoc.passes.soap.meshes import parse_mesh
from tasoc.passes.soap.plan import Prescription, Problem, complete
from tasoc.passes.soap.problem import Limits, SoapProblem
from tasoc.passes.soap.searches import BASELINES
from tasoc.passes.soap.strategies import STRATEGIES
from tasoc.sim.parallel import (
    Beside,
    ShardedStep,
    _Donated,
    _event_times,
    _most_live,
    _outside_donated,
    _packed,
    convolution_layouts,
    fused_away,
    kernel_in_place,
)

BENCHMARK_MODELS = load_benchmark("autodiff").MODELS
DLRM = BENCHMARK_MODELS["dlrm"][0]
"""`benchmarks/autodiff.py`'s DLRM: eight 1.28 MB embedding tables, whose gradients
XLA's BFS schedule holds all at once."""


def _problem(options: dict[str, int]) -> tuple[Problem, object]:
    module = get_model("dlrm").build(**options)
    AutodiffPass(loss="mse", optimizer="sgd", lr=0.01).apply(Context(), module)
    signature = training_signature(entry_function(module))
    return Problem(dag_module.from_module(module), parse_mesh(8), signature, {}), module


def _xla_bytes(problem: Problem, module: object, plan: Plan) -> int:
    """arguments + outputs - aliased + temporaries of the compiled plan, per device."""
    write_sharded(module, problem.dag, plan, problem.mesh)  # type: ignore[arg-type]
    assert problem.signature is not None
    donated = [argument for _, argument in problem.signature.replaces]
    found = lower_sharded(module, donate=donated).compiled().memory_analysis()  # type: ignore[arg-type]
    return (
        found.argument_size_in_bytes
        + found.output_size_in_bytes
        - found.alias_size_in_bytes
        + found.temp_size_in_bytes
    )


@pytest.mark.parametrize(
    "strategy",
    ["data-parallel", "replicated"],
)
def test_the_simulated_peak_is_xlas_within_five_percent(strategy: str) -> None:
    """DLRM's step data parallel (the simulator's old timeline peak: 24.4 MB against
    XLA's 22.9 MB, 6.7 % over, as every table's gradient waited on a busy link) and
    every op replicated, each device's peak within 5 % of XLA's (replicated: 5.3 %
    under without the one zero broadcast held beside its eight copies,
    `made_at_start`)."""
    problem, module = _problem(DLRM)
    if strategy == "replicated":
        plan = mcmc.uniform_plan(problem, lambda rule, mesh: {})
    else:
        plan = complete(problem, STRATEGIES[strategy](problem))
    step = ShardedStep(problem.dag, plan, machine("cpu-8"), mesh=problem.mesh)
    simulated, xla = step.peak_memory(), _xla_bytes(problem, module, plan)
    assert abs(simulated - xla) <= 0.05 * xla, (simulated, xla)


def test_the_transformers_ilp_plan_counts_xlas_copies_of_updated_weights() -> None:
    """The ILP's plan of a small transformer step: XLA copies each weight the backward
    still reads after its in-place update (1.3 MB of its temporaries); without that
    rule the simulated peak was 8 % under XLA's (4.20 MB against 4.57 MB)."""
    module = get_model("transformer").build(layers=2, hidden=128, heads=4, seq=64, batch=8)
    AutodiffPass(loss="mse", optimizer="sgd", lr=0.01).apply(Context(), module)
    signature = training_signature(entry_function(module))
    problem = Problem(dag_module.from_module(module), parse_mesh(8), signature, {})
    cpu = machine("cpu-8")
    baselines = {name: complete(problem, STRATEGIES[name](problem)) for name in BASELINES}
    plan = search_ilp(SoapProblem(problem, cpu), baselines, Limits(1, Deadline.after(60))).best
    step = ShardedStep(problem.dag, plan, cpu, mesh=problem.mesh)
    simulated, xla = step.peak_memory(), _xla_bytes(problem, module, plan)
    assert abs(simulated - xla) <= 0.05 * xla, (simulated, xla)


def test_the_order_is_xlas_bfs_and_independent_of_edits() -> None:
    """The eight embedding tables' gradients (their scatters) are made one after the
    other, where the program interleaves each with its all-reduce and update: the BFS
    order runs independent work of one depth together; and a step edited back to its
    plan orders its tasks as one built afresh."""
    problem, _ = _problem(DLRM)
    plan = complete(problem, STRATEGIES["data-parallel"](problem))
    step = ShardedStep(problem.dag, plan, machine("cpu-8"), mesh=problem.mesh)
    names = [step.graph[i].name for i in step.sequence(0)]
    scatters = [i for i, name in enumerate(names) if name.startswith("scatter_add")]
    assert len(scatters) == 8 and max(scatters) - min(scatters) == 7
    node = next(n for n in problem.dag.ops if n.op == "matmul")
    config = dict(step.plan.configs[node])
    before = step.memory()
    step.set_config(node, {})
    step.set_config(node, config)
    assert step.memory() == before


def _benchmark_error(model: str, strategy: str) -> float:
    """(simulated - XLA) / XLA on the plan `strategy` writes for `model`'s step at
    `benchmarks/sim_memory.py`'s shapes (rnnlm unrolled 8 steps): a baseline's, or
    the ILP's with the machine's memory as its cap."""
    options, loss = BENCHMARK_MODELS[model]
    module = get_model(model).build(**(options | ({"seq": 8} if model == "rnnlm" else {})))
    AutodiffPass(loss=loss, optimizer="sgd", lr=0.01).apply(Context(), module)
    signature = training_signature(entry_function(module))
    problem = Problem(dag_module.from_module(module), parse_mesh(8), signature, {})
    cpu = machine("cpu-8")
    baselines = {name: complete(problem, STRATEGIES[name](problem)) for name in BASELINES}
    if strategy == "ilp":
        posed = SoapProblem(problem, cpu, int(cpu.device.memory_bytes))
        plan = search_ilp(posed, baselines, Limits(1, Deadline.after(60))).best
    else:
        plan = baselines[strategy]
    step = ShardedStep(problem.dag, plan, cpu, mesh=problem.mesh)
    xla = _xla_bytes(problem, module, plan)
    return (step.peak_memory() - xla) / xla


def test_outer_products_are_computed_inside_the_sum_of_their_readers() -> None:
    """An RNN language model data parallel at one sample per device: each weight
    gradient is a sum over time steps of matmuls contracting that one sample, outer
    products XLA rewrites as multiplies and computes inside the sum's loop, never
    writing one. Held as matmul results, the simulated peak was 86 % over XLA's
    (12.6 MB against 6.75 MB)."""
    assert abs(_benchmark_error("rnnlm", "data-parallel")) <= 0.05


@pytest.mark.parametrize(
    ("model", "strategy"),
    [("candle_uno", "expert"), ("transformer", "data-parallel"), ("candle_uno", "data-parallel")],
)
def test_xla_reuses_dying_operands_and_donated_weights_buffers(model: str, strategy: str) -> None:
    """candle_uno's expert plan, whose largest weight gradient (1.3 MB) is scaled by an
    element-wise op writing over the matmul's result (+44 % when both were held); the
    transformer data parallel, whose temporaries XLA places in the buffers of donated
    weights between their copies and their updates (+12 % when the copies were held
    beside them; -8.4 % without a relu's input held for its gradient,
    `duplicated_into`; -6.6 % with the transposed softmax folded into its dot,
    `DIVIDED`); candle_uno data parallel, whose weights' copies XLA places in the
    buffers of the weights copied before them, one value at a time (+8.8 % with
    temporaries packed into those buffers by bytes)."""
    assert abs(_benchmark_error(model, strategy)) <= 0.05


def test_a_donated_buffer_holds_one_temporary_at_a_time() -> None:
    """XLA's buffer assignment puts a temporary in a donated weight's buffer at offset 0
    when no value there overlaps its life: of two 100-byte temporaries live together,
    only one goes into a free 256-byte buffer; a copy made after the weight's own last
    read goes in, one still live at the update does not, but for an operand the update
    writes over."""
    donated = [_Donated(256, read_to=0.5, written_at=10, shared=frozenset({3}))]
    temps = [(3, 4, 100, "gradients"), (3, 4, 100, "gradients"), (0.6, 2, 256, "params")]
    temps += [(8, 10, 256, "communication"), (9, 11, 64, "activations")]
    outside = _outside_donated(temps, donated)
    assert sorted(outside) == [(3, 4, 100, "gradients"), (9, 11, 64, "activations")]


def test_xlas_heap_can_need_more_than_the_bytes_live_at_once() -> None:
    """Best fit in decreasing size (and in decreasing life), as XLA's heap simulator
    places temporaries: four buffers at most 5 bytes live at once need a 6-byte heap,
    in either order the last buffer placed finding no gap that fits it (by size: the
    1-byte one, under which the two 3-byte ones lie apart in time; by life: the second
    3-byte one, above a 2-byte gap)."""
    temps = [(3, 3, 3, "x"), (4, 5, 1, "x"), (3, 4, 2, "x"), (5, 5, 3, "x")]
    assert sum(n for _, n in _most_live(temps)) == 5
    assert _packed(temps) == (6, "x")


def test_fused_ops_take_no_wave_of_xlas_schedule() -> None:
    """candle_uno's ILP plan: a weight gradient summed, scaled and added to the weight
    by three element-wise ops XLA fuses into one update; scheduled one BFS wave each,
    the gradients were held three waves too long (+9.7 %)."""
    assert abs(_benchmark_error("candle_uno", "ilp")) <= 0.05


def test_an_all_gather_along_a_minor_dimension_is_copied_for_its_dot() -> None:
    """The transformer's expert plan gathers its hidden activations (1 MB) along their
    last dimension: XLA gathers them in a layout with that dimension first and copies
    the result row-major for the matmul, 1 MB more at its peak (-21 % without)."""
    assert abs(_benchmark_error("transformer", "expert")) <= 0.05


def test_convolutions_copy_their_arguments_and_max_pool_gradients_fill_zeros() -> None:
    """AlexNet, the ILP's plan: XLA's CPU convolutions read channels-last copies of the
    images and of every kernel, one per kind of convolution (`CONVOLUTIONS`), and each
    max-pooling's gradient scatters into zeros made at the step's start
    (`made_at_start`) at an argmax found in the forward from s32 index arrays
    (`argmax_of`). Without the copies the simulated peak was 19 % under (4.00 MB
    against 4.97 MB), without the zeros 2.5 % under, without the argmax 7.6 % under:
    within 2 % with all three."""
    assert abs(_benchmark_error("alexnet", "ilp")) <= 0.02


def test_a_softmax_materializes_its_exponent() -> None:
    """rnnlm's ILP plan, whose peak is the gathered logits (512 KB) with the loss's and
    its gradient's `exp(x - max x)` (`EXPONENTIATING`): without them the simulated
    peak was 10.6 % under XLA's."""
    assert abs(_benchmark_error("rnnlm", "ilp")) <= 0.05


def test_xlas_heap_measures_lives_in_allocations_and_frees() -> None:
    """XLA's heap simulator stamps each allocation and free with a counter, so a life
    is as long as the events in it, not the instructions: three buffers made at the
    start, each read by a scaled copy, each read by an all-reduce; eight small buffers
    come and go while the last two all-reduces live, which makes those the longest of
    their size after the first three. Placed first, they take the slots the first
    buffers leave, and the scaled copies go on top: 500 bytes of heap, as XLA packs
    dlrm's expert plan (on instruction positions, the scaled copies go first and take
    those slots: 400, the most live at once)."""
    temps = [(0, 10 + k, 100, "gradients") for k in range(3)]
    temps += [(10 + k, 14 + k, 100, "gradients") for k in range(3)]
    temps += [(14 + k, 16 + k, 100, "communication") for k in range(3)]
    temps += [(17, 17, 1, "activations")] * 8
    ticks = _event_times(temps)
    assert [last - first for first, last, _, _ in ticks[3:9]] == [7, 7, 7, 6, 13, 20]
    assert sum(nbytes for _, nbytes in _most_live(temps)) == 400
    assert _packed(temps) == (500, "communication")


def test_an_all_to_all_slices_its_operand_and_returns_a_tuple() -> None:
    """dlrm's expert plan: XLA feeds each all-to-all its operand's blocks as slices, one
    instruction each, which puts the all-to-all a wave later in its schedule, and
    returns a tuple of one buffer per device; and a scatter written in place over a
    copy of zeros keeps its buffer from the op reading it (a buffer of two values is
    not shared). Its heap then holds the eight scaled embedding gradients where no
    scatter has ended, as XLA's does: within 1 % of XLA's peak (-18.8 % without the
    slices and tuples, -4.7 % with the scatters' buffers handed on)."""
    assert abs(_benchmark_error("dlrm", "expert")) <= 0.01


def test_an_element_wise_operand_of_an_all_to_all_is_computed_in_its_slices() -> None:
    """alexnet's expert plan scales a weight gradient for an all-to-all: XLA computes
    the scale inside the slices of the all-to-all's operand (`multiply_slice_fusion`),
    never writing it, so the slices come after the largest gradient's last read;
    written, the simulated peak held both (+5.4 % against XLA's; +2.8 % with the rule)."""
    assert abs(_benchmark_error("alexnet", "expert")) <= 0.04


GATHERED = """
func.func @main(%x: tensor<4x16xf32>, %w: tensor<16x16xf32>, %v: tensor<16x4xf32>) -> tensor<4x4xf32> {
  %h = graph.matmul %x, %w : tensor<4x16xf32>
  %r = graph.relu %h : tensor<4x16xf32>
  %y = graph.matmul %r, %v : tensor<4x4xf32>
  %s = graph.relu %r : tensor<4x16xf32>
  %z = graph.matmul %s, %v : tensor<4x4xf32>
  %o = graph.add %y, %z : tensor<4x4xf32>
  func.return %o : tensor<4x4xf32>
}
"""  # noqa: E501
"""`relu(x @ w)`, computed split by its columns and read whole by a matmul: an
all-gather along its minor dimension (XLA gathers it column-major, `gathered_minor`)."""


def _gathered_step(program: str, shared: bool) -> tuple[ShardedStep, list[str]]:
    """`program` (`GATHERED`, `RETURNED`) on 8 devices, `x @ w` and the first relu
    split by columns, the second relu split too where `shared` (it then reads the
    first relu's result where the all-gather does), else whole, the rest whole and
    every result returned whole: the step and device 0's `_sequence`, named (an
    instruction beside a collective by its side)."""
    dag = dag_module.from_module(Parser(make_context(), program).parse_module())
    problem = Problem(dag, parse_mesh(8), None, {})
    h, r, y, s, z, o = (node for node in dag.ops if node.inputs)
    split = {h: {"n": ("d",)}, r: {"d1": ("d",)}, s: {"d1": ("d",)} if shared else {}}
    return _named_sequence(problem, split | {y: {}, z: {}, o: {}})


def _named_sequence(problem: Problem, configs: dict) -> tuple[ShardedStep, list[str]]:
    """The step of `problem` in `configs` on 8 devices, every result returned whole,
    and device 0's `_sequence`, named (an instruction beside a collective by its
    side)."""
    dag = problem.dag
    plan = complete(problem, Prescription(configs=configs))
    plan.outputs = tuple(Sharding("mesh", ((),) * len(v.sig.shape)) for v in dag.outputs)
    step = ShardedStep(dag, plan, machine("cpu-8"), mesh=problem.mesh)
    made = step._made(0)[1]
    order = step._sequence(0, step._fused_on(made), *step._relaid(made))
    names = [entry.side if isinstance(entry, Beside) else step.graph[entry].name for entry in order]
    return step, names


RETURNED = GATHERED.replace("-> tensor<4x4xf32>", "-> (tensor<4x4xf32>, tensor<4x16xf32>)").replace(
    "func.return %o : tensor<4x4xf32>", "func.return %o, %r : tensor<4x4xf32>, tensor<4x16xf32>"
)
"""`GATHERED` returning the relu's result too, whole: gathered into the result."""

GATHERED_BYTES, SHARD_BYTES = 4 * 16 * 4, 4 * 16 * 4 // 8


def test_an_all_gathers_copy_is_an_instruction_a_wave_later() -> None:
    """An all-gather along a minor dimension gathers column-major, and XLA copies the
    result row-major for a matmul, an instruction of its own a wave later that the
    matmul waits for (candle_uno's MCMC plan: `wrapped_copy` of `all_gather.11`,
    nine instructions later, -5.3 % without it; the transformer's +6.4 % and
    alexnet's +8.1 % held the gathered buffer until the matmul, in a later wave):
    the gathered buffer lives until the copy, the copy until the matmul; and for a
    program result gathered so, the gathered buffer is a temporary beside the
    result's own."""
    step, names = _gathered_step(GATHERED, shared=False)
    gather = names.index("all_gather of relu #1")
    assert names[gather + 1 : gather + 3] == ["after", "matmul #2"]
    assert "before" not in names  # the relu, read by the all-gather alone, writes its layout
    temps = step._buffers_of(0)[1]
    assert (gather, gather + 1, GATHERED_BYTES, "communication") in temps  # to the copy
    assert (gather + 1, gather + 2, GATHERED_BYTES, "communication") in temps  # the copy
    step, names = _gathered_step(RETURNED, shared=False)
    gather = names.index("all_gather of relu #1")
    fixed, temps = step._buffers_of(0)
    assert ("communication", GATHERED_BYTES) in fixed  # the result, held throughout
    assert (gather, gather + 1, GATHERED_BYTES, "communication") in temps


def test_an_all_gathers_operand_is_copied_into_its_layout_a_wave_before() -> None:
    """The relu's result read by another relu where it lies, and by the all-gather: it
    is written row-major for the one, and XLA copies it into the layout the all-gather
    gathers in, an instruction a wave before the all-gather (alexnet's expert plan:
    `wrapped_copy.4 = f32[8,128]{0,1}` before `all_gather.18`; +5.3 % with the copy
    after the gather alone, which moved its weight gradient a wave earlier). A
    buffer of the operand's size lives from the copy to the all-gather. An embedding
    lookup read by the all-gather alone is a loop writing the gathered layout, as the
    relu is (`SELECTED`: rnnlm's ILP plan)."""
    step, names = _gathered_step(GATHERED, shared=True)
    copy, gather = names.index("before"), names.index("all_gather of relu #1")
    assert names[copy - 1 : gather + 1] == ["relu #1", "before", "relu #3", "all_gather of relu #1"]
    assert (copy, gather, SHARD_BYTES, "communication") in step._buffers_of(0)[1]
    dag = dag_module.from_module(Parser(make_context(), LOOKED_UP).parse_module())
    embedding, matmul = (node for node in dag.ops if node.inputs)
    problem = Problem(dag, parse_mesh(8), None, {})
    _, names = _named_sequence(problem, {embedding: {"f": ("d",)}, matmul: {}})
    assert names[names.index("embedding #0") + 1 :] == [
        "all_gather of embedding #0",
        "after",
        "matmul #1",
    ]


LOOKED_UP = """
func.func @main(%ids: tensor<4xi32>, %t: tensor<32x16xf32>, %v: tensor<16x4xf32>) -> tensor<4x4xf32> {
  %e = graph.embedding %ids, %t : tensor<4x16xf32>
  %y = graph.matmul %e, %v : tensor<4x4xf32>
  func.return %y : tensor<4x4xf32>
}
"""  # noqa: E501
"""Rows of a table looked up, split by their columns and read whole by a matmul."""


def _bottlenecks(blocks: int, image: int = 16) -> Problem:
    """A stem and `blocks` ResNet bottlenecks (each convolution through a batchnorm,
    a relu after all but the last, the residual add and its relu), 16 RGB images of
    `image`x`image`, trained by sgd on 8 devices."""
    net = ConvNet(batchnorm=True)
    x = net.conv(net.image(16, image), 4, 3, name="stem")
    for block in range(blocks):
        x = bottleneck(net, x, inner=4, out=16, strides=1, groups=1, name=f"b{block}")
    module = net.build(net.classifier(x, 10))
    AutodiffPass(loss="softmax-cross-entropy", optimizer="sgd", lr=0.01).apply(Context(), module)
    signature = training_signature(entry_function(module))
    return Problem(dag_module.from_module(module), parse_mesh(8), signature, {})


def test_a_training_batchnorms_normalized_output_is_computed_in_its_readers() -> None:
    """XLA never writes `batchnorm_train`'s normalized output where only element-wise
    ops read it (a relu, the residual add, the relu's gradient duplicating the relu):
    each computes it from the convolution and the batch statistics, so the
    convolution's output and the relu's are what the step holds for the backward, not
    the normalized one too (`COMPUTED_IN_READERS`). Six bottlenecks data parallel on 8
    devices: XLA 705,660 B per device; simulated 708,348 B (+0.4 %; 735,932 B, +4.3 %,
    before `CONVOLUTION_LAYOUTS` and the rules after it), 1,071,740 B (+51.9 %) with the
    normalized outputs held from the forward to the backward; the cost graph 676,916 B,
    1,012,788 B before (ResNet-101 at 64 samples a device: XLA 8.65e9 B, simulated
    8.59e9, 12.85e9 before). Its statistics are written: a reduction makes them."""
    problem = _bottlenecks(6)
    plan = complete(problem, STRATEGIES["data-parallel"](problem))
    step = ShardedStep(problem.dag, plan, machine("cpu-8"), mesh=problem.mesh)
    forward = [node for node in problem.dag.ops if node in problem.forward]

    def held(op: str) -> int:  # per device: the batch split 8 ways
        values = [node.results[0].sig for node in forward if node.op == op]
        return sum(sig.size * sig.dtype.itemsize for sig in values) // 8

    # the convolutions' outputs are held for the batchnorms' gradients, the relus' for
    # the next convolutions' (all but the last), and no normalized output, each the
    # size of its convolution's
    peak = max(step.memory().values(), key=lambda breakdown: breakdown.total)
    assert held("batchnorm_train") == held("conv2d")
    assert held("conv2d") <= peak.activations < held("conv2d") + held("relu")
    searched = SoapProblem(problem, machine("cpu-8"), None)
    estimate = evaluate(cost_model(searched), plan, searched).estimate
    others = peak.total - peak.activations  # weights, inputs, gradients at the peak
    assert estimate is not None
    assert estimate[0] < others + held("conv2d") + held("relu")
    for node in (node for node in forward if node.op == "batchnorm_train"):
        readers = [use.node for use in problem.dag.consumers()[node.results[0]]]
        assert fused_away(node.results[0], readers)
        assert not fused_away(node.results[1], readers)
        conv = next(node for node in forward if node.op == "conv2d")
        assert not fused_away(node.results[0], [*readers, conv])


def test_convolutions_read_an_activation_in_their_own_layouts() -> None:
    """A weight gradient reads its `x` as CHWN and its `dy` as HWNC, a forward
    convolution and an input gradient read them as NHWC, so an activation read by
    both is two buffers (`CONVOLUTION_LAYOUTS`): XLA writes each batchnorm gradient
    feeding a convolution twice (`subtract_multiply_fusion.2 = f32[2,32,32,16]`,
    `transpose_copy_fusion.4 = f32[32,32,2,16]`), live together in the backward. A
    stem and one bottleneck data parallel on 8 devices, 2 images of 32x32 each: XLA
    1,037,476 B per device; simulated 1,037,500 B, 775,356 B (-25.3 %) with one buffer
    per activation. A 1x1 kernel's input-gradient layout (HWOI) is its own: no copy."""
    problem = _bottlenecks(1, image=32)
    plan = complete(problem, STRATEGIES["data-parallel"](problem))
    step = ShardedStep(problem.dag, plan, machine("cpu-8"), mesh=problem.mesh)
    assert abs(step.peak_memory() - 1_037_476) <= 0.05 * 1_037_476
    grads = [node for node in problem.dag.ops if node.op == "conv2d_grad_weight"]
    dy = grads[-1].inputs[1]
    readers = [use.node for use in problem.dag.consumers()[dy]]
    assert {node.op for node in readers} >= {"conv2d_grad_input", "conv2d_grad_weight"}
    assert len(convolution_layouts(dy, readers)) == 2
    inputs = [node for node in problem.dag.ops if node.op == "conv2d_grad_input"]
    assert kernel_in_place(inputs[0], 1, (16, 4, 1, 1))
    assert not kernel_in_place(inputs[0], 1, (4, 4, 3, 3))
    assert not kernel_in_place(inputs[0], 0, (2, 16, 1, 1))


def test_a_pooling_gradient_is_broadcast_in_its_readers() -> None:
    """A global average pooling's gradient (`reduce_grad` of a mean) is `dy` broadcast
    over the image, which XLA computes in every loop reading it and never writes
    (`BROADCAST_GRADIENTS`): six bottlenecks data parallel on 8 devices, XLA 705,660 B
    per device; simulated 708,348 B (+0.4 %), 739,708 B (+4.8 %) with the broadcast
    held from the loss's gradient to the first block's."""
    problem = _bottlenecks(6)
    plan = complete(problem, STRATEGIES["data-parallel"](problem))
    step = ShardedStep(problem.dag, plan, machine("cpu-8"), mesh=problem.mesh)
    assert step.peak_memory() <= 1.02 * 705_660
    grads = [node for node in problem.dag.ops if node.op == "reduce_grad"]
    (pooled,) = [node for node in grads if node.results[0].sig.rank == 4]
    readers = [use.node for use in problem.dag.consumers()[pooled.results[0]]]
    assert fused_away(pooled.results[0], readers)


def test_a_batchnorm_gradient_computes_its_element_wise_operand() -> None:
    """A batchnorm gradient's reductions take an element-wise producer in
    (`FUSING_REDUCTIONS`): XLA never writes the relu gradient it reads
    (`select_reduce_fusion` computes it). Six bottlenecks data parallel on 8 devices:
    XLA 705,660 B per device; simulated 708,348 B (+0.4 %), 732,284 B (+3.8 %) with
    each such relu gradient written."""
    problem = _bottlenecks(6)
    plan = complete(problem, STRATEGIES["data-parallel"](problem))
    step = ShardedStep(problem.dag, plan, machine("cpu-8"), mesh=problem.mesh)
    assert abs(step.peak_memory() - 705_660) <= 0.02 * 705_660
    consumers = problem.dag.consumers()
    fed = [
        (node, [use.node for use in consumers[node.results[0]]])
        for node in problem.dag.ops
        if node.op == "relu_grad"
    ]
    fed = [(node, readers) for node, readers in fed if "batchnorm_grad" in {r.op for r in readers}]
    assert len(fed) == 19  # three a bottleneck (two inside, one after the add), the stem's
    conv = next(node for node in problem.dag.ops if node.op == "conv2d_grad_input")
    for node, readers in fed:
        assert fused_away(node.results[0], readers)
        assert not fused_away(node.results[0], [*readers, conv])
