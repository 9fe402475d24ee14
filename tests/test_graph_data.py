"""The GNN input graphs: ROC's dataset stand-ins, networkx's small graphs, user edge lists."""

import numpy as np
import pytest

from tasoc.ir.graph_data import (
    DATASETS,
    SMALL_GRAPHS,
    Csr,
    GraphDataError,
    from_edges,
    small,
    stand_in,
)


def _edge_set(graph: Csr) -> set[tuple[int, int]]:
    return set(zip(graph.indices.tolist(), graph.targets().tolist(), strict=True))


@pytest.mark.parametrize("name", ["pubmed", "ppi"])
def test_a_stand_in_has_its_datasets_statistics(name: str) -> None:
    scale = 0.05
    graph = stand_in(name, scale=scale, seed=3)
    vertices, edges = DATASETS[name].scaled(scale)
    assert (graph.vertices, graph.edges) == (vertices, edges)
    edge_set = _edge_set(graph)
    assert all((t, s) in edge_set for s, t in edge_set), "stand-ins are symmetric"
    assert not any(s == t for s, t in edge_set)
    degrees = graph.degrees()
    assert degrees.max() > 5 * degrees.mean(), "power-law degrees have hubs"


def test_a_stand_in_is_the_same_for_a_seed_and_differs_across_seeds() -> None:
    one, again, other = (stand_in("pubmed", scale=0.1, seed=s) for s in (1, 1, 2))
    assert np.array_equal(one.indices, again.indices)
    assert np.array_equal(one.indptr, again.indptr)
    assert not np.array_equal(one.indices, other.indices)


@pytest.mark.parametrize("name", SMALL_GRAPHS)
def test_small_graphs_are_symmetric_csr(name: str) -> None:
    graph = small(name)
    assert graph.indptr[-1] == graph.edges and graph.edges > 0
    edge_set = _edge_set(graph)
    assert all((t, s) in edge_set for s, t in edge_set)


def test_an_edge_list_becomes_sorted_in_edges() -> None:
    graph = from_edges(np.array([2, 0, 1]), np.array([1, 1, 0]), 4)
    assert graph.indptr.tolist() == [0, 1, 3, 3, 3]
    assert graph.indices.tolist() == [1, 0, 2]
    assert graph.isolated() == 2


@pytest.mark.parametrize(
    ("sources", "targets", "vertices", "message"),
    [
        ([0, 5], [1, 0], 3, "has source 5, outside the 3 vertices"),
        ([0, 1], [1, -1], 3, "has target -1, outside"),
        ([0, 2], [1, 2], 3, "edge 1 is a self loop on vertex 2"),
        ([0, 0], [1, 1], 3, "edge 0 -> 1 appears more than once"),
        ([0], [1, 2], 3, "two 1-D arrays of equal length"),
        ([0.0], [1.0], 3, "must be integers"),
        ([], [], 0, "at least one vertex"),
    ],
)
def test_bad_edge_lists_are_refused_with_one_line(
    sources: list, targets: list, vertices: int, message: str
) -> None:
    with pytest.raises(GraphDataError, match=message) as caught:
        from_edges(np.array(sources), np.array(targets), vertices)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "cora"}, "unknown graph 'cora'"),
        ({"name": "pubmed", "scale": 0}, "scale must be in"),
        ({"name": "pubmed", "locality": 2}, "locality"),
        ({"name": "amazon"}, "over the"),
    ],
)
def test_bad_stand_in_requests_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(GraphDataError, match=message):
        stand_in(**kwargs)
