"""Programs both sharded and memory-placed on JAX (`tasoc.backends.jax.joint`, `tasoc run`):
both modes against the numpy reference of the program without placement nor sharding,
the runtime's per-device bytes against the replay op by op on every device, the HLO
audit (collectives and host-memory placements), and what is refused, in one line."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import Result, assert_one_line_error
from jax.sharding import PartitionSpec
from memory_helpers import placed_by_hand
from sharded_programs import GATHER
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from tasoc.backends.arguments import random_inputs
from tasoc.backends.jax.audit import audit
from tasoc.backends.jax.joint import JOINT_OPTIONS, lower_joint
from tasoc.backends.jax.placed import (
    PlacedLoweringError,
    RuntimeProgram,
    cuda_placements,
    planned_placements,
)
from tasoc.backends.numpy import run_reference
from tasoc.driver.main import main
from tasoc.driver.sources import make_context
from tasoc.ir.memory import host_arguments, is_placed, replay, unplaced
from tasoc.ir.parallel import is_sharded, unsharded
from tasoc.ir.program import entry_function
from tasoc.ir.training import training_signature
from tasoc.verify.equivalence import compare

# A replicated weight born on the host and swapped in, a row-split activation swapped
# out and back: each device moves its own block.
JOINT = """\
builtin.module {
  parallel.mesh @mesh ["d" = 2]
  func.func @main(%x: tensor<8x4xf32, #parallel.sharding<@mesh, [["d"], []]>>, %w: tensor<4x4xf32, #memory.space<host, #parallel.sharding<@mesh, [[], []]>>>) -> tensor<8x4xf32, #parallel.sharding<@mesh, [["d"], []]>> {
    %wd = memory.swap_in %w : tensor<4x4xf32, #parallel.sharding<@mesh, [[], []]>>
    %y = graph.matmul %x, %wd : tensor<8x4xf32, #parallel.sharding<@mesh, [["d"], []]>>
    %yh = memory.swap_out %y : tensor<8x4xf32, #memory.space<host, #parallel.sharding<@mesh, [["d"], []]>>>
    %y2 = memory.swap_in %yh : tensor<8x4xf32, #parallel.sharding<@mesh, [["d"], []]>>
    %z = graph.relu %y2 : tensor<8x4xf32, #parallel.sharding<@mesh, [["d"], []]>>
    func.return %z : tensor<8x4xf32, #parallel.sharding<@mesh, [["d"], []]>>
  }
}
"""  # noqa: E501

# A training step sharded data parallel on 2 devices (gradients all-reduced), placed by
# hand (`placed_by_hand`): activations and partial sums swapped out and back, a param
# on the host and its update returned there, an input freed.
STEP = (
    "zoo:candle_uno?feature_width=8&feature_layers=1&top_width=8&top_layers=1"
    "&cell_features=4&drug_descriptors=4&drug_fingerprints=4&batch=4",
    "autodiff{loss=mse optimizer=sgd lr=0.01},soap-shard{mesh=2 search=data-parallel}",
)


Tasoc = Callable[..., Result]


def parsed(text: str) -> ModuleOp:
    module = Parser(make_context(), text).parse_module()
    module.verify()
    return module


@pytest.fixture(scope="module")
def step_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("joint")
    sharded = folder / "sharded.mlir"
    spec, pipeline = STEP
    assert main(["opt", spec, "-p", pipeline, "-o", str(sharded)]) == 0
    path = folder / "step.mlir"
    path.write_text(str(placed_by_hand(parsed(sharded.read_text()))))
    return path


@pytest.fixture(scope="module")
def programs(step_file: Path) -> dict[str, ModuleOp]:
    return {"joint": parsed(JOINT), "step": parsed(step_file.read_text())}


def expected(module: ModuleOp, inputs: list[np.ndarray]) -> list[np.ndarray]:
    return run_reference(unsharded(unplaced(module)), inputs)


def gradients(module: ModuleOp) -> set[int]:
    signature = training_signature(entry_function(module))
    return {result for result, _ in signature.replaces} if signature else set()


def test_the_step_is_sharded_and_placed(programs: dict[str, ModuleOp]) -> None:
    step = programs["step"]
    assert is_sharded(step) and is_placed(step)
    text = str(step)
    assert "parallel.all_reduce" in text and "memory.free" in text
    assert re.search(r"memory.swap_out %\w+ : tensor<[^>]*unreduced", text)  # partial sums
    assert len(host_arguments(entry_function(step))) == 1


# ------------------------------------------------------------------ both modes


@pytest.mark.parametrize("name", ["joint", "step"])
def test_compiled_mode_equals_the_reference(name: str, programs: dict[str, ModuleOp]) -> None:
    module = programs[name]
    inputs = random_inputs(module, 0)
    outputs = lower_joint(module, "compiled")(*inputs)
    result = compare(expected(module, inputs), outputs, gradients=gradients(module))
    assert result.ok, result.summary()


@pytest.mark.parametrize("name", ["joint", "step"])
def test_runtime_measures_the_replay_on_every_device(
    name: str, programs: dict[str, ModuleOp]
) -> None:
    module = programs[name]
    inputs = random_inputs(module, 0)
    program = lower_joint(module, "runtime")
    results, measured = program.measure(*program.device_args(inputs))
    planned = replay(entry_function(module))
    assert (measured.start, measured.live) == (planned.start, planned.live)
    assert measured.devices == 2 and not any(measured.spread)
    outputs = [np.asarray(r) for r in results]
    result = compare(expected(module, inputs), outputs, gradients=gradients(module))
    assert result.ok, result.summary()


def test_values_lie_on_the_mesh_in_their_memory_kinds(programs: dict[str, ModuleOp]) -> None:
    """In both modes the host weight is replicated in pinned host memory and the
    activation split by rows in device memory, as the IR says; the replay counts one
    device's block (the 8x4 argument split in two: 4x4 floats)."""
    module = programs["joint"]
    for mode in ("compiled", "runtime"):
        program = lower_joint(module, mode)  # type: ignore[call-overload]
        args = program.device_args(random_inputs(module, 0))
        assert [a.sharding.memory_kind for a in args] == ["device", "pinned_host"]
        rows, whole = PartitionSpec("d", None), PartitionSpec(None, None)
        assert [a.sharding.spec for a in args] == [rows, whole]
        assert args[0].addressable_shards[0].data.shape == (4, 4)
        (z,) = program.fn(*args)
        assert z.sharding.memory_kind == "device" and z.sharding.spec == rows
    assert replay(entry_function(module)).start == 4 * 4 * 4


