"""The measured op table, machines priced with it, and `tasoc machine calibrate`.

Measurements here are never asserted beyond sanity (positive, finite): the machine is
shared and loaded. The table's pricing is checked with hand-written cache files and a
`measure` that fails if called; `calibrate` end to end runs at `--quick` sizes.
"""

from __future__ import annotations

import json
import math
import socket
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import jax
import pytest
from conftest import Result, assert_one_line_error
from test_sim_parallel import TINY, training_plan

from tasoc.cost import calibration, op_table
from tasoc.cost.analytic import op_class, roofline
from tasoc.cost.calibration import CollectiveSample, fit_collectives, fit_host
from tasoc.cost.devices import CPU, OP_CLASSES
from tasoc.cost.machines import (
    COLLECTIVE_KINDS,
    CollectivePrice,
    Link,
    Machine,
    MachineError,
    cpu_machine,
    load_machine,
    machine,
    machine_from_dict,
    machine_to_dict,
    machine_to_toml,
)
from tasoc.cost.op_table import MAX_COPIES, OpTable, copies_of, table_key
from tasoc.driver import distributed
from tasoc.driver import machine as machine_driver
from tasoc.ir.dag import Node
from tasoc.ir.shapes import DType, TensorSig
from tasoc.sim.core import simulate
from tasoc.sim.parallel import fused_operands, local_node

X = TensorSig((4, 8), DType.F32)
W = TensorSig((8, 2), DType.F32)


def _matmul() -> Node:
    return Node("matmul", [Node.arg(0, "x", X).out, Node.arg(1, "w", W).out])


def _measured(local: Machine) -> Machine:
    return Machine(
        name="measured",
        device=local.device,
        nodes=local.nodes,
        devices_per_node=local.devices_per_node,
        intra=local.intra,
        inter=local.inter,
        host=local.host,
        sources=("a test",),
        pricing="measured",
    )


