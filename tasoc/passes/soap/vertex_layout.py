"""`soap-shard{search=roc}`: a GNN training step laid out by a vertex partition.

ROC (Jia thesis §4.4) gives each device a set of target vertices and their in-edges.
tasoc writes that as ordinary `parallel` IR in two steps:

1. **Layout** (`lay_out`, on the light graph): the partitioner's `VertexPartition`
   renumbers the vertices device by device, and each device's block is padded to the
   largest block, `B` rows, so that every vertex-dimension tensor (`[V, ...]` ->
   `[D*B, ...]`) splits evenly over `D` devices. The graph's edge arrays (constants
   `[1, E]`) become `[D, Eb]`: block `d` holds device `d`'s in-edges, sources renumbered,
   targets local to the block, padded with `dst = -1` entries to the largest block's
   edge count. Padding rows have no edges in or out, so they never reach a real row;
   a mean (or sum) over the vertices, which is how every loss reads them, becomes a sum
   weighted by a mask that is 0 on padding and divides by the real count, and its
   gradient likewise. The features and labels arguments take the padded shape: row
   `order[i]`'s data goes to its new row (`VertexLayout.rows`).
2. **Sharding**: every op split by its `sample` factor (data parallel over the
   vertices: the GNN ops' edge blocks, the dense layers' rows), weights replicated
   with their gradients all-reduced, the source features all-gathered before each
   aggregation (its SOAP rule, `tasoc/ir/ops/gnn.py`); written by the pass's ordinary
   writer and priced by the ordinary simulator. Each device's work is its padded
   block, so the step runs at the pace of the largest block: a balanced partition
   (smaller `B` and `Eb`) is a faster step, simulated and measured.

Everything here works on the `Dag`; the partitioner sees only the `Csr`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.graph_data import Csr, GraphDataError, from_edges
from tasoc.ir.shapes import ConstData, DType, ShapeError, TensorSig
from tasoc.ir.training import STATE_ATTR
from tasoc.passes.soap.roc.partition import PARTITIONERS, PartitionRequest, VertexPartition

GNN_OPS = (
    "aggregate",
    "aggregate_grad",
    "aggregate_weight_grad",
    "edge_softmax",
    "edge_softmax_grad",
    "edge_scores",
)
"""Ops with edge arrays and a `block_rows` attribute."""


class EdgeOperands(NamedTuple):
    """Where a GNN op's edge operands are: the sources (None: it has none), the
    targets, and other per-edge values (weights, scores)."""

    src: int | None
    dst: int
    values: tuple[int, ...]


def edge_operands(node: Node) -> EdgeOperands:
    """The edge operands of GNN op `node` (`tasoc/ir/ops/gnn.py`)."""
    op, count = node.op, len(node.inputs)
    if op in ("aggregate", "aggregate_grad"):
        weighted = count == (4 if op == "aggregate" else 5)
        return EdgeOperands(1, 2, (3,) if weighted else ())
    if op == "aggregate_weight_grad":
        return EdgeOperands(1, 2, ())
    if op == "edge_scores":
        return EdgeOperands(2, 3, ())
    return EdgeOperands(None, 1, (0,) if op == "edge_softmax" else (0, 2))


class LayoutError(ValueError):
    """A program `search=roc` cannot lay out; one line for the user."""


@dataclass(frozen=True, eq=False)
class VertexLayout:
    """How a program's vertices were laid out: the partition, the padded block of rows
    per device, and each original vertex's new row (`rows`)."""

    partition: VertexPartition
    vertices: int
    block_rows: int
    rows: np.ndarray

    @property
    def devices(self) -> int:
        return self.partition.parts

    def edge_counts(self, graph: Csr) -> np.ndarray:
        """In-edges each device owns."""
        return np.bincount(self.partition.owner()[graph.targets()], minlength=self.devices)

    def report(self, graph: Csr) -> dict[str, Any]:
        sizes = self.partition.sizes()
        edges = self.edge_counts(graph)
        return {
            "vertices": self.vertices,
            "edges": graph.edges,
            "devices": self.devices,
            "block_rows": self.block_rows,
            "block_edges": int(edges.max()),
            "vertices_per_device": sizes.tolist(),
            "edges_per_device": edges.tolist(),
            "vertex_imbalance": round(float(sizes.max() / sizes.mean()), 4),
            "edge_imbalance": round(float(edges.max() / max(edges.mean(), 1e-9)), 4),
        }