def test_the_runtime_frees_an_argument_and_shares_compiled_ops(
    programs: dict[str, ModuleOp],
) -> None:
    module = programs["step"]
    program = lower_joint(module, "runtime")
    assert isinstance(program, RuntimeProgram)
    (freed,) = program.consumed
    args = program.device_args(random_inputs(module, 0))
    program.measure(*args)
    assert args[freed].is_deleted()
    ops = [
        op for op in entry_function(module).body.block.ops if op.name.startswith(("graph", "par"))
    ]
    assert program.compiled_ops < len(ops)


# ------------------------------------------------------------------------ audit


def test_swaps_move_each_devices_block_inside_the_shard_map() -> None:
    """In the CUDA lowering of the example, the swaps are placement annotations inside
    the manual computation (each device's block), the results' outside it; the host
    argument is laid out in pinned host memory; both XLA option sets are on."""
    program = lower_joint(parsed(JOINT), "compiled")
    found, text = cuda_placements(program)
    assert found.to_json() == {"to_host": 1, "to_device": 3, "host_arguments": 1, "host_results": 0}
    inside = text.split("sdy.manual_computation", 1)[1].split("sdy.return", 1)[0]
    placements = re.findall(r'_xla_buffer_placement = "(\w+)"', inside)
    assert placements == ["device", "pinned_host", "device"]  # swap_in, swap_out, swap_in
    assert inside.count("stablehlo.optimization_barrier") == 3  # swap_out, swap_in, relu
    passes = JOINT_OPTIONS["xla_disable_hlo_passes"].split(",")
    assert "rematerialization" in passes and "all-reduce-combiner" in passes


def test_audit_of_the_step(programs: dict[str, ModuleOp]) -> None:
    """The gradients' all-reduces compile one for one, and every swap is a placement."""
    module = programs["step"]
    program = lower_joint(module, "compiled")
    found = audit(module, program)
    assert found.ok, found.table()
    assert [row.kind for row in found.rows] == ["all-reduce"]
    placements, _ = cuda_placements(program)
    assert placements == planned_placements(module)
    assert placements.host_arguments == placements.host_results == 1


# ------------------------------------------------------------------------ refused

TWO_MESHES = """\
builtin.module {
  parallel.mesh @m ["d" = 2]
  parallel.mesh @n ["d" = 2] devices [2, 3]
  func.func @main(%x: tensor<8x4xf32, #parallel.sharding<@m, [["d"], []]>>) -> tensor<8x4xf32, #memory.space<host, #parallel.sharding<@n, [["d"], []]>>> {
    %c = parallel.replicate %x : tensor<8x4xf32, #parallel.sharding<@n, [["d"], []]>>
    %h = memory.swap_out %c : tensor<8x4xf32, #memory.space<host, #parallel.sharding<@n, [["d"], []]>>>
    func.return %h : tensor<8x4xf32, #memory.space<host, #parallel.sharding<@n, [["d"], []]>>>
  }
}
"""  # noqa: E501


