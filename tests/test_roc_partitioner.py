"""ROC's graph partitioner: Table 4.2's features, the learned cost model, the balanced
ranges, the baselines and the online-learning loop (Jia thesis §4.4)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tasoc.cost.devices import CPU, P100, V100
from tasoc.cost.gnn import layer_timer, simulated_layer_seconds, subgraph
from tasoc.cost.machines import MachineError, machine, machine_from_dict, machine_to_dict
from tasoc.ir.graph_data import SMALL_GRAPHS, from_edges, small, stand_in
from tasoc.passes.soap.roc.balance import balanced_bounds, bottleneck, metis
from tasoc.passes.soap.roc.cost_model import LayerCostModel
from tasoc.passes.soap.roc.features import FEATURES, PrefixFeatures, vertex_features
from tasoc.passes.soap.roc.learned import roc_partition
from tasoc.passes.soap.roc.partition import (
    PARTITIONERS,
    PartitionError,
    PartitionRequest,
    VertexPartition,
    equal_vertex,
)


def test_features_count_runs_of_consecutive_neighbours() -> None:
    # the thesis' example: v1's neighbours {3, 4, 6, 8} are three runs
    graph = from_edges(np.array([3, 4, 6, 8, 1]), np.array([1, 1, 1, 1, 3]), 9)
    x = vertex_features(graph, d_in=20, granularity=2)
    assert x[1].tolist() == [1, 4, 3, 1 + 1 + 1, 20 + 10 + 10]
    assert x[3].tolist() == [1, 1, 1, 1, 10]
    assert x[0].tolist() == [1, 0, 0, 0, 0]  # isolated: only itself


@st.composite
def graphs(draw: st.DrawFn) -> tuple:
    vertices = draw(st.integers(2, 12))
    pairs = draw(
        st.sets(
            st.tuples(st.integers(0, vertices - 1), st.integers(0, vertices - 1)).filter(
                lambda p: p[0] != p[1]
            ),
            max_size=40,
        )
    )
    sources = np.array([p[0] for p in pairs], dtype=np.int64)
    targets = np.array([p[1] for p in pairs], dtype=np.int64)
    order = np.array(draw(st.permutations(range(vertices))))
    return from_edges(sources, targets, vertices), order


def _brute_force_features(graph, vertex: int, d_in: int, granularity: int) -> list[float]:
    sources = graph.indices[graph.indptr[vertex] : graph.indptr[vertex + 1]].tolist()
    runs: list[int] = []
    for i, s in enumerate(sources):
        if i and s == sources[i - 1] + 1:
            runs[-1] += 1
        else:
            runs.append(1)
    return [
        1,
        len(sources),
        len(runs),
        sum(-(-r // granularity) for r in runs),
        sum(-(-(r * d_in) // granularity) for r in runs),
    ]


@given(graphs(), st.integers(1, 40), st.integers(1, 8), st.data())
def test_prefix_sums_equal_brute_force_range_sums(case, d_in, granularity, data) -> None:
    graph, order = case
    prefix = PrefixFeatures.of(graph, (d_in, 3), granularity, order)
    start = data.draw(st.integers(0, graph.vertices))
    stop = data.draw(st.integers(start, graph.vertices))
    expected = np.zeros(len(FEATURES))
    for v in order[start:stop]:
        expected += _brute_force_features(graph, int(v), d_in, granularity)
    assert np.allclose(prefix.range_sum(0, start, stop), expected)


def test_nnls_fit_recovers_known_weights() -> None:
    rng = np.random.default_rng(1)
    weights = {0: np.array([2.0, 0.5, 0.0, 3.0, 0.01]), 1: np.array([1.0, 0.0, 4.0, 0.0, 0.2])}
    model = LayerCostModel()
    for layer, w in weights.items():
        for _ in range(30):
            features = rng.uniform(0, 100, len(FEATURES)) * [1, 10, 3, 2, 500]
            model.observe(layer, features, float(features @ w))
    model.fit()
    for layer, w in weights.items():
        assert np.allclose(model.weights[layer], w, rtol=1e-6, atol=1e-9)
    assert model.count() == 60


def test_balanced_ranges_beat_equal_vertex_on_a_skewed_graph() -> None:
    # vertex 0 receives from everyone: its aggregation dominates the first range
    vertices = 64
    graph = from_edges(np.arange(1, vertices), np.zeros(vertices - 1, dtype=np.int64), vertices)
    costs = vertex_features(graph, 8, 16) @ np.array([1.0, 1.0, 0.0, 0.0, 0.1])
    cumulative = np.concatenate([[0.0], np.cumsum(costs)])
    equal = equal_vertex(graph, 4).bounds
    balanced = balanced_bounds(costs, 4)
    assert bottleneck(cumulative, balanced) < bottleneck(cumulative, equal)
    assert balanced[1] == 1  # the hub alone


@given(st.lists(st.floats(0, 100), min_size=1, max_size=30), st.integers(1, 8))
def test_balanced_bounds_are_non_empty_ranges(costs, parts) -> None:
    parts = min(parts, len(costs))
    bounds = balanced_bounds(np.array(costs), parts)
    assert bounds[0] == 0 and bounds[-1] == len(costs) and np.all(np.diff(bounds) >= 1)
    cumulative = np.concatenate([[0.0], np.cumsum(costs)])
    assert bottleneck(cumulative, bounds) <= bottleneck(
        cumulative, np.linspace(0, len(costs), parts + 1).round().astype(np.int64)
    ) * (1 + 1e-9)


def _fake_measure(request: PartitionRequest, partition: VertexPartition) -> np.ndarray:
    """A layer costs 1 per vertex and 2 per in-edge, deterministically."""
    degrees = request.graph.degrees()
    return np.array(
        [
            [
                len(partition.order[a:b]) + 2.0 * degrees[partition.order[a:b]].sum()
                for a, b in zip(partition.bounds[:-1], partition.bounds[1:], strict=True)
            ]
            for _ in request.layers
        ]
    )


def _requests() -> list[PartitionRequest]:
    return [
        PartitionRequest(small(name), parts, ((8, 4), (4, 2)), machine="p100")
        for name in SMALL_GRAPHS
        for parts in (1, 2, 5)
    ]


@pytest.mark.parametrize("name", ["equal-vertex", "equal-edge", "metis", "roc"])
def test_every_partitioner_returns_a_valid_partition(name: str) -> None:
    for request in _requests():
        partition = PARTITIONERS[name](request)
        assert sorted(partition.order.tolist()) == list(range(request.graph.vertices))
        assert partition.parts == request.parts and np.all(partition.sizes() >= 1)


def test_metis_order_groups_vertices_by_part() -> None:
    graph = small("les_miserables")
    partition = metis(graph, 4)
    owner = partition.owner()
    for part in range(4):
        members = partition.order[partition.bounds[part] : partition.bounds[part + 1]]
        assert np.all(owner[members] == part) and np.all(np.diff(members) > 0)


def test_roc_adds_layers_times_parts_points_per_iteration() -> None:
    graph = small("les_miserables")
    request = PartitionRequest(graph, 4, ((8, 4), (4, 2), (2, 2)), machine="p100")
    result = roc_partition(request, iterations=3, measure=_fake_measure, granularity=4)
    assert result.model.count() == 3 * 3 * 4
    assert all(result.model.count(layer) == 3 * 4 for layer in range(3))
    # the fake cost is linear in x1 and x2: after one iteration the model balances it
    first, *later = result.history
    assert min(step.epoch for step in later) <= first.epoch
    assert result.partition in [step.partition for step in result.history]


@pytest.mark.parametrize("parts", [0, -3, 78])
def test_bad_part_counts_are_one_line(parts: int) -> None:
    request = PartitionRequest(small("les_miserables"), parts, ((4, 2),))
    for name in PARTITIONERS:
        with pytest.raises(PartitionError) as error:
            PARTITIONERS[name](request)
        assert "\n" not in str(error.value)


def test_machines_time_layers_where_they_can() -> None:
    assert layer_timer("cpu").measured and layer_timer("cpu-8").measured
    assert not layer_timer("p100").measured and layer_timer("p100-cluster").device == P100
    assert (CPU.access_granularity, V100.access_granularity) == (16, 32)
    graph = stand_in("pubmed", scale=0.05)
    half = subgraph(graph, np.arange(graph.vertices // 2))
    whole = subgraph(graph, np.arange(graph.vertices))
    assert half.edges == graph.indptr[graph.vertices // 2]
    # simulated time grows with the work, and the wider layer costs more
    assert simulated_layer_seconds(half, 64, 16, P100) < simulated_layer_seconds(
        whole, 64, 16, P100
    )
    assert simulated_layer_seconds(whole, 64, 16, P100) < simulated_layer_seconds(
        whole, 500, 16, P100
    )


def test_machine_files_carry_the_access_granularity() -> None:
    data = machine_to_dict(machine("p100-cluster"))
    assert data["device"]["access_granularity"] == 32
    assert machine_from_dict(data, "test").device.access_granularity == 32
    data["device"]["access_granularity"] = 0
    with pytest.raises(MachineError, match=r"device\.access_granularity must be float32"):
        machine_from_dict(data, "test")