# ------------------------------------------------------------- the graph


def _array(node: Node) -> np.ndarray:
    data: ConstData = node.attr("value")
    return np.asarray(data.values).reshape(data.shape)


def gnn_nodes(dag: Dag) -> list[Node]:
    return [node for node in dag.ops if node.op in GNN_OPS]


def graph_of(dag: Dag) -> tuple[Csr, int]:
    """The input graph of a GNN program (the union of its edge arrays, self loops left
    out: a layer's own term) and its vertex count; LayoutError in one line for a
    program without one, or with edges that are not constants of one unpartitioned
    graph."""
    nodes = gnn_nodes(dag)
    if not nodes:
        raise LayoutError(
            "search=roc partitions a graph neural network's input graph; the program has "
            "no graph.aggregate or graph.edge_softmax"
        )
    vertices = {node.attr("block_rows") for node in nodes}
    blocks = {node.inputs[edge_operands(node).dst].sig.shape[0] for node in nodes}
    if len(vertices) != 1 or blocks != {1}:
        raise LayoutError(
            "search=roc needs one unpartitioned graph (edge arrays [1, E], one block_rows); "
            f"found block_rows {sorted(vertices)} over {sorted(blocks)} block(s)"
        )
    (count,) = vertices
    pairs = []
    for src, dst in _edge_sets(nodes).items():
        s, t = _array(src).reshape(-1), _array(dst).reshape(-1)
        keep = (t >= 0) & (s != t)
        pairs.append(np.stack([s[keep], t[keep]]))
    edges = np.unique(np.concatenate(pairs, axis=1), axis=1)
    try:
        return from_edges(edges[0], edges[1], count), count
    except GraphDataError as err:
        raise LayoutError(f"the program's graph: {err}") from None


def _edge_sets(nodes: list[Node]) -> dict[Node, Node]:
    """Each edge set's sources constant by its targets constant; LayoutError for edges
    that are not constants, or one targets array paired with two sources arrays (its
    per-edge values could not be laid out in one order)."""
    sets: dict[Node, Node] = {}
    for node in nodes:
        where = edge_operands(node)
        dst = node.inputs[where.dst].node
        src = None if where.src is None else node.inputs[where.src].node
        for array in (dst, src):
            if array is not None and array.op != "constant":
                raise LayoutError(
                    f"search=roc reads the graph from constants; graph.{node.op}'s edges "
                    "are computed"
                )
        if src is None:
            continue
        if sets.setdefault(dst, src) is not src:
            raise LayoutError("one targets array is paired with two sources arrays")
    for node in nodes:
        if node.inputs[edge_operands(node).dst].node not in sets:
            raise LayoutError(f"graph.{node.op}'s targets belong to no aggregation's edges")
    return sets


def layer_widths(dag: Dag) -> tuple[tuple[int, int], ...]:
    """(features in, features out) of each forward aggregation, for the cost model."""
    return tuple(
        (node.inputs[0].sig.shape[1], node.out.sig.shape[1])
        for node in dag.ops
        if node.op == "aggregate"
    )


def partition(
    dag: Dag, parts: int, partitioner: str, machine: str, seed: int
) -> tuple[Csr, VertexPartition]:
    """The program's graph and its partition for `parts` devices by `partitioner`."""
    graph, _ = graph_of(dag)
    request = PartitionRequest(graph, parts, layer_widths(dag), machine, seed)
    try:
        return graph, PARTITIONERS[partitioner](request)
    except GraphDataError as err:
        raise LayoutError(str(err)) from None


# ------------------------------------------------------------- the layout


def layout_of(graph: Csr, part: VertexPartition) -> VertexLayout:
    """Block sizes and new rows of `part` (module docstring)."""
    sizes = part.sizes()
    block = int(sizes.max())
    positions = np.empty(graph.vertices, dtype=np.int64)
    positions[part.order] = np.arange(graph.vertices)
    owner = part.owner()
    rows = owner * block + positions - part.bounds[owner]
    return VertexLayout(part, graph.vertices, block, rows)