def _no_measuring(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record each entry `measure` is asked for, answering 1 ms per operand."""
    asked: list[str] = []

    def fake(node: Node, running: int, make: int, samples: int = 0) -> float:
        asked.append(table_key(node, running))
        return 1e-3 * len(node.inputs)

    monkeypatch.setattr(op_table, "measure", fake)
    return asked


def _write_table(folder: Path, seconds: dict[str, float]) -> None:
    """A cache file as `OpTable` writes it, with these entries."""
    data = {
        "format": op_table.TABLE_FORMAT,
        "device": op_table.device_name(),
        "jax": jax.__version__,
    }
    path = folder / f"ops-{op_table.device_name()}.json"
    path.write_text(json.dumps(data | {"seconds": seconds}))


# ------------------------------------------------------------------ the table


def test_the_key_names_op_attributes_local_types_and_devices_running() -> None:
    node = Node("transpose", [Node.arg(0, "x", X).out], perm=(1, 0))
    key = table_key(node, 2)
    assert key == "transpose{perm=(1, 0)}(4x8xf32) -> (8x4xf32) x2"
    assert table_key(node, 1) != key
    wider = Node("transpose", [Node.arg(0, "x", TensorSig((4, 16), DType.F32)).out], perm=(1, 0))
    assert table_key(wider, 2) != key


def test_entries_are_measured_once_and_read_back_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _no_measuring(monkeypatch)
    table = OpTable(tmp_path)
    assert table.seconds(_matmul(), 2) == 2e-3
    assert table.seconds(_matmul(), 2) == 2e-3
    assert len(asked) == 1
    stored = json.loads(table.path.read_text())
    assert set(stored["seconds"]) == set(asked)
    again = OpTable(tmp_path)
    assert again.seconds(_matmul(), 2) == 2e-3
    assert len(asked) == 1  # a new table reads the file
    again.seconds(_matmul(), 1)
    assert len(asked) == 2  # one device running is another entry


def test_a_table_from_another_jax_version_is_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _no_measuring(monkeypatch)
    _write_table(tmp_path, {table_key(_matmul(), 1): 5.0})
    assert OpTable(tmp_path).seconds(_matmul(), 1) == 5.0
    path = next(tmp_path.iterdir())
    path.write_text(json.dumps(json.loads(path.read_text()) | {"jax": "0.0"}))
    assert OpTable(tmp_path).seconds(_matmul(), 1) == 2e-3
    assert asked == [table_key(_matmul(), 1)]


def test_an_entry_is_the_fastest_rounds_difference_however_loaded_the_rounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Load from elsewhere only adds time, to either side of a round: an entry is the
    difference of each side's fastest sample, the quiet machine's as soon as each side
    met one quiet round, where the median of the rounds' differences (format 2) was
    the load's. The samples come from a fake timer: no JAX, no dependence on load."""
    quiet, load = {"many": 5e-3, "once": 1e-3}, 4e-3
    loaded = {"many": [1, 1, 1, 1, 0, 0, 1], "once": [0, 0, 0, 0, 1, 0, 0]}  # per round
    timed = {side: iter([quiet[side] + load * hit for hit in loaded[side]]) for side in quiet}
    monkeypatch.setattr(op_table, "cpu_devices", lambda running, make: [])
    monkeypatch.setattr(
        op_table, "dag_program", lambda dag, devices, n: "many" if n > 1 else "once"
    )
    monkeypatch.setattr(op_table, "_calls_per_sample", lambda call: 1)
    monkeypatch.setattr(op_table, "_sample", lambda call, calls: next(timed[call]))
    node = _matmul()
    per_copy = op_table.measure(node, 2, 2, samples=7)
    assert per_copy == pytest.approx(4e-3 / (copies_of(node) - 1))
    # the rounds' differences: 8 ms in five, 0 and 4 ms in one each; their median, 8 ms
    timed = {side: iter([quiet[side] + load * hit for hit in loaded[side]]) for side in quiet}
    assert op_table.median_difference("many", "once", 7) == pytest.approx(8e-3)  # type: ignore[arg-type]


def test_a_real_measurement_is_cached_and_sane(tmp_path: Path) -> None:
    table = OpTable(tmp_path, samples=1)
    seconds = table.seconds(_matmul(), 2)
    assert 0 <= seconds < 1
    assert json.loads(table.path.read_text())["seconds"] == {table_key(_matmul(), 2): seconds}


def test_copies_keep_their_operands_small() -> None:
    assert copies_of(_matmul()) == MAX_COPIES
    big = TensorSig((512, 512), DType.F32)  # 1 MiB: two copies however large
    assert copies_of(Node("relu", [Node.arg(0, "x", big).out])) == 2


def test_copies_make_their_results_whole_and_read_one_element_of_each() -> None:
    """What an entry times is the op: each copy's result is made whole, and nothing
    reads it whole again (a sum of it cost a memory-bound op about as much again)."""
    devices = op_table.cpu_devices(2, 2)
    mesh = jax.sharding.Mesh(devices, ("d",))
    spec = jax.sharding.PartitionSpec("d")
    body = op_table.copies_body(lambda x: (jax.nn.relu(x),), 1, 2)
    program = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(spec, spec), out_specs=spec))
    block = jax.numpy.ones((2, 64, 32), jax.numpy.float32)
    text = program.lower(block, block).compile().as_text()
    assert text.count("f32[64,32]{1,0} fusion(") == 2  # both relus, whole
    assert "reduce(" not in text


# ------------------------------------------------------------------ pricing


def test_the_simulator_prices_ops_from_the_measured_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASOC_CACHE_DIR", str(tmp_path))
    planned = training_plan(TINY, "2", "data-parallel")
    priced = _measured(cpu_machine(2))
    fused = fused_operands(planned.dag)
    assert fused  # the step has ops XLA fuses into their producers: priced as fused
    table: dict[str, float] = {}
    expected = []
    for node in planned.dag.ops:
        if not node.inputs:
            continue
        mesh = planned.mesh
        local_in = [
            TensorSig(s.local_shape(v.sig.shape, mesh), v.sig.dtype)
            for v, s in zip(node.inputs, planned.plan.operands[node], strict=True)
        ]
        local_out = [
            TensorSig(planned.plan.values[v].local_shape(v.sig.shape, mesh), v.sig.dtype)
            for v in node.results
        ]
        local = local_node(node, local_in, local_out)
        seconds = table[table_key(local, 2)] = 1e-3 * (len(table) + 1)
        if node in fused:
            share = roofline(local, fused[node], False, CPU) / roofline(local, -1, False, CPU)
            seconds = (seconds - CPU.launch_overhead_s) * share  # it launches nothing
        expected.append(seconds)
    _write_table(tmp_path, table)
    asked = _no_measuring(monkeypatch)
    step = planned.step(priced, collapse=False)
    durations = sorted(  # the ops' tasks: the collectives' take the device too
        step.graph[i].duration
        for i in step.graph.ids()
        if step.graph[i].resource == ("device", 0)
        and step.graph[i].name.split(" of ")[0] not in COLLECTIVE_KINDS
    )
    assert asked == []  # every entry came from the hand-written file
    assert durations == pytest.approx(sorted(expected))
    analytic = planned.step(cpu_machine(2), collapse=False)
    assert sorted(
        analytic.graph[i].duration
        for i in analytic.graph.ids()
        if analytic.graph[i].resource == ("device", 0)
    ) != pytest.approx(durations)


