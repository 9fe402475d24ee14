"""Machine models (tasoc.cost.machines): presets, machine files, transfer and
collective prices, checked against the formulas worked by hand."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tasoc.cost.devices import CPU, P100, Efficiency
from tasoc.cost.machines import (
    COLLECTIVE_KINDS,
    PRESETS,
    SHARED_MEMORY,
    CollectiveKind,
    CollectivePrice,
    Link,
    Machine,
    MachineError,
    machine,
    machine_to_dict,
    machine_to_toml,
)

MOVING_KINDS: list[CollectiveKind] = [kind for kind in COLLECTIVE_KINDS if kind != "all_slice"]


def network(of: Machine) -> Link:
    assert of.inter is not None
    return of.inter


# ------------------------------------------------------------------ presets


def test_the_presets_are_the_ones_the_issue_names() -> None:
    assert set(PRESETS) == {
        "p100-cluster",
        "k80-cluster",
        "v100-tensoropt",
        "v100-swapadvisor",
        "h100-node",
        "h100-cluster",
    }
    sizes = {name: machine(name).size for name in PRESETS}
    assert sizes == {
        "p100-cluster": 16,
        "k80-cluster": 64,
        "v100-tensoropt": 16,
        "v100-swapadvisor": 1,
        "h100-node": 8,
        "h100-cluster": 32,
    }


@pytest.mark.parametrize("name", list(PRESETS))
def test_a_preset_is_consistent(name: str) -> None:
    preset = machine(name)
    assert preset is PRESETS[name] and preset.name == name
    assert preset.sources and all(preset.sources)
    assert (preset.inter is None) == (preset.nodes == 1)
    if preset.inter is not None:
        assert preset.inter.kind == "infiniband"
        assert preset.inter.bandwidth < preset.intra.bandwidth
        assert preset.inter.latency_s > preset.intra.latency_s
    # a device's links are slower than its own memory
    assert preset.intra.bandwidth < preset.device.mem_bandwidth
    assert preset.host.bandwidth < preset.device.mem_bandwidth


def test_the_cited_numbers() -> None:
    p100 = PRESETS["p100-cluster"]
    assert p100.device == P100 and (p100.nodes, p100.devices_per_node) == (4, 4)
    assert p100.inter is not None and p100.inter.bandwidth == 100e9 / 8 / 4
    assert network(PRESETS["k80-cluster"]).bandwidth == 56e9 / 8 / 4
    assert PRESETS["v100-swapadvisor"].host.bandwidth == 12e9
    assert PRESETS["h100-node"].intra.bandwidth == 450e9
    assert network(PRESETS["h100-cluster"]).bandwidth == 50e9


def test_cpu_n_is_this_machine_with_n_devices() -> None:
    cpu = machine("cpu-8")
    assert (cpu.size, cpu.nodes, cpu.device, cpu.intra, cpu.inter) == (
        8,
        1,
        CPU,
        SHARED_MEMORY,
        None,
    )
    assert machine("cpu-1").size == 1


# ------------------------------------------------------------------ machine files


def toml_text(data: dict[str, Any], prefix: str = "") -> str:
    """A small TOML writer for machine files: scalars and lists first, then tables."""
    lines = [
        f"{key} = {json.dumps(value)}" for key, value in data.items() if not isinstance(value, dict)
    ]
    text = "\n".join(lines) + "\n"
    for key, value in data.items():
        if isinstance(value, dict):
            name = f"{prefix}{key}"
            text += f"\n[{name}]\n" + toml_text(value, f"{name}.")
    return text


@pytest.mark.parametrize("name", [*PRESETS, "cpu-8"])
def test_a_preset_written_as_json_and_toml_loads_equal(name: str, tmp_path: Path) -> None:
    data = machine_to_dict(machine(name))
    as_json = tmp_path / "m.json"
    as_json.write_text(json.dumps(data))
    as_toml = tmp_path / "m.toml"
    as_toml.write_text(toml_text(data))
    assert machine(str(as_json)) == machine(name)
    assert machine(str(as_toml)) == machine(name)


def test_a_device_efficiency_round_trips_and_defaults_to_the_roofline(tmp_path: Path) -> None:
    data = edited(("device", "efficiency"), {"gemm": 0.5, "elementwise": 0.25})
    path = tmp_path / "m.toml"
    path.write_text(toml_text(data))
    loaded = machine(str(path))
    assert loaded.device.efficiency == Efficiency(gemm=0.5, elementwise=0.25)
    assert loaded.device.efficiency.of("conv") == 1.0
    again = tmp_path / "again.json"
    again.write_text(json.dumps(machine_to_dict(loaded)))
    assert machine(str(again)) == loaded
    assert machine_to_dict(loaded)["device"]["efficiency"]["gemm"] == 0.5


def test_a_machine_file_by_hand(tmp_path: Path) -> None:
    path = tmp_path / "two-boxes.toml"
    path.write_text(
        """nodes = 2
