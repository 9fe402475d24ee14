"""Graph neural networks (ROC, Jia thesis ch. 4): GCN, GraphSAGE and GIN over one
input graph, full-graph training.

The graph is part of the program: its edge arrays are `graph.constant`s of shape
`[1, E]` (one edge block, `tasoc/ir/ops/gnn.py`), so a pass such as
`soap-shard{search=roc}` sees it and can partition it. Features `[V, F]` are the
program's input and the classes of the vertices its labels (`autodiff`'s
softmax-cross-entropy adds them); the forward program returns the logits `[V, C]`.

Graphs (`graph=`): ROC's four datasets as synthetic stand-ins with Table 4.4's
statistics (`tasoc.ir.graph_data.stand_in`; `scale=` of the vertices, each at a
default that builds in seconds here), networkx's small real graphs, or a user's edge
list as an `.npz` with integer arrays `sources` and `targets` (and optionally
`vertices`), checked by `graph_data.from_edges`.

Layers:

- `gcn` (Kipf & Welling): `H' = act(Â H W)`, `Â = D^-1/2 (A + I) D^-1/2`. The self
  term `I` is written as one edge per vertex, so one weighted `sum` aggregation is the
  whole propagation (ROC's GCN, §4.7.1).
- `sage` (Hamilton et al.): `H' = act(H W_self + agg(H) W_neigh)`, `agg` the `mean` or
  the element-wise `max` over the in-neighbours (an isolated vertex's is 0).
- `gin` (Xu et al., eps = 0): `H' = MLP(H + sum(H))`, a two-layer ReLU MLP.
- `gat` (Veličković et al.), one head: `H' = act(sum_j alpha_ij W h_j)` over each
  vertex's in-neighbours and itself, `alpha` the edge softmax of
  `LeakyReLU_0.2(a_l . W h_j + a_r . W h_i)`.
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tasoc.ir.builder import GraphBuilder, shape_of
from tasoc.ir.graph_data import (
    DATASETS,
    SMALL_GRAPHS,
    Csr,
    GraphDataError,
    from_edges,
    small,
    stand_in,
)
from tasoc.models.layers import require_choice
from tasoc.models.registry import ZooError, register

EDGE_DTYPE = "i32"
"""Element type of the edge arrays (JAX runs i32 without x64 mode)."""

DEFAULT_SCALES = {"pubmed": 1.0, "ppi": 0.06, "reddit": 0.004, "amazon": 0.0005}
"""Each stand-in's default `scale=`: about 100,000 edges, built in about a second on
two cores; Reddit's average degree of 490 makes any stand-in below 0.004 nearly a
complete graph (0.001: all 54,056 pairs of 233 vertices), so its default keeps 932
vertices and 458,532 edges. Full size is `scale=1` (Reddit and Amazon exceed what
tasoc builds: `graph_data.MAX_EDGES`)."""

SMALL_SIZES = (16, 4)
"""(features, classes) of the small graphs, which carry neither."""

GRAPH_SOURCE = (
    "ROC's Table 4.4 datasets as synthetic stand-ins (Jia thesis §4.7.1), networkx's "
    "small graphs, or an edge list (.npz)"
)


@functools.lru_cache(maxsize=8)
def load_graph(name: str, scale: float, seed: int) -> tuple[Csr, int, int]:
    """(graph, features, classes) of `graph=name`; ZooError in one line for a graph
    that cannot be used."""
    try:
        if name in DATASETS:
            stats = DATASETS[name]
            graph = stand_in(name, scale=scale or DEFAULT_SCALES[name], seed=seed)
            return graph, stats.features, stats.labels
        if name in SMALL_GRAPHS:
            return (small(name), *SMALL_SIZES)
        if name.endswith(".npz"):
            return (_edge_list(Path(name)), *SMALL_SIZES)
    except GraphDataError as err:
        raise ZooError(f"graph '{name}': {err}") from None
    known = ", ".join([*DATASETS, *SMALL_GRAPHS])
    raise ZooError(f"unknown graph '{name}'; known: {known}, or a path to an .npz edge list")


def _edge_list(path: Path) -> Csr:
    try:
        with np.load(path) as data:
            sources, targets = data["sources"], data["targets"]
            vertices = int(data["vertices"]) if "vertices" in data else None
    except (OSError, ValueError, KeyError) as err:
        raise GraphDataError(
            f"cannot read an edge list (arrays 'sources' and 'targets') from {path}: {err}"
        ) from None
    if vertices is None:
        vertices = int(max(sources.max(initial=-1), targets.max(initial=-1))) + 1
    return from_edges(sources, targets, vertices)


class GraphInput:
    """The edge arrays of one graph as constants of one program (made once each)."""

    def __init__(self, g: GraphBuilder, graph: Csr) -> None:
        self.g = g
        self.graph = graph
        self.vertices = graph.vertices
        self._neighbours: tuple[SSAValue, SSAValue] | None = None
        self._normalised: tuple[SSAValue, SSAValue, SSAValue] | None = None

    def _edges(self, sources: np.ndarray, targets: np.ndarray) -> tuple[SSAValue, SSAValue]:
        return (
            self.g.constant(sources.reshape(1, -1), EDGE_DTYPE),
            self.g.constant(targets.reshape(1, -1), EDGE_DTYPE),
        )

    def neighbours(self) -> tuple[SSAValue, SSAValue]:
        """(src, dst) of the in-edges, no self loops."""
        if self._neighbours is None:
            self._neighbours = self._edges(self.graph.indices, self.graph.targets())
        return self._neighbours

    def _with_loops(self) -> tuple[np.ndarray, np.ndarray]:
        """(sources, targets) of A + I, sorted by target."""
        graph = self.graph
        loops = np.arange(graph.vertices, dtype=np.int32)
        src = np.concatenate([graph.indices, loops])
        dst = np.concatenate([graph.targets(), loops])
        order = np.lexsort((src, dst))
        return src[order], dst[order]

    def normalised(self) -> tuple[SSAValue, SSAValue, SSAValue]:
        """(src, dst, weight) of GCN's `D^-1/2 (A + I) D^-1/2`, self loops included."""
        if self._normalised is None:
            src, dst = self._with_loops()
            degree = (self.graph.degrees() + 1).astype(np.float64)
            weight = (1.0 / np.sqrt(degree[src] * degree[dst])).astype(np.float32)
            self._normalised = (*self._edges(src, dst), self.g.constant(weight.reshape(1, -1)))
        return self._normalised

    def looped(self) -> tuple[SSAValue, SSAValue]:
        """(src, dst) of A + I: the edges GAT attends over (GCN's, without weights)."""
        src, dst, _ = self.normalised()
        return src, dst

    def aggregate(self, x: SSAValue, reduce: str, normalised: bool = False) -> SSAValue:
        if normalised:
            src, dst, weight = self.normalised()
            return self.g.aggregate(x, src, dst, weight, reduce=reduce, block_rows=self.vertices)
        src, dst = self.neighbours()
        return self.g.aggregate(x, src, dst, reduce=reduce, block_rows=self.vertices)