def test_a_step_pays_the_machines_call_overhead_once() -> None:
    planned = training_plan(TINY, "2", "data-parallel")
    plain = cpu_machine(2)
    called = replace(plain, call_overhead_s=1.0, array_overhead_s=0.25)
    arrays = len(planned.dag.args) + len(planned.dag.outputs)
    before = simulate(planned.step(plain).graph).makespan
    after = simulate(planned.step(called).graph).makespan
    assert after == pytest.approx(before + 1.0 + 0.25 * arrays)
    assert called.step_overhead(arrays) == 1.0 + 0.25 * arrays


def test_collectives_on_a_measured_machine_wait_for_the_devices_compute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """XLA:CPU runs a collective on the device's executor: on a measured machine its
    tasks take the device, so device 0's tasks run one after another (a GPU's overlap)."""
    monkeypatch.setenv("TASOC_CACHE_DIR", str(tmp_path))
    _no_measuring(monkeypatch)
    planned = training_plan(TINY, "2", "data-parallel")
    analytic, measured = cpu_machine(2), _measured(cpu_machine(2))
    assert measured.collectives_block_compute and not analytic.collectives_block_compute
    graph = planned.step(measured).graph
    resources = {graph[i].resource[0] for i in graph.ids()}
    assert "net" not in resources
    on_device = [graph[i] for i in graph.ids() if graph[i].resource == ("device", 0)]
    assert any(t.name.startswith("all_reduce of") for t in on_device)
    assert simulate(graph).makespan >= sum(t.duration for t in on_device) * (1 - 1e-12)
    overlapped = planned.step(analytic).graph
    assert "net" in {overlapped[i].resource[0] for i in overlapped.ids()}


def test_negative_overheads_are_refused() -> None:
    with pytest.raises(MachineError, match="call_overhead_s must be non-negative"):
        replace(cpu_machine(1), call_overhead_s=-1.0)
    data = machine_to_dict(_local_like()) | {"array_overhead_us": -3}
    with pytest.raises(MachineError, match="array_overhead_us must be non-negative"):
        machine_from_dict(data, "machine file m.toml")


def test_a_fused_op_launches_nothing_and_skips_its_producers_operand() -> None:
    add = Node("add", [Node.arg(0, "x", X).out, Node.arg(1, "y", X).out])
    cpu = cpu_machine(1)
    assert cpu.op_seconds(add) == roofline(add, -1, False, CPU) + CPU.launch_overhead_s
    assert cpu.op_seconds(add, fused=0) == roofline(add, 0, False, CPU)
    assert cpu.op_seconds(add, fused=0) < cpu.op_seconds(add)


def test_analytic_machines_price_alike_however_many_devices_run() -> None:
    node = _matmul()
    assert cpu_machine(2).op_seconds(node, 1) == cpu_machine(2).op_seconds(node, 2)


# ------------------------------------------------------------------ machine files


def _local_like() -> Machine:
    return Machine(
        name="local",
        device=CPU,
        nodes=2,
        devices_per_node=2,
        intra=Link("shared-memory", 12e9, 40e-6),
        inter=Link("loopback", 1.5e9, 120e-6),
        host=Link("host", 9e9, 3e-6),
        sources=('measured "here"', "and there"),
        pricing="measured",
        call_overhead_s=125e-6,
        array_overhead_s=4e-6,
    )


def test_a_measured_machine_round_trips_through_dicts_and_toml(tmp_path: Path) -> None:
    local = _local_like()
    assert machine_from_dict(machine_to_dict(local), "test") == local
    path = tmp_path / "local.toml"
    path.write_text(machine_to_toml(local))
    assert load_machine(path) == local
    assert machine_to_dict(cpu_machine(2))["pricing"] == "analytic"


