"""Memory-placed programs on JAX (`tasoc.backends.jax.placed`): both modes against the
numpy reference of the unplaced program, the runtime's measured device bytes against
the schedule's replay op by op, the order the compiled mode's barriers keep, and the
host-memory placements of its CUDA cross-lowering against the program's swaps."""

from __future__ import annotations

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from memory_helpers import STEP, SWAPS, SWAPS_IN_PLACE
from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.parser import Parser

from tasoc.backends.arguments import random_inputs
from tasoc.backends.jax.placed import (
    NO_REMAT,
    CompiledProgram,
    PlacedLoweringError,
    RuntimeProgram,
    cuda_placements,
    lower_placed,
    planned_placements,
    stablehlo_placements,
)
from tasoc.backends.numpy import run_reference
from tasoc.driver.main import main
from tasoc.driver.sources import make_context
from tasoc.ir.memory import replay, unplaced
from tasoc.ir.program import entry_function
from tasoc.verify.equivalence import compare

# The corners: an argument swapped out and freed, an op with two results of which one
# is never read, i64 ids (int32 on JAX), a constant, a host argument returned as it is,
# a device argument returned as it is, the same op twice.
CORNERS = """\
module {
  func.func @main(%a: tensor<4x6xf32>, %b: tensor<4x6xf32, #memory.space<host>>, %ids: tensor<3xi64>, %t: tensor<5x6xf32> {graph.param}) -> (tensor<4x6xf32, #memory.space<host>>, tensor<4x3xf32>, tensor<3x6xf32>, tensor<4x6xf32>, tensor<5x6xf32>, tensor<4x6xf32, #memory.space<host>>) {
    %ah = memory.swap_out %a : tensor<4x6xf32, #memory.space<host>>
    %s0, %s1 = graph.split %a {axis = 1 : i64, sizes = array<i64: 3, 3>} : tensor<4x3xf32>, tensor<4x3xf32>
    memory.free %a
    %bd = memory.swap_in %b : tensor<4x6xf32>
    %e = graph.embedding %ids, %t : tensor<3x6xf32>
    memory.free %ids
    %c = graph.ones {shape = array<i64: 4, 6>, dtype = f32} : tensor<4x6xf32>
    %ad = memory.swap_in %ah : tensor<4x6xf32>
    %sum = graph.add %bd, %c : tensor<4x6xf32>
    %sum2 = graph.add %sum, %ad : tensor<4x6xf32>
    func.return %b, %s0, %e, %sum2, %t, %ah : tensor<4x6xf32, #memory.space<host>>, tensor<4x3xf32>, tensor<3x6xf32>, tensor<4x6xf32>, tensor<5x6xf32>, tensor<4x6xf32, #memory.space<host>>
  }
}
"""  # noqa: E501

PROGRAMS = {"swaps": SWAPS, "corners": CORNERS, "step": STEP}

OFFLOAD_ALL = (
    "zoo:transformer?layers=1&hidden=32&heads=2&seq=8&batch=2",
    "autodiff{loss=mse optimizer=adam lr=0.001},placement{search=offload-all params=host}",
)


def parsed(text: str) -> ModuleOp:
    module = Parser(make_context(), text).parse_module()
    module.verify()
    return module


@pytest.fixture(scope="module")
def offload_all(tmp_path_factory: pytest.TempPathFactory) -> ModuleOp:
    """A transformer training step placed by `placement{search=offload-all}`."""
    path = tmp_path_factory.mktemp("placed") / "step.mlir"
    spec, pipeline = OFFLOAD_ALL
    assert main(["opt", spec, "-p", pipeline, "-o", str(path)]) == 0
    return parsed(path.read_text())


def program(name: str, offload_all: ModuleOp) -> ModuleOp:
    return offload_all if name == "offload-all" else parsed(PROGRAMS[name])


ALL = [*PROGRAMS, "offload-all"]


# ------------------------------------------------------------------ compiled mode


@pytest.mark.parametrize("name", ALL)
def test_compiled_mode_equals_the_unplaced_reference(name: str, offload_all: ModuleOp) -> None:
    module = program(name, offload_all)
    inputs = random_inputs(module, 0)
    outputs = lower_placed(module, "compiled")(*inputs)
    result = compare(run_reference(unplaced(module), inputs), outputs, gradients=set())
    assert result.ok, result.summary()


def test_compiled_mode_leaves_values_where_the_program_says() -> None:
    module = parsed(CORNERS)
    placed = lower_placed(module, "compiled")
    assert isinstance(placed, CompiledProgram)
    args = placed.device_args(random_inputs(module, 0))
    assert [a.sharding.memory_kind for a in args] == ["device", "pinned_host", "device", "device"]
    results = placed.fn(*args)
    kinds = [r.sharding.memory_kind for r in results]
    assert kinds == ["pinned_host", "device", "device", "device", "device", "pinned_host"]