def _widths(layers: int, features: int, hidden: int, classes: int) -> list[tuple[int, int]]:
    """(d_in, d_out) of each layer: features -> hidden ... -> classes."""
    if layers < 1 or hidden < 1:
        raise ZooError(f"layers and hidden must be positive, got {layers} and {hidden}")
    sizes = [features, *([hidden] * (layers - 1)), classes]
    return list(itertools.pairwise(sizes))


def _start(graph: str, scale: float, seed: int) -> tuple[GraphBuilder, GraphInput, SSAValue, int]:
    """The builder, the graph, the features input and the class count."""
    if scale < 0 or scale > 1:
        raise ZooError(f"scale must be in (0, 1] (0: the graph's default), got {scale}")
    csr, features, classes = load_graph(graph, scale, seed)
    g = GraphBuilder()
    x = g.input("features", (csr.vertices, features))
    return g, GraphInput(g, csr), x, classes


def layer_widths(
    model: str, graph: str, scale: float, seed: int, layers: int, hidden: int
) -> list[tuple[int, int]]:
    """Each layer's (d_in, d_out) of a zoo GNN: what ROC's cost model prices per layer."""
    _, features, classes = load_graph(graph, scale, seed)
    return _widths(layers, features, hidden, classes)


@register(
    loss="softmax-cross-entropy",
    source=f"Kipf & Welling, GCN (2017); ROC's GCN (Jia thesis §4.7). Graphs: {GRAPH_SOURCE}",
    small={"graph": "karate_club", "hidden": 8},
)
def gcn(
    *, graph: str = "pubmed", scale: float = 0.0, layers: int = 2, hidden: int = 16, seed: int = 0
) -> ModuleOp:
    """GCN: layers of a dense projection, then the normalised sum over D^-1/2 (A + I) D^-1/2."""
    g, edges, h, classes = _start(graph, scale, seed)
    widths = _widths(layers, shape_of(h)[1], hidden, classes)
    for index, (d_in, d_out) in enumerate(widths):
        h = edges.aggregate(g.matmul(h, g.param(f"w{index}", (d_in, d_out))), "sum", True)
        if index < len(widths) - 1:
            h = g.relu(h)
    return g.build(h)