def test_a_step_across_processes_prices_its_ops_with_their_compute_scale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The op table times ops in one process; a step of 2 processes of one device (the
    machine's 2 nodes of 1) is priced with the scale calibrate measured for 2x1, one of
    2 devices in one process (1 node of 2) with the table as it is."""
    monkeypatch.setenv("TASOC_CACHE_DIR", str(tmp_path))
    asked = _no_measuring(monkeypatch)
    scaled = replace(_local_like(), compute_scales=(("2x1", 1.4),))
    across = replace(scaled, nodes=2, devices_per_node=1)
    within = replace(scaled, nodes=1, devices_per_node=2)
    assert (across.setup_of(2), within.setup_of(2), scaled.setup_of(4)) == ("2x1", "1x2", "2x2")
    assert (across.compute_scale(2), within.compute_scale(2), scaled.compute_scale(4)) == (
        1.4,
        1.0,
        1.0,
    )
    node = _matmul()
    assert within.op_seconds(node, 2) == pytest.approx(2e-3)  # the table's entry
    assert across.op_seconds(node, 2) == pytest.approx(1.4 * 2e-3)
    assert asked == [table_key(node, 2)]  # measured once, read back after
    planned = training_plan(TINY, "2", "data-parallel")
    compute = [
        sum(
            graph[i].duration
            for i in graph.ids()
            if graph[i].resource == ("device", 0)
            and graph[i].name.split(" of ")[0] not in COLLECTIVE_KINDS
        )
        for graph in (planned.step(m, collapse=False).graph for m in (within, across))
    ]
    assert compute[1] == pytest.approx(1.4 * compute[0])


def test_an_ops_class_has_a_compute_scale_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calibration scales each op class by its own probe (`PxD-CLASS`): a matmul of a
    2x1 step is priced with the gemm scale, an add with the setup's (no elementwise
    scale measured here), and one process's step with neither."""
    monkeypatch.setenv("TASOC_CACHE_DIR", str(tmp_path))
    _no_measuring(monkeypatch)
    scales = (("2x1", 1.4), ("2x1-gemm", 2.0))
    across = replace(_local_like(), nodes=2, devices_per_node=1, compute_scales=scales)
    within = replace(across, nodes=1, devices_per_node=2)
    matmul = _matmul()
    add = Node("add", [Node.arg(0, "x", X).out, Node.arg(1, "y", X).out])
    assert (across.compute_scale(2, "matmul"), across.compute_scale(2, "add")) == (2.0, 1.4)
    assert within.compute_scale(2, "matmul") == 1.0
    assert across.op_seconds(matmul, 2) == pytest.approx(2.0 * within.op_seconds(matmul, 2))
    assert across.op_seconds(add, 2) == pytest.approx(1.4 * within.op_seconds(add, 2))


def test_every_op_class_has_a_probe_op() -> None:
    """`class_probes` gives one op of each `OpClass`, classed as the pricing classes
    the ops it scales (`analytic.op_class`)."""
    probes = calibration.class_probes(16, 32)
    assert {name: op_class(dag.ops[-1].op) for name, dag in probes.items()} == {
        name: name for name in OP_CLASSES
    }


def test_the_compute_scale_is_the_rounds_median_ratio_and_says_its_spread() -> None:
    """Each round pairs one process of P devices (the table's way) with the P processes
    at once, timed seconds apart: a round's ratio compares like with like, and a round
    hit by a spell of load is outvoted."""
    rounds = [(2e-3, 3e-3), (1e-3, 1.4e-3), (4e-3, 20e-3), (2e-3, 2.6e-3), (1e-3, 1.3e-3)]
    (setup, scale), source = machine_driver._compute_scale(rounds, 2, calibration.Sizes())
    assert (setup, scale) == ("2x1", pytest.approx(1.4))
    assert "in 5 rounds" in source and "compute_scales 2x1 = 1.4," in source
    assert "ratio IQR 1.3-1.5" in source and "CPU time per device" in source
    (key, _), source = machine_driver._compute_scale(rounds, 2, calibration.Sizes(), "gemm")
    assert key == "2x1-gemm" and "the gemm probe op" in source
    noisy = [*rounds, (1e-7, 5e-3), (1e-7, 9e-3)]  # one side at the floor: noise
    assert machine_driver._compute_scale(noisy, 2, calibration.Sizes())[0][1] == 1.4


def test_the_probe_is_timed_on_cpu_time_which_a_load_from_elsewhere_does_not_move() -> None:
    """A fake CPU clock (no wall clock is read): the longer program spends 5 ms of CPU
    more per call in four rounds; one round's outlier (19 ms) is outvoted by the
    median."""
    spent = iter([0.0, 6e-3, 6e-3, 7e-3] * 4 + [0.0, 20e-3, 20e-3, 21e-3])
    difference = op_table.cpu_difference(
        lambda: None, lambda: None, 5, 1, clock=lambda: next(spent)
    )
    assert difference == pytest.approx(5e-3)


def test_compute_scales_round_trip_and_bad_ones_are_one_line(tmp_path: Path) -> None:
    local = replace(_local_like(), compute_scales=(("2x1", 1.25), ("2x1-elementwise", 1.5)))
    path = tmp_path / "local.toml"
    path.write_text(machine_to_toml(local))
    assert "[compute_scales]\n2x1 = 1.25\n2x1-elementwise = 1.5" in path.read_text()
    assert load_machine(path) == local
    for scales, expected in (
        ({"two": 1.5}, "compute_scales must be PxD or PxD-CLASS, got 'two'"),
        ({"2x1-fast": 1.5}, "compute_scales must be PxD or PxD-CLASS, got '2x1-fast'"),
        ({"2x1": 0}, "compute_scales.2x1 must be positive"),
        ({"2x1": "fast"}, "compute_scales.2x1 must be a number"),
        (1.5, "compute_scales must be a table"),
    ):
        data = machine_to_dict(local) | {"compute_scales": scales}
        with pytest.raises(MachineError, match=expected):
            machine_from_dict(data, "machine file m.toml")
    with pytest.raises(MachineError, match="a compute scale is a setup PxD"):
        replace(local, compute_scales=(("2x1", -1.0),))


def test_a_bad_pricing_is_one_line() -> None:
    data = machine_to_dict(_local_like()) | {"pricing": "guessed"}
    with pytest.raises(MachineError, match="pricing must be one of analytic, measured"):
        machine_from_dict(data, "machine file m.toml")


def test_machine_local_needs_a_calibration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tasoc: Callable[..., Result]
) -> None:
    monkeypatch.setenv("TASOC_CACHE_DIR", str(tmp_path))
    with pytest.raises(MachineError, match="run 'tasoc machine calibrate' first"):
        machine("local")
    program = tmp_path / "tiny.mlir"
    program.write_text(TINY)
    result = tasoc("opt", program, "-p", "soap-shard{machine=local mesh=2}")
    assert_one_line_error(result, "tasoc machine calibrate")
    (tmp_path / "local.toml").write_text(machine_to_toml(_local_like()))
    assert machine("local") == _local_like()