def _dependencies(text: str) -> dict[str, set[str]]:
    """Every value of `@main` in StableHLO text and the values it depends on,
    transitively (`%3#1` is `%3`)."""
    body = text.split("func.func public @main(", 1)[1].split("\n  }", 1)[0]
    direct: dict[str, set[str]] = {}
    for line in body.splitlines()[1:]:
        defined = re.match(r"\s*(%\w+)(?::\d+)? = ", line)
        if defined:
            rest = line[defined.end() :]
            direct[defined.group(1)] = set(re.findall(r"(%\w+)(?:#\d+)?", rest))
    closed: dict[str, set[str]] = {}

    def close(name: str) -> set[str]:
        if name not in closed:
            closed[name] = set()
            for operand in direct.get(name, ()):
                closed[name] |= {operand, *close(operand)}
        return closed[name]

    return {name: close(name) for name in direct}


def _defining(text: str, pattern: str) -> list[str]:
    """The values defined by the lines of `@main` matching `pattern`, in order."""
    return re.findall(rf"(%\w+)(?::\d+)? = [^\n]*{pattern}", text)


def test_barriers_keep_the_schedule_and_let_swaps_overlap() -> None:
    """In the CUDA lowering of the example: the second swap-in (of the relu-time value)
    depends on the relu, so XLA cannot hoist it above where it stands; the relu does
    not depend on the swap-out before it, so the copy overlaps it; each graph op
    depends on the one before it; frees lower to nothing (a barrier per other op after
    the first graph op)."""
    text = lower_placed(parsed(SWAPS), "compiled").lowered("cuda").as_text()
    depends = _dependencies(text)
    (matmul,) = _defining(text, "stablehlo.dot_general")
    (relu,) = _defining(text, "call @relu")
    (add,) = _defining(text, "stablehlo.add")
    swap_in_w, swap_in_y, _ = _defining(text, '_xla_buffer_placement = "device"')
    swap_out_y, _ = _defining(text, '_xla_buffer_placement = "pinned_host"')
    assert relu in depends[swap_in_y]
    assert swap_out_y not in depends[relu]
    assert matmul in depends[relu] and relu in depends[add] and swap_in_y in depends[add]
    assert depends[swap_in_w] == {"%arg1", *_defining(text, "sharding_constraint %arg1")}
    assert text.count("stablehlo.optimization_barrier") == 4  # swap_out, relu, swap_in, add


def test_compiled_mode_turns_xla_rematerialization_off() -> None:
    """XLA takes the option (it refuses option names it does not know, so an option
    that compiles is one it read) and the program runs with it."""
    assert NO_REMAT == {"xla_disable_hlo_passes": "rematerialization"}
    placed = lower_placed(parsed(SWAPS), "compiled")
    placed.lowered().compile()  # on this machine's CPU
    with pytest.raises(Exception, match="No such compile option"):
        jax.jit(lambda x: x + 1, compiler_options={"xla_no_such_pass_option": "x"})(jnp.ones(2))


# ------------------------------------------------------------------- runtime mode


@pytest.mark.parametrize("name", ALL)
def test_runtime_measures_the_replay_op_by_op(name: str, offload_all: ModuleOp) -> None:
    module = program(name, offload_all)
    inputs = random_inputs(module, 0)
    placed = lower_placed(module, "runtime")
    results, measured = placed.measure(*placed.device_args(inputs))
    planned = replay(entry_function(module))
    assert (measured.start, measured.live) == (planned.start, planned.live)
    assert measured.peak_bytes == planned.peak_bytes
    assert measured.peak_op == planned.peak_op
    outputs = [np.asarray(r) for r in results]
    result = compare(run_reference(unplaced(module), inputs), outputs, gradients=set())
    assert result.ok, result.summary()


def test_runtime_frees_what_the_program_frees_and_returns_in_place() -> None:
    module = parsed(CORNERS)
    placed = lower_placed(module, "runtime")
    assert isinstance(placed, RuntimeProgram)
    assert placed.consumed == (0, 2)
    args = placed.device_args(random_inputs(module, 0))
    results, _ = placed.measure(*args)
    assert [a.is_deleted() for a in args] == [True, False, True, False]
    assert results[0] is args[1] and results[4] is args[3]  # returned as they are
    kinds = [r.sharding.memory_kind for r in results]
    assert kinds == ["pinned_host", "device", "device", "device", "device", "pinned_host"]


def test_runtime_writes_a_result_over_the_operand_marked_in_place() -> None:
    """`memory.in_place`: the marked ops' calls donate the operand, so XLA writes the
    result into its buffer and the bytes measured after each op are the replay's, a
    tensor fewer than without the marks; the values are the step's."""
    module = parsed(SWAPS_IN_PLACE)
    inputs = random_inputs(module, 0)
    placed = lower_placed(module, "runtime")
    results, measured = placed.measure(*placed.device_args(inputs))
    planned = replay(entry_function(module))
    assert (measured.start, measured.live) == (planned.start, planned.live)
    assert sum(planned.live) < sum(replay(entry_function(parsed(SWAPS))).live)
    outputs = [np.asarray(r) for r in results]
    assert compare(run_reference(unplaced(module), inputs), outputs, gradients=set()).ok