@register(
    loss="softmax-cross-entropy",
    source=f"Hamilton et al., GraphSAGE (2017). Graphs: {GRAPH_SOURCE}",
    small={"graph": "karate_club", "hidden": 8},
)
def sage(
    *,
    graph: str = "pubmed",
    scale: float = 0.0,
    layers: int = 2,
    hidden: int = 16,
    aggregator: str = "mean",
    seed: int = 0,
) -> ModuleOp:
    """GraphSAGE: each vertex's own term plus the mean or max of its neighbours', each projected."""
    require_choice("aggregator", aggregator, ("mean", "max"))
    g, edges, h, classes = _start(graph, scale, seed)
    widths = _widths(layers, shape_of(h)[1], hidden, classes)
    for index, (d_in, d_out) in enumerate(widths):
        own = g.matmul(h, g.param(f"w_self{index}", (d_in, d_out)))
        neighbours = edges.aggregate(h, aggregator)
        h = g.add(own, g.matmul(neighbours, g.param(f"w_neigh{index}", (d_in, d_out))))
        if index < len(widths) - 1:
            h = g.relu(h)
    return g.build(h)


@register(
    loss="softmax-cross-entropy",
    source=f"Xu et al., GIN (2019), eps = 0. Graphs: {GRAPH_SOURCE}",
    small={"graph": "karate_club", "hidden": 8},
)
def gin(
    *, graph: str = "pubmed", scale: float = 0.0, layers: int = 2, hidden: int = 16, seed: int = 0
) -> ModuleOp:
    """GIN: a two-layer ReLU MLP of each vertex's features plus the sum of its neighbours'."""
    g, edges, h, classes = _start(graph, scale, seed)
    widths = _widths(layers, shape_of(h)[1], hidden, classes)
    for index, (d_in, d_out) in enumerate(widths):
        combined = g.add(h, edges.aggregate(h, "sum"))
        inner = g.relu(g.matmul(combined, g.param(f"w{index}a", (d_in, hidden))))
        h = g.matmul(inner, g.param(f"w{index}b", (hidden, d_out)))
        if index < len(widths) - 1:
            h = g.relu(h)
    return g.build(h)


LEAKY_SLOPE = 0.2
"""GAT's LeakyReLU slope on the attention logits."""


@register(
    loss="softmax-cross-entropy",
    source=f"Veličković et al., GAT (2018), one head. Graphs: {GRAPH_SOURCE}",
    small={"graph": "karate_club", "hidden": 8},
)
def gat(
    *, graph: str = "pubmed", scale: float = 0.0, layers: int = 2, hidden: int = 16, seed: int = 0
) -> ModuleOp:
    """GAT: attention over each vertex's in-neighbours and itself (edge softmax), one head."""
    g, edges, h, classes = _start(graph, scale, seed)
    widths = _widths(layers, shape_of(h)[1], hidden, classes)
    src, dst = edges.looped()
    rows = edges.vertices
    for index, (d_in, d_out) in enumerate(widths):
        wh = g.matmul(h, g.param(f"w{index}", (d_in, d_out)))
        source = g.matmul(wh, g.param(f"a_src{index}", (d_out, 1)))
        target = g.matmul(wh, g.param(f"a_dst{index}", (d_out, 1)))
        logits = g.edge_scores(source, target, src, dst, rows)
        logits = g.max(logits, g.scale(logits, LEAKY_SLOPE))
        attention = g.edge_softmax(logits, dst, rows)
        h = g.aggregate(wh, src, dst, attention, reduce="sum", block_rows=rows)
        if index < len(widths) - 1:
            h = g.relu(h)
    return g.build(h)