def test_a_malformed_collective_price_is_one_line(
    tmp_path: Path, tasoc: Callable[..., Result]
) -> None:
    data = machine_to_dict(_local_like())
    data["links"]["intra"]["collectives"] = {"all_reduce": {"bandwidth_bytes": "fast"}}
    (tmp_path / "m.json").write_text(json.dumps(data))
    program = tmp_path / "tiny.mlir"
    program.write_text(TINY)
    result = tasoc("opt", program, "-p", f'soap-shard{{machine="{tmp_path / "m.json"}" mesh=2}}')
    assert_one_line_error(result, "missing key 'latency_us' in links.intra.collectives.all_reduce")


def test_fits_recover_the_links_they_were_made_from() -> None:
    truth = Link("shared-memory", 8e9, 60e-6)
    model = Machine("m", CPU, 1, 4, truth, None, truth)
    found = [
        CollectiveSample(kind, n, 4, model.collective_time(kind, n, [0, 1, 2, 3]))
        for kind in ("all_reduce", "all_gather")
        for n in (4096, 2**20, 2**24)
    ]
    fitted = fit_collectives("shared-memory", found, False, CPU)
    assert fitted.bandwidth == pytest.approx(8e9, rel=0.05)
    assert fitted.latency_s == pytest.approx(60e-6, rel=0.05)
    host = fit_host([(n, truth.time(n)) for n in (4096, 2**20, 2**24)])
    assert host.bandwidth == pytest.approx(8e9, rel=0.05)


