"""Vertex partitions: what every partitioning method returns."""

import numpy as np
import pytest

from tasoc.ir.graph_data import small
from tasoc.passes.soap.roc.partition import PartitionError, equal_vertex, ranges


def test_equal_vertex_ranges_cover_every_vertex_once() -> None:
    graph = small("karate_club")
    partition = equal_vertex(graph, 4)
    assert partition.is_ranges()
    assert partition.sizes().tolist() == [8, 9, 9, 8]
    assert np.bincount(partition.owner()).tolist() == partition.sizes().tolist()


def test_more_parts_than_vertices_is_one_line() -> None:
    with pytest.raises(PartitionError, match="cannot split 15 vertices into 16 parts"):
        equal_vertex(small("florentine_families"), 16)


def test_bounds_must_cover_the_graph_with_non_empty_parts() -> None:
    with pytest.raises(PartitionError, match="do not cover"):
        ranges(small("karate_club"), np.array([0, 10, 10, 34]))