devices_per_node = 4
device = "p100"

[links.intra]
kind = "pcie"
bandwidth_gbps = 128
latency_us = 1

[links.inter]
kind = "ethernet"
bandwidth_gbps = 25
latency_us = 10

[links.host]
kind = "pcie"
bandwidth_bytes = 16e9
latency_us = 1.5
"""
    )
    loaded = machine(str(path))
    assert loaded.name == "two-boxes" and loaded.device == P100 and loaded.size == 8
    assert (loaded.intra.bandwidth, loaded.intra.latency_s) == (16e9, 1e-6)
    assert loaded.inter is not None and (loaded.inter.kind, loaded.inter.bandwidth) == (
        "ethernet",
        25e9 / 8,
    )
    assert (loaded.host.bandwidth, loaded.host.latency_s) == (16e9, 1.5e-6)


def good_file() -> dict[str, Any]:
    link = {"kind": "nvlink", "bandwidth_gbps": 800, "latency_us": 0.5}
    return {
        "name": "m",
        "nodes": 2,
        "devices_per_node": 2,
        "device": {
            "peak_flops": 1e12,
            "mem_bandwidth": 1e11,
            "memory_bytes": 8e9,
            "launch_overhead_s": 1e-6,
        },
        "links": {
            "intra": link,
            "inter": dict(link, kind="infiniband"),
            "host": dict(link, kind="pcie"),
        },
    }


def edited(path: tuple[str, ...], value: object) -> dict[str, Any]:
    """`good_file()` with the key at `path` set to `value` (deleted when value is DELETE)."""
    data = good_file()
    table = data
    for key in path[:-1]:
        table = table[key]
    if value is DELETE:
        del table[path[-1]]
    else:
        table[path[-1]] = value
    return data


DELETE = object()

BAD_FILES = [
    (
        ("links", "inter"),
        DELETE,
        "2 nodes but no links.inter, so devices on different nodes cannot reach",
    ),
    (("links", "host"), DELETE, "missing key 'host' in links"),
    (("devices_per_node",), DELETE, "missing key 'devices_per_node' in the file"),
    (
        ("links", "intra", "bandwidth_gbps"),
        -100,
        "links.intra.bandwidth_gbps must be positive, got -100",
    ),
    (("links", "inter", "bandwidth_gbps"), 0, "links.inter.bandwidth_gbps must be positive, got 0"),
    (("links", "host", "latency_us"), -1, "links.host.latency_us must be non-negative, got -1"),
    (
        ("links", "intra", "bandwidth_gbps"),
        "fast",
        "links.intra.bandwidth_gbps must be a number, got 'fast'",
    ),
    (("links", "intra", "latency_us"), True, "links.intra.latency_us must be a number, got True"),
    (
        ("links", "intra", "bandwidth_bytes"),
        1e9,
        "links.intra needs exactly one of bandwidth_gbps, bandwidth_bytes",
    ),
    (
        ("links", "intra", "speed"),
        1,
        "unknown key 'speed' in links.intra (expected kind, latency_us,",
    ),
    (("links", "intra", "kind"), "carrier-pigeon", "links.intra.kind must be one of nvlink, pcie,"),
    (("links", "wan"), {}, "unknown key 'wan' in links (expected intra, host, inter)"),
    (("link",), {}, "unknown key 'link' in the file"),
    (("nodes",), "4", "nodes must be an integer, got '4'"),
    (("nodes",), 0, "nodes must be at least 1, got 0"),
    (("devices_per_node",), 2.5, "devices_per_node must be an integer, got 2.5"),
    (("links",), [1], "links must be a table, got [1]"),
    (("name",), 7, "name must be a string, got 7"),
    (("sources",), "a datasheet", "sources must be a list of strings, got 'a datasheet'"),
    (("device",), "tpu", "unknown device preset 'tpu' (expected cpu, h100, h200, v100, p100, k80)"),
    (("device", "peak_flops"), -1.0, "device.peak_flops must be positive, got -1.0"),
    (("device", "memory_bytes"), DELETE, "missing key 'memory_bytes' in device"),
    (
        ("device", "memory_bytes"),
        16,
        "device.memory_bytes must be a device's memory in bytes, 1 MiB to 1 PiB (16 GB is 16e9)",
    ),
    (("device", "memory_bytes"), 1e30, "device.memory_bytes must be a device's memory in bytes"),
    (("device", "clock"), 1, "unknown key 'clock' in device"),
    (
        ("device", "conv_weight_relayout"),
        "yes",
        "device.conv_weight_relayout must be true or false, got 'yes'",
    ),
    (("device", "efficiency"), 0.8, "device.efficiency must be a table, got 0.8"),
    (("device", "efficiency"), {"gemm": 1.5}, "device.efficiency.gemm must be in (0, 1], got 1.5"),
    (("device", "efficiency"), {"conv": 0}, "device.efficiency.conv must be in (0, 1], got 0"),
    (
        ("device", "efficiency"),
        {"reduction": -0.5},
        "device.efficiency.reduction must be in (0, 1], got -0.5",
    ),
    (
        ("device", "efficiency"),
        {"gemm": "high"},
        "device.efficiency.gemm must be a number, got 'high'",
    ),
    (
        ("device", "efficiency"),
        {"tensor": 0.5},
        "unknown key 'tensor' in device.efficiency (expected gemm, conv, elementwise,",
    ),
    (
        ("links", "inter", "collectives"),
        {"all_reduce": {"bandwidth_gbps": 8}},
        "missing key 'latency_us' in links.inter.collectives.all_reduce",
    ),
    (
        ("links", "inter", "collectives"),
        {"all_slice": {"bandwidth_gbps": 8, "latency_us": 1}},
        "unknown key 'all_slice' in links.inter.collectives (expected all_gather, all_reduce,",
    ),
    (
        ("links", "intra", "collectives"),
        {"all_gather": {"bandwidth_gbps": 0, "latency_us": 1}},
        "links.intra.collectives.all_gather.bandwidth_gbps must be positive, got 0",
    ),
    (
        ("links", "intra", "collectives"),
        {"all_to_all": {"bandwidth_gbps": 8, "latency_us": 1, "bandwidth_bytes": 1e9}},
        "links.intra.collectives.all_to_all needs exactly one of bandwidth_gbps,",
    ),
    (
        ("links", "intra", "collectives"),
        {"all_to_all": 3},
        "links.intra.collectives.all_to_all must be a table, got 3",
    ),
    (("links", "intra", "collectives"), [1], "links.intra.collectives must be a table, got [1]"),
]


@pytest.mark.parametrize("suffix", [".json", ".toml"])
@pytest.mark.parametrize(("path", "value", "message"), BAD_FILES)
def test_a_bad_machine_file_is_one_line_naming_the_problem(
    path: tuple[str, ...], value: object, message: str, suffix: str, tmp_path: Path
) -> None:
    data = edited(path, value)
    file = tmp_path / f"m{suffix}"
    file.write_text(json.dumps(data) if suffix == ".json" else toml_text(data))
    with pytest.raises(MachineError) as error:
        machine(str(file))
    text = str(error.value)
    assert "\n" not in text
    assert text.startswith(f"machine file {file}: ") and message in text


@pytest.mark.parametrize(
    ("spec", "content", "message"),
    [
        ("tpu-pod", None, "unknown machine 'tpu-pod' (expected p100-cluster, k80-cluster,"),
        ("cpu-0", None, "cpu-0: a machine needs at least one device"),
        ("missing.json", None, "cannot read it (No such file or directory)"),
        ("bad.json", '{"nodes": 2,', "not valid JSON: Expecting property name"),
        ("bad.toml", "nodes = = 2", "not valid TOML: "),
        ("m.yaml", "nodes: 2", "expected a .json or .toml file"),
        ("list.json", "[1, 2]", "the file must be a table, got [1, 2]"),
    ],
)
def test_other_bad_specs(
    spec: str, content: str | None, message: str, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    if content is not None:
        Path(spec).write_text(content)
    with pytest.raises(MachineError) as error:
        machine(spec)
    assert "\n" not in str(error.value) and message in str(error.value)


# ------------------------------------------------------------------ transfers


def test_transfer_time_is_flexflow_a2_per_hop() -> None:
    p100 = PRESETS["p100-cluster"]
    mib = 1 << 20
    assert p100.path(5, 5) == () and p100.transfer_time(mib, 5, 5) == 0
    assert p100.path(0, 3) == (p100.intra,)
    assert p100.transfer_time(mib, 0, 3) == pytest.approx(mib / 80e9 + 0.5e-6, rel=1e-12)
    assert p100.path(3, 4) == (p100.inter,)
    assert p100.transfer_time(mib, 3, 4) == pytest.approx(mib / 3.125e9 + 2.7e-6, rel=1e-12)
    assert p100.transfer_time(0, 3, 4) == 0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.node(16), "machine p100-cluster has devices 0..15, not 16"),
        (lambda m: m.path(-1, 0), "not -1"),
        (lambda m: m.transfer_time(-4, 0, 1), "bytes must be non-negative"),
        (lambda m: m.collective_time("all_reduce", 8, [0, 0]), "group [0, 0] names a device twice"),
        (lambda m: m.collective_time("all_reduce", 8, []), "needs at least one device"),
        (lambda m: m.collective_time("broadcast", 8, [0, 1]), "unknown collective 'broadcast'"),
    ],
)
def test_bad_devices_and_groups(call: Any, message: str) -> None:
    with pytest.raises(MachineError, match=None) as error:
        call(PRESETS["p100-cluster"])
    assert message in str(error.value)


def test_a_machine_needs_a_network_between_its_nodes() -> None:
    h100 = PRESETS["h100-node"]
    with pytest.raises(MachineError, match="2 nodes but no inter-node link"):
        Machine("m", h100.device, 2, 8, h100.intra, None, h100.host)


# ------------------------------------------------------------------ collectives


@pytest.mark.parametrize("kind", COLLECTIVE_KINDS)
def test_one_device_or_no_bytes_costs_nothing(kind: CollectiveKind) -> None:
    h100 = PRESETS["h100-cluster"]
    assert h100.collective_time(kind, 1 << 30, [7]) == 0
    assert h100.collective_time(kind, 0, range(32)) == 0
    assert h100.collective_time("all_slice", 1 << 30, range(32)) == 0


@pytest.mark.parametrize("name", [name for name in PRESETS if PRESETS[name].size > 1])
@pytest.mark.parametrize("kind", MOVING_KINDS)
def test_collective_time_grows_with_bytes(name: str, kind: CollectiveKind) -> None:
    preset = PRESETS[name]
    group = range(preset.size)
    times = [preset.collective_time(kind, 1 << shift, group) for shift in range(0, 34, 3)]
    assert all(0 < a < b for a, b in itertools.pairwise(times))


def test_all_reduce_takes_the_tree_for_small_messages_and_the_ring_for_large() -> None:
    """h100-node, p = 8: ring 14a + 1.75 n/B, tree 3(a + n/B), equal at n = 8.8 a B."""
    node = PRESETS["h100-node"]
    a, b = node.intra.latency_s, node.intra.bandwidth
    crossover = 8.8 * a * b
    for n in (1, 1000, int(crossover * 0.9), int(crossover * 1.1), 1 << 30):
        ring = 14 * a + 1.75 * n / b
        tree = 3 * (a + n / b)
        assert node.collective_time("all_reduce", n, range(8)) == pytest.approx(
            min(ring, tree), rel=1e-12
        )
        assert (ring < tree) == (n > crossover)


def test_the_other_collectives_by_hand() -> None:
    node = PRESETS["h100-node"]
    a, b, n = node.intra.latency_s, node.intra.bandwidth, 1 << 24
    group = range(8)
    assert node.collective_time("all_gather", n, group) == pytest.approx(
        min(7 * (a + n / b), 3 * a + 7 * n / b)
    )
    assert node.collective_time("reduce_scatter", n, group) == pytest.approx(
        min(7 * (a + n / 8 / b), 3 * a + 7 / 8 * n / b)
    )
    assert node.collective_time("all_to_all", n, group) == pytest.approx(
        min(7 * a + 7 / 8 * n / b, 3 * (a + n / 2 / b))
    )
    assert node.collective_time("replicate", n, [0, 5]) == pytest.approx(n / b + a)
    # six devices: the tree takes ceil(log2 6) = 3 steps
    assert node.collective_time("all_reduce", 1, range(6)) == pytest.approx(3 * (a + 1 / b))


def test_a_kind_priced_alone_moves_only_that_kind(tmp_path: Path) -> None:
    """A link's per-kind price (`Link.collectives`) replaces its bandwidth and latency
    in the same formulas for that kind only; a file without one prices as before, and
    one with it round-trips through TOML."""
    base = PRESETS["p100-cluster"]
    inter = network(base)
    price = CollectivePrice(inter.bandwidth / 2, 3 * inter.latency_s)
    priced = replace(base, inter=replace(inter, collectives=(("all_reduce", price),)))
    group, n = [0, base.devices_per_node], 1 << 20  # two nodes, one device each
    a, b = price.latency_s, price.bandwidth
    assert priced.collective_time("all_reduce", n, group) == pytest.approx(
        min(2 * (a + n / 2 / b), a + n / b)
    )
    assert priced.collective_time("all_reduce", n, group) > base.collective_time(
        "all_reduce", n, group
    )
    for kind in MOVING_KINDS:
        if kind != "all_reduce":
            assert priced.collective_time(kind, n, group) == base.collective_time(kind, n, group)
    inside = list(range(base.devices_per_node))  # intra carries no prices of its own
    assert priced.collective_time("all_reduce", n, inside) == base.collective_time(
        "all_reduce", n, inside
    )
    file = tmp_path / "priced.toml"
    file.write_text(machine_to_toml(priced))
    assert "[links.inter.collectives.all_reduce]" in file.read_text()
    assert machine(str(file)) == priced


def test_an_all_to_all_exchange_uses_its_own_bandwidth() -> None:
    base = PRESETS["h100-node"]
    price = CollectivePrice(base.intra.bandwidth / 4, base.intra.latency_s)
    priced = replace(base, intra=replace(base.intra, collectives=(("all_to_all", price),)))
    a, b, n = price.latency_s, price.bandwidth, 1 << 26
    assert priced.collective_time("all_to_all", n, range(8)) == pytest.approx(
        min(7 * a + 7 / 8 * n / b, 3 * (a + n / 2 / b))
    )
    assert priced.collective_time("all_to_all", n, range(8)) > 3 * base.collective_time(
        "all_to_all", n, range(8)
    )


def test_a_bad_collective_price_is_refused() -> None:
    with pytest.raises(MachineError, match="positive bandwidth and a non-negative latency"):
        CollectivePrice(0.0, 1e-6)
    with pytest.raises(MachineError, match="a collective's price is one of all_gather,"):
        Link("pcie", 1e9, 1e-6, collectives=(("all_slice", CollectivePrice(1e9, 0.0)),))


def test_a_ring_across_nodes_runs_at_the_network_of_its_devices() -> None:
    """p100-cluster: 4 devices a node at 3.125 GB/s each; all 16 devices' ring crosses
    each node with 4 channels (12.5 GB/s, below NVLink's 80), one device a node gets
    its own share only."""
    p100 = PRESETS["p100-cluster"]
    a = network(p100).latency_s
    n = 1 << 30
    assert p100.collective_time("all_reduce", n, range(16)) == pytest.approx(
        30 * (a + n / 16 / 12.5e9)
    )
    assert p100.collective_time("all_reduce", n, [0, 4, 8, 12]) == pytest.approx(
        6 * (a + n / 4 / 3.125e9)
    )
    # all-to-all over two nodes, 2 devices each: 2 of 4 quarters leave the node at 3.125 GB/s
    assert p100.collective_time("all_to_all", n, [0, 1, 4, 5]) == pytest.approx(
        min(3 * a + n / 2 / 3.125e9, 2 * (a + n / 2 / 3.125e9))
    )


@pytest.mark.parametrize("name", ["p100-cluster", "k80-cluster", "v100-tensoropt", "h100-cluster"])
@pytest.mark.parametrize("kind", MOVING_KINDS)
def test_a_group_across_nodes_is_slower_than_one_inside_a_node(
    name: str, kind: CollectiveKind
) -> None:
    preset = PRESETS[name]
    count = min(4, preset.nodes)
    inside = list(range(count))
    across = [node * preset.devices_per_node for node in range(count)]
    for n in (1, 1 << 20, 1 << 30):
        slow = preset.collective_time(kind, n, across)
        fast = preset.collective_time(kind, n, inside)
        assert slow > fast > 0


def test_cpu_8_prices_a_tiny_all_reduce_as_measured() -> None:
    """The calibration in SHARED_MEMORY's docstring: ~150 us for 4 bytes on 8 devices."""
    assert machine("cpu-8").collective_time("all_reduce", 4, range(8)) == pytest.approx(
        150e-6, rel=0.01
    )
    assert math.isclose(machine("cpu-8").transfer_time(20 << 20, 0, 1), (20 << 20) / 20e9 + 50e-6)