def test_a_chain_has_as_many_collectives_as_asked() -> None:
    """`collective_samples` subtracts a chain of one from a chain of `chain`: both must
    be what they say, every collective kept (none merged or dropped by XLA), and with
    compute every step's matmul too."""
    devices = op_table.cpu_devices(2, 2)
    mesh = jax.sharding.Mesh(devices, ("d",))
    spec = jax.sharding.PartitionSpec("d")
    x = jax.numpy.ones((8,), jax.numpy.float32)
    hlo = {
        "all_reduce": "all-reduce(",
        "all_gather": "all-gather(",
        "reduce_scatter": "reduce-scatter(",
        "all_to_all": "all-to-all(",
        "replicate": "collective-permute(",
    }
    assert set(hlo) == set(calibration.COLLECTIVES)  # every kind the simulator prices
    for kind, op in hlo.items():
        for collectives, compute in ((1, 0), (3, 4)):
            body = calibration.chain_program(kind, collectives, 3, compute)
            program = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec))
            text = program.lower(x).compile().as_text()
            assert text.count(op) == collectives
            # the step's matmul before each collective is kept, not folded away
            assert text.count(" dot(") == (3 if compute else 0)


def test_chained_timings_recover_a_latency_a_single_collective_hides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The 3 ms a collective between gloo processes costs in a step, as a chain of 8
    against a chain of 1 times it (synthetic timings: the chain of 8 pays 7 more), is
    what the fitted link predicts for one collective, at every size."""
    truth = Link("loopback", 1.5e9, 3e-3)
    model = Machine("m", CPU, 2, 1, truth, truth, truth)
    sizes = (4096, 2**18, 2**22)
    rendezvous = [1.0]  # the first pair, measured once before the rounds and dropped
    timed = iter(
        rendezvous
        + [
            7 * model.collective_time(kind, n, [0, 1])
            for n in sizes
            for kind in calibration.COLLECTIVES
        ]
    )
    monkeypatch.setattr(calibration, "median_difference", lambda *_: next(timed))
    (found,) = calibration.collective_samples(op_table.cpu_devices(2, 2), sizes, 1, 8)
    fitted = fit_collectives("loopback", found, True, CPU)
    assert fitted.latency_s == pytest.approx(3e-3, rel=0.05)
    assert fitted.bandwidth == pytest.approx(1.5e9, rel=0.05)


def test_every_round_measures_every_size_and_kind_in_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rounds spread over time: round r measures all sizes and kinds before round r+1
    starts, so a spell of load lands in one round, which the median then outvotes."""
    asked: list[object] = []

    def difference(many: object, one: object, *_: object) -> float:
        asked.append(many)
        return 7e-3

    monkeypatch.setattr(calibration, "median_difference", difference)
    rounds = calibration.collective_samples(op_table.cpu_devices(2, 2), (4096, 2**16), 1, 8, 3)
    assert [[(s.kind, s.nbytes) for s in found] for found in rounds] == [
        [(k, n) for n in (4096, 2**16) for k in calibration.COLLECTIVES]
    ] * 3
    assert all(s.seconds == pytest.approx(1e-3) for found in rounds for s in found)
    pairs = 2 * len(calibration.COLLECTIVES)
    assert asked[1 : 1 + pairs] == asked[1 + pairs : 1 + 2 * pairs]  # the same programs again


def test_a_link_is_fitted_to_the_rounds_median_and_their_spread_is_kept() -> None:
    """One calibration's rounds disagree (gloo's mode, a spell of load): the fit follows
    the median of each measurement over the rounds, not a lucky or unlucky round, and
    the quartiles of the rounds' own fits say how far one round alone could be off."""
    truth = Link("shared-memory", 5e9, 20e-6)

    def measured(link: Link) -> list[CollectiveSample]:
        model = Machine("m", CPU, 1, 2, link, None, link)
        return [
            CollectiveSample(kind, n, 2, model.collective_time(kind, n, [0, 1]))
            for kind in calibration.COLLECTIVES
            for n in (4096, 2**18, 2**22)
        ]

    rounds = [
        measured(truth),
        measured(Link("shared-memory", 2e9, 20e-6)),  # a slow round
        measured(truth),
        measured(Link("shared-memory", 9e9, 20e-6)),  # a fast one
        measured(truth),
    ]
    fit = calibration.fit_rounds("shared-memory", rounds, False, CPU)
    assert fit.link.bandwidth == pytest.approx(5e9, rel=0.05)
    assert fit.link.latency_s == pytest.approx(20e-6, rel=0.05)
    low, high = fit.bandwidth_quartiles
    assert low == pytest.approx(5e9, rel=0.05) and high == pytest.approx(5e9, rel=0.05)
    assert fit.rounds == 5 and "bandwidth IQR 5-5 GB/s" in fit.spread()
    spread = calibration.fit_rounds("shared-memory", rounds[:2], False, CPU)
    assert spread.bandwidth_quartiles[0] < 3e9 < 4e9 < spread.bandwidth_quartiles[1]