def test_runtime_counts_i64_values_as_the_ir_types_them() -> None:
    """`ids` is i64 in the IR and int32 on JAX: it still counts 8 bytes an element."""
    module = parsed(CORNERS)
    placed = lower_placed(module, "runtime")
    args = placed.device_args(random_inputs(module, 0))
    assert args[2].dtype == np.int32
    _, measured = placed.measure(*args)
    assert measured.start == replay(entry_function(module)).start == 4 * 6 * 4 + 3 * 8 + 5 * 6 * 4


def test_runtime_ignores_arrays_it_did_not_make() -> None:
    module = parsed(SWAPS)
    placed = lower_placed(module, "runtime")
    other = jnp.zeros((256, 256))  # live across the run, not the run's
    _, measured = placed.measure(*placed.device_args(random_inputs(module, 0)))
    assert measured.peak_bytes == replay(entry_function(module)).peak_bytes
    assert not other.is_deleted()


def test_runtime_compiles_each_distinct_op_once() -> None:
    """CORNERS' two adds (same operand types) share one compiled call: split,
    embedding, ones and add make four."""
    assert lower_placed(parsed(CORNERS), "runtime").compiled_ops == 4
    # STEP's 17 graph ops: the second 4x8 mul and add reuse the first's; its two
    # matmuls, scales and constants differ in operand types or values.
    assert lower_placed(parsed(STEP), "runtime").compiled_ops == 15


def test_runtime_takes_no_donated_arguments() -> None:
    with pytest.raises(PlacedLoweringError, match="takes no donated arguments"):
        lower_placed(parsed(SWAPS), "runtime", donate=[0])


# ---------------------------------------------------------- CUDA cross-lowering


@pytest.mark.parametrize("name", ALL)
def test_cuda_lowering_places_what_the_program_says(name: str, offload_all: ModuleOp) -> None:
    module = program(name, offload_all)
    found, text = cuda_placements(lower_placed(module, "compiled"))
    assert found == planned_placements(module)
    assert "annotate_device_placement" in text


def test_placements_of_the_example_program() -> None:
    """Two copies to host (the swap-out and the host result), three to device (two
    swap-ins and the device result), one host argument, one host result; the CPU
    lowering elides the copies inside the program, the CUDA lowering keeps them."""
    module = parsed(SWAPS)
    placed = lower_placed(module, "compiled")
    found, _ = cuda_placements(placed)
    assert found.to_json() == {"to_host": 2, "to_device": 3, "host_arguments": 1, "host_results": 1}
    on_cpu = stablehlo_placements(placed.lowered().as_text())
    assert on_cpu.host_arguments == 1 and on_cpu.host_results == 1
    assert (on_cpu.to_host, on_cpu.to_device) == (1, 1)  # the results' alone


# ------------------------------------------------------------------------ errors


def test_an_op_without_a_lowering_is_refused() -> None:
    module = parsed(SWAPS)
    add = next(op for op in entry_function(module).body.block.ops if op.name == "graph.add")
    add.parent_block().insert_op_before(arith.ConstantOp(IntegerAttr(1, i64)), add)  # type: ignore[union-attr]
    for mode in ("compiled", "runtime"):
        with pytest.raises(PlacedLoweringError, match=r"no JAX lowering for op 'arith\.constant'"):
            lower_placed(module, mode)  # type: ignore[call-overload]


def test_a_sharded_placed_program_is_not_lowered_on_one_device() -> None:
    """It runs on its mesh (`joint.lower_joint`, tests/test_joint_jax.py)."""
    text = """\
module attributes {memory.capacity = 100000 : i64} {
  parallel.mesh @m ["d" = 2]
  func.func @main(%x: tensor<4x4xf32, #parallel.sharding<@m, [["d"], []]>>) -> tensor<4x4xf32, #parallel.sharding<@m, [["d"], []]>> {
    %y = graph.relu %x : tensor<4x4xf32, #parallel.sharding<@m, [["d"], []]>>
    func.return %y : tensor<4x4xf32, #parallel.sharding<@m, [["d"], []]>>
  }
}
"""  # noqa: E501
    with pytest.raises(PlacedLoweringError, match=r"runs on its mesh \(joint\.lower_joint\)"):
        lower_placed(parsed(text), "compiled")


def test_example_file_round_trips(tmp_path: Path) -> None:
    """The texts above are programs the verifier accepts (replay within capacity)."""
    for text in PROGRAMS.values():
        path = tmp_path / "p.mlir"
        path.write_text(text)
        parsed(path.read_text())