class _EdgeOrder:
    """Where each edge of one edge set goes in the blocked layout: its device's block
    (its target's owner), sorted by local target then source, padded to the widest
    block."""

    def __init__(self, layout: VertexLayout, src: np.ndarray, dst: np.ndarray) -> None:
        src, dst = src.reshape(-1), dst.reshape(-1)
        self.keep = dst >= 0
        new_src, new_dst = layout.rows[src[self.keep]], layout.rows[dst[self.keep]]
        block, local = np.divmod(new_dst, layout.block_rows)
        self.order = np.lexsort((new_src, local, block))
        counts = np.bincount(block, minlength=layout.devices)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        slot = np.arange(len(self.order)) - np.repeat(starts, counts)
        self.where = (block[self.order], slot)
        self.shape = (layout.devices, max(int(counts.max()), 1))
        self.src, self.dst = new_src, local

    def place(self, values: np.ndarray, fill: float | int = 0) -> np.ndarray:
        """Per-edge `values` (kept edges, in the set's old order) in the blocked layout."""
        out = np.full(self.shape, fill, values.dtype)
        out[self.where] = values[self.order]
        return out

    def lay(self, role: str, array: np.ndarray) -> np.ndarray:
        """An edge array of this set (`src`, `dst` or per-edge values) laid out."""
        if role == "src":
            return self.place(self.src)
        if role == "dst":
            return self.place(self.dst, -1)
        return self.place(array.reshape(-1)[self.keep])


def _constant(array: np.ndarray, dtype: DType) -> Value:
    cast = float if dtype.is_float else int
    values = tuple(cast(v) for v in array.reshape(-1).tolist())
    return Node("constant", value=ConstData(array.shape, dtype, values)).out