def test_each_kind_is_fitted_alone_to_its_median_round() -> None:
    """Gloo's all-reduces cost more than its all-gathers (issue 30): each kind's price
    is its own measurements' fit, each measurement the median of the rounds (a
    collective's wait for its slowest device is part of its price), while the link's
    own figures still follow all-reduces and all-gathers' medians, the other kinds
    left out."""
    truths = {
        "all_reduce": CollectivePrice(0.6e9, 900e-6),
        "all_gather": CollectivePrice(2.0e9, 300e-6),
        "reduce_scatter": CollectivePrice(1.0e9, 500e-6),
        "all_to_all": CollectivePrice(1.5e9, 400e-6),
        "replicate": CollectivePrice(3.0e9, 200e-6),
    }
    priced = Link("loopback", 1e9, 1e-4, collectives=tuple((k, v) for k, v in truths.items()))
    model = Machine("m", CPU, 2, 1, priced, priced, priced)

    def measured(load: float) -> list[CollectiveSample]:
        return [
            CollectiveSample(kind, n, 2, load * model.collective_time(kind, n, [0, 1]))
            for n in (4096, 2**18, 2**22)
            for kind in calibration.COLLECTIVES
        ]

    rounds = [measured(0.5), measured(1.0), measured(1.8), measured(1.0), measured(0.9)]
    prices = dict(calibration.fit_kinds("loopback", rounds, True, CPU))
    assert set(prices) == set(truths)
    for kind, truth in truths.items():
        assert prices[kind].bandwidth == pytest.approx(truth.bandwidth, rel=0.05), kind
        assert prices[kind].latency_s == pytest.approx(truth.latency_s, rel=0.05), kind
    link = calibration.fit_rounds("loopback", rounds, True, CPU).link
    alone = calibration.fit_rounds(
        "loopback",
        [[s for s in found if s.kind in ("all_reduce", "all_gather")] for found in rounds],
        True,
        CPU,
    ).link
    assert (link.bandwidth, link.latency_s) == (alone.bandwidth, alone.latency_s)


def test_the_probe_is_a_training_step_timed_in_rounds_between_barriers() -> None:
    dag = calibration.probe_dag(8, 16)
    ops = [node.op for node in dag.ops]
    assert ops.count("matmul") == 5 and {"relu_grad", "tanh_grad", "transpose"} <= set(ops)
    assert [sig.shape for sig in dag.output_sigs] == [(16, 16), (16, 16)]  # both weights
    met: list[str] = []
    devices = op_table.cpu_devices(2, 2)
    found = calibration.compute_rounds(devices, True, calibration.QUICK, met.append)
    rounds, probes = calibration.QUICK.compute_rounds, [calibration.STEP, *OP_CLASSES]
    assert list(found) == probes  # the step's, then each op class's probe op
    assert met == [
        f"tasoc calibrate: {name} {w} {r}"
        for r in range(rounds)
        for name in probes
        for w in ("alone", "together")
    ]
    pairs = [pair for timed in found.values() for pair in timed]
    assert all(len(timed) == rounds for timed in found.values())
    assert all(0 < a < 1 and 0 < b < 1 for a, b in pairs)
    others = calibration.compute_rounds(devices, False, calibration.QUICK, met.append)
    assert {a for timed in others.values() for a, _ in timed} == {0.0}  # process 0 alone


# ------------------------------------------------------------------ the command