def test_a_program_on_two_meshes_is_refused() -> None:
    for mode in ("compiled", "runtime"):
        with pytest.raises(PlacedLoweringError, match=r"on 2 meshes .* is not supported"):
            lower_joint(parsed(TWO_MESHES), mode)  # type: ignore[call-overload]


# ----------------------------------------------------------------------- tasoc run


def written(tmp_path: Path, text: str, name: str = "joint.mlir") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("mode", ["compiled", "runtime"])
def test_run_checks_and_audits_the_example(tasoc: Tasoc, tmp_path: Path, mode: str) -> None:
    report = tmp_path / "r.json"
    path = written(tmp_path, JOINT)
    result = tasoc(
        "run", path, "--devices", "2", "--mode", mode, "--check", "--audit", "--report", report
    )
    assert result.code == 0, result
    assert f"on jax, 2 devices, {mode} mode (seed 0):" in result.out
    assert "equivalent to the numpy reference of the unsharded and unplaced program" in result.out
    assert "audit: the compiled collectives are the ones the IR asks for" in result.out
    assert re.search(r"copies to device \(swap-ins, device results\)\s+3\s+3", result.out)
    assert "audit: the CUDA lowering places every value where the IR says" in result.out
    figures = json.loads(report.read_text())
    placement = figures["placement"]
    assert placement["devices"] == 2 and placement["planned_peak_bytes"] == 192
    assert set(figures["audit"]) == {"collectives", "placements"}
    assert figures["audit"]["placements"]["equal"]
    if mode == "runtime":
        assert (
            "memory: peak live device memory per device (2 devices) measured 192 bytes, "
            "planned 192 bytes" in (result.out)
        )
        assert "op by op on every device" in result.out
        assert placement["measured_bytes"] == placement["planned_bytes"]


def test_steps_of_the_sharded_placed_step(tasoc: Tasoc, step_file: Path, tmp_path: Path) -> None:
    """Trained in runtime mode (the freed input placed anew each step, the host param fed
    back on the host), the losses are the reference's."""
    report = tmp_path / "r.json"
    result = tasoc(
        "run",
        step_file,
        "--devices",
        "2",
        "--steps",
        "2",
        "--mode",
        "runtime",
        "--check",
        "--report",
        report,
    )
    assert result.code == 0, result
    assert "check: the measured device bytes are the replay's, op by op on every device" in (
        result.out
    )
    losses = json.loads(report.read_text())["losses"]
    reference = tasoc("run", step_file, "--steps", "2", "--backend", "numpy", "--report", report)
    assert reference.code == 0, reference
    assert losses == pytest.approx(json.loads(report.read_text())["losses"], rel=1e-5)


def test_numpy_backend_runs_the_unsharded_unplaced_program(tasoc: Tasoc, tmp_path: Path) -> None:
    result = tasoc("run", written(tmp_path, JOINT), "--backend", "numpy")
    assert result.code == 0, result
    assert "on numpy (seed 0):" in result.out
    (line,) = result.err.splitlines()
    assert line.startswith("tasoc: note: --backend numpy ignores memory spaces and shardings")


@pytest.mark.parametrize(
    ("text", "options", "fragments"),
    [
        (JOINT, ["--processes", "2"], ["--processes runs sharded programs without memory"]),
        (TWO_MESHES, ["--devices", "4", "--report"], ["cannot run on jax:", "on 2 meshes"]),
        (GATHER, ["--mode", "runtime", "--report"], ["--mode says how a memory-placed program"]),
    ],
)
def test_refusals_are_one_line(
    tasoc: Tasoc, tmp_path: Path, text: str, options: list[str], fragments: list[str]
) -> None:
    """Each one line, nothing written (`--report` where the options allow it)."""
    report = tmp_path / "r.json"
    extra = [report] if options[-1] == "--report" else []
    result = tasoc("run", written(tmp_path, text), *options, *extra)
    assert_one_line_error(result, *fragments)
    assert not report.exists()


def test_a_runtime_whose_devices_differ_is_caught(
    tasoc: Tasoc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runtime that leaves one device holding more than another (here: one that
    counts device 0 twice) fails `--check` at the first op where they differ."""
    from tasoc.backends.jax import placed

    real = placed._Runtime._device_bytes

    def lopsided(self: placed._Runtime, *args: object) -> tuple[int, int]:
        held, spread = real(self, *args)  # type: ignore[arg-type]
        return held, spread + (held if held > 64 else 0)

    monkeypatch.setattr(placed._Runtime, "_device_bytes", lopsided)
    result = tasoc(
        "run", written(tmp_path, JOINT), "--devices", "2", "--mode", "runtime", "--check"
    )
    assert_one_line_error(
        result, "the devices hold different bytes after op 0 (memory.swap_in): one 128, one 0"
    )