class _Rewriter:
    """Rebuilds a dag with the vertex dimension padded and the edges blocked."""

    def __init__(self, dag: Dag, layout: VertexLayout) -> None:
        self.dag = dag
        self.layout = layout
        self.padded = layout.devices * layout.block_rows
        self.real = np.zeros(self.padded, dtype=bool)
        self.real[layout.rows] = True
        self.values: dict[Value, Value] = {}
        self.sets = _edge_sets(gnn_nodes(dag))
        self.orders: dict[Node, _EdgeOrder] = {}
        self.laid: dict[tuple[Node, Node, str], Value] = {}

    def is_vertex(self, old: Value, new: Value) -> bool:
        return (
            old.sig.rank > 0
            and old.sig.shape[0] == self.layout.vertices
            and new.sig.shape[0] == self.padded
        )

    def arg(self, node: Node) -> Node:
        (sig,) = node.sigs
        attributes = dict(node.attr("attributes"))
        vertex = (
            not node.attr("is_param")
            and STATE_ATTR not in attributes
            and sig.rank > 0
            and sig.shape[0] == self.layout.vertices
        )
        if vertex:
            sig = TensorSig((self.padded, *sig.shape[1:]), sig.dtype, sig.encoding)
        return Node.arg(
            node.attr("index"), node.attr("name"), sig, node.attr("is_param"), attributes
        )

    def edges(self, node: Node, inputs: list[Value]) -> None:
        """Replace the node's constant edge operands by their blocked layout."""
        where = edge_operands(node)
        dst = node.inputs[where.dst].node
        if dst not in self.orders:
            src = self.sets[dst]
            self.orders[dst] = _EdgeOrder(self.layout, _array(src), _array(dst))
        order = self.orders[dst]
        roles = [(where.dst, "dst"), *((i, "values") for i in where.values)]
        if where.src is not None:
            roles.append((where.src, "src"))
        for position, role in roles:
            array = node.inputs[position].node
            if array.op != "constant":
                continue  # computed per-edge values: laid out by what computed them
            key = (array, dst, role)
            if key not in self.laid:
                self.laid[key] = _constant(order.lay(role, _array(array)), array.sigs[0].dtype)
            inputs[position] = self.laid[key]

    def mask(self, x: Value, axes: tuple[int, ...], mean: bool) -> Value:
        """Weights over x's rows: 0 on padding, 1 (sum) or 1 / the real count (mean)."""
        count = self.layout.vertices
        for axis in axes:
            if axis != 0:
                count *= x.sig.shape[axis]
        weight = np.where(self.real, 1.0 / count if mean else 1.0, 0.0)
        shape = (self.padded,) + (1,) * (x.sig.rank - 1)
        return _constant(weight.reshape(shape), x.sig.dtype)

    def reduction(self, node: Node, inputs: list[Value]) -> Value | None:
        """A sum or mean over the vertices made a masked sum; None for another op."""
        if node.op not in ("reduce", "reduce_grad"):
            return None
        x_old, x = node.inputs[0], inputs[0]
        axes = tuple(a % x_old.sig.rank for a in node.attr("axes"))
        if not self.is_vertex(x_old, x) or 0 not in axes:
            return None
        kind = node.attr("kind")
        if kind not in ("sum", "mean"):
            raise LayoutError(f"search=roc masks sums and means over the vertices, not a {kind}")
        mask = self.mask(x, axes, kind == "mean")
        attrs = {**dict(node.attrs), "kind": "sum"}
        if node.op == "reduce":
            return Node("reduce", (Node("mul", (x, mask)).out,), **attrs).out
        dy = Node("reduce_grad", (x, inputs[1]), **attrs).out
        return Node("mul", (dy, mask)).out

    def node(self, node: Node) -> Node | Value:
        inputs = [self.values[v] for v in node.inputs]
        attrs: dict[str, Any] = dict(node.attrs)
        if node.op in GNN_OPS:
            self.edges(node, inputs)
            attrs["block_rows"] = self.layout.block_rows
        shape = attrs.get("shape")
        if node.op in ("ones", "zeros") and shape and shape[0] == self.layout.vertices:
            attrs["shape"] = (self.padded, *shape[1:])  # a filled vertex tensor (seeds)
        masked = self.reduction(node, inputs)
        if masked is not None:
            return masked
        return Node(node.op, inputs, **attrs)

    def run(self) -> Dag:
        args = [self.arg(node) for node in self.dag.args]
        for old, new in zip(self.dag.args, args, strict=True):
            self.values[old.out] = new.out
        for node in self.dag.ops:
            try:
                made = self.node(node)
            except ShapeError as err:
                raise LayoutError(
                    f"graph.{node.op} does not fit the padded vertex dimension: {err}"
                ) from None
            if isinstance(made, Value):
                (self.values[node.out],) = (made,)
            else:
                for old, new in zip(node.results, made.results, strict=True):
                    self.values[old] = new
        outputs = [self.values[v] for v in self.dag.outputs]
        for old, new in zip(self.dag.outputs, outputs, strict=True):
            if old.sig.shape != new.sig.shape:
                raise LayoutError(
                    f"an output of shape {old.sig.shape} depends on the vertex count; "
                    "search=roc shards steps whose outputs are the loss and the weights"
                )
        return Dag(
            args,
            outputs,
            self.dag.name,
            attributes=self.dag.attributes,
            result_attributes=self.dag.result_attributes,
        )


def lay_out(dag: Dag, layout: VertexLayout) -> Dag:
    """`dag` with its vertex dimension padded and renumbered and its edge arrays
    blocked by `layout` (module docstring)."""
    return _Rewriter(dag, layout).run()


def permute_rows(array: np.ndarray, layout: VertexLayout) -> np.ndarray:
    """A vertex-row argument (features, labels) of the original program in the laid-out
    program's rows; padding rows are zeros."""
    out = np.zeros((layout.devices * layout.block_rows, *array.shape[1:]), array.dtype)
    out[layout.rows] = array
    return out


def roc_layout(
    dag: Dag, parts: int, partitioner: str, machine: str, seed: int
) -> tuple[Dag, VertexLayout, Csr]:
    """Partition the program's graph and lay the program out by it."""
    graph, part = partition(dag, parts, partitioner, machine, seed)
    layout = layout_of(graph, part)
    return lay_out(dag, layout), layout, graph