def test_calibrate_writes_a_machine_soap_shard_accepts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tasoc: Callable[..., Result]
) -> None:
    monkeypatch.setenv("TASOC_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "mine.toml"
    result = tasoc("machine", "calibrate", "--quick", "--devices", "2", "-o", out)
    assert result.code == 0, result
    calibrated = load_machine(out)
    assert calibrated == machine("local")
    assert (calibrated.nodes, calibrated.devices_per_node, calibrated.inter) == (1, 2, None)
    assert calibrated.pricing == "measured"
    assert calibrated.call_overhead_s >= 0 and calibrated.array_overhead_s >= 0
    assert calibrated.device.peak_flops > 0 and calibrated.intra.bandwidth > 0
    assert any("calibrated by 'tasoc machine calibrate --quick'" in s for s in calibrated.sources)
    assert calibrated.compute_scales == ()  # one process: the op table's own setup
    assert any("bandwidth IQR" in s for s in calibrated.sources if s.startswith("intra: "))
    assert {kind for kind, _ in calibrated.intra.collectives} == set(calibration.COLLECTIVES)
    assert any(s.startswith("intra per collective kind") for s in calibrated.sources)
    program = tmp_path / "tiny.mlir"
    program.write_text(TINY)
    shard = f'autodiff{{optimizer=sgd}},soap-shard{{machine="{out}" mesh=2 search=data-parallel}}'
    sharded = tasoc("opt", program, "-p", shard)
    assert sharded.code == 0, sharded
    assert "parallel.mesh" in sharded.out


def test_calibrate_measures_the_link_between_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tasoc: Callable[..., Result]
) -> None:
    monkeypatch.setenv("TASOC_CACHE_DIR", str(tmp_path))
    result = tasoc("machine", "calibrate", "--quick", "--devices", "1", "--processes", "2")
    assert result.code == 0, result
    calibrated = machine("local")
    assert (calibrated.nodes, calibrated.devices_per_node) == (2, 1)
    assert calibrated.inter is not None and calibrated.inter.kind == "loopback"
    inter = next(s for s in calibrated.sources if s.startswith("inter: "))
    assert "2 round(s) fitted alone: bandwidth IQR" in inter
    assert {kind for kind, _ in calibrated.inter.collectives} == set(calibration.COLLECTIVES)
    scales = dict(calibrated.compute_scales)  # the workers' probes over one process's
    assert set(scales) == {"2x1", *(f"2x1-{name}" for name in OP_CLASSES)}
    # each a measured ratio (at --quick sizes the probes are near the timer's noise, so
    # no bound but a finite positive one holds at every load: 117 was seen under load),
    # written as its source line says it was measured
    assert all(0 < scale < math.inf for scale in scales.values())
    computed = " ".join(s for s in calibrated.sources if s.startswith("compute: "))
    for setup, scale in scales.items():
        assert f"compute_scales {setup} = {scale:.3g}," in computed, setup


def _nothing_written(folder: Path) -> None:
    assert not list(folder.glob("*.toml")), list(folder.iterdir())


def test_calibrate_refuses_no_devices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tasoc: Callable[..., Result]
) -> None:
    monkeypatch.setenv("TASOC_CACHE_DIR", str(tmp_path))
    assert_one_line_error(tasoc("machine", "calibrate", "--devices", "0"), "--devices", ">= 1")
    _nothing_written(tmp_path)


def test_calibrate_refuses_an_unwritable_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tasoc: Callable[..., Result]
) -> None:
    monkeypatch.setenv("TASOC_CACHE_DIR", str(tmp_path))
    missing = tmp_path / "no" / "such" / "m.toml"
    assert_one_line_error(tasoc("machine", "calibrate", "--quick", "-o", missing), str(missing))
    assert_one_line_error(tasoc("machine", "calibrate", "--quick", "-o", tmp_path), "-o")
    _nothing_written(tmp_path)


def test_calibrate_refuses_a_taken_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tasoc: Callable[..., Result]
) -> None:
    monkeypatch.setenv("TASOC_CACHE_DIR", str(tmp_path))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = tasoc("machine", "calibrate", "--quick", "--processes", "2", "--port", port)
    assert_one_line_error(result, f"--port {port} is taken")
    _nothing_written(tmp_path)


@pytest.mark.parametrize(
    ("script", "timeout", "expected"),
    [
        (
            "import sys; print('tasoc: error: no gloo here', file=sys.stderr); sys.exit(1)",
            "60",  # reported when the worker exits, however slowly a loaded machine starts it
            "process 0: no gloo here",
        ),
        ("import time; time.sleep(60)", "1", "not all 2 processes reached the coordinator"),
    ],
    ids=["failing", "hanging"],
)
def test_calibrate_reports_workers_that_fail_or_hang(
    script: str,
    timeout: str,
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tasoc: Callable[..., Result],
) -> None:
    monkeypatch.setenv("TASOC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(distributed, "STARTUP_GRACE", 0.0)
    monkeypatch.setattr(
        distributed, "worker_command", lambda words, cluster, i: [sys.executable, "-c", script]
    )
    result = tasoc(
        "machine", "calibrate", "--quick", "--processes", "2", "--connect-timeout", timeout
    )
    assert_one_line_error(result, expected)
    _nothing_written(tmp_path)
