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

The pass records each block's real rows (`BLOCKS_ATTR`) and, for the learned
partitioner, its cost model's points (`POINTS_ATTR`). From those and the edge blocks
`tasoc run --repartition-every` reads the graph back (`blocked_graph`) and lays the
laid-out step out anew by another partition (`relay_out`), without the program before
its layout.

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
from tasoc.passes.soap.roc.cost_model import LayerCostModel
from tasoc.passes.soap.roc.learned import roc_partition
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
    count = _block_rows(nodes)
    blocks = {node.inputs[edge_operands(node).dst].sig.shape[0] for node in nodes}
    if blocks != {1}:
        raise LayoutError(
            "search=roc needs one unpartitioned graph (edge arrays [1, E], one block_rows); "
            f"found block_rows {count} over {sorted(blocks)} block(s)"
        )
    return _graph(nodes, np.arange(count)), count


def _block_rows(nodes: list[Node]) -> int:
    """The one `block_rows` of a GNN program's ops; LayoutError for a program without
    GNN ops or with several."""
    if not nodes:
        raise LayoutError(
            "search=roc partitions a graph neural network's input graph; the program has "
            "no graph.aggregate or graph.edge_softmax"
        )
    rows = {node.attr("block_rows") for node in nodes}
    if len(rows) != 1:
        raise LayoutError(f"search=roc needs one graph (one block_rows), found {sorted(rows)}")
    (count,) = rows
    return int(count)


def _global_edges(src: np.ndarray, dst: np.ndarray, block_rows: int) -> tuple[np.ndarray, ...]:
    """An edge set's (sources, targets) as rows of the whole vertex dimension, flattened
    in the arrays' order, targets -1 on padding: block `d`'s local target `t` is row
    `d * block_rows + t` (an unpartitioned graph is one block of every row)."""
    block = np.arange(dst.shape[0]).reshape(-1, *([1] * (dst.ndim - 1)))
    rows = np.where(dst >= 0, block * block_rows + dst, -1)
    return src.reshape(-1).astype(np.int64), rows.reshape(-1).astype(np.int64)


def _graph(nodes: list[Node], vertex_of_row: np.ndarray) -> Csr:
    """The union of the nodes' edge sets, self loops left out, over the vertices
    `vertex_of_row` numbers (-1: a padding row, which no edge touches)."""
    vertices = int(vertex_of_row.max()) + 1
    block_rows = _block_rows(nodes)
    pairs = []
    for dst, src in _edge_sets(nodes).items():
        s, t = _global_edges(_array(src), _array(dst), block_rows)
        s, t = s[t >= 0], t[t >= 0]
        if np.any((s < 0) | (s >= len(vertex_of_row)) | (t >= len(vertex_of_row))):
            raise LayoutError(
                f"the program's graph: an edge index is outside its {len(vertex_of_row)} rows"
            )
        s, t = vertex_of_row[s], vertex_of_row[t]
        if np.any(s < 0) or np.any(t < 0):
            raise LayoutError("the program's graph: an edge reaches a padding row of its layout")
        pairs.append(np.stack([s[s != t], t[s != t]]))
    edges = np.unique(np.concatenate(pairs, axis=1), axis=1)
    try:
        return from_edges(edges[0], edges[1], vertices)
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
) -> tuple[Csr, VertexPartition, LayerCostModel | None]:
    """The program's graph, its partition for `parts` devices by `partitioner`, and
    for `roc` the cost model it learned (None for the others)."""
    graph, _ = graph_of(dag)
    request = PartitionRequest(graph, parts, layer_widths(dag), machine, seed)
    try:
        if partitioner == "roc":
            learned = roc_partition(request)
            return graph, learned.partition, learned.model
        return graph, PARTITIONERS[partitioner](request), None
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
    block. `src` and `dst` are the set's rows of the input program (`_global_edges`),
    `new_row` the laid-out row of each."""

    def __init__(
        self, layout: VertexLayout, new_row: np.ndarray, src: np.ndarray, dst: np.ndarray
    ) -> None:
        self.keep = dst >= 0
        new_src, new_dst = new_row[src[self.keep]], new_row[dst[self.keep]]
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
    """Rebuilds a dag with the vertex dimension padded and the edges blocked.

    The input's vertex dimension has `len(vertex_of_row)` rows, row `r` holding vertex
    `vertex_of_row[r]` of the layout's partition (-1: padding). A program not laid out
    yet has one row per vertex (the identity); one laid out already (`relaying`) has
    its blocks, its reductions over the vertices masked, and its one kind of
    vertex-row constant, those masks (0 on padding: `lay_out` makes no other, and
    refuses a program that has one), which are moved row by row like the data."""

    def __init__(
        self, dag: Dag, layout: VertexLayout, vertex_of_row: np.ndarray, relaying: bool
    ) -> None:
        self.dag = dag
        self.layout = layout
        self.input_rows = len(vertex_of_row)
        self.vertex_of_row = vertex_of_row
        self.new_row = np.where(vertex_of_row >= 0, layout.rows[vertex_of_row], -1)
        self.relaying = relaying
        self.padded = layout.devices * layout.block_rows
        self.real = np.zeros(self.padded, dtype=bool)
        self.real[layout.rows] = True
        self.values: dict[Value, Value] = {}
        self.sets = _edge_sets(gnn_nodes(dag))
        self.orders: dict[Node, _EdgeOrder] = {}
        self.laid: dict[tuple[Node, Node, str], Value] = {}

    def rows(self, array: np.ndarray) -> np.ndarray:
        """A vertex-row array of the input in the new rows, padding zeros."""
        return permute_rows(array, self.layout, self.vertex_of_row)

    def is_vertex(self, old: Value, new: Value) -> bool:
        return (
            old.sig.rank > 0
            and old.sig.shape[0] == self.input_rows
            and new.sig.shape[0] == self.padded
        )

    def arg(self, node: Node) -> Node:
        (sig,) = node.sigs
        attributes = dict(node.attr("attributes"))
        vertex = (
            not node.attr("is_param")
            and STATE_ATTR not in attributes
            and sig.rank > 0
            and sig.shape[0] == self.input_rows
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
            rows = _global_edges(_array(self.sets[dst]), _array(dst), node.attr("block_rows"))
            self.orders[dst] = _EdgeOrder(self.layout, self.new_row, *rows)
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
        """A sum or mean over the vertices made a masked sum; None for another op, and
        for every op of a program laid out already (its reductions are masked)."""
        if self.relaying or node.op not in ("reduce", "reduce_grad"):
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
        if node.op in ("ones", "zeros") and shape and shape[0] == self.input_rows:
            attrs["shape"] = (self.padded, *shape[1:])  # a filled vertex tensor (seeds)
        if self.relaying and node.op == "constant" and node.sigs[0].shape[:1] == (self.input_rows,):
            mask = self.rows(_array(node))  # a mask: 0 on the new padding too
            return _constant(mask, node.sigs[0].dtype)
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
    return _Rewriter(dag, layout, np.arange(layout.vertices), relaying=False).run()


def relay_out(dag: Dag, blocks: np.ndarray, layout: VertexLayout) -> Dag:
    """`dag`, laid out already with `blocks` real rows in each block
    (`BLOCKS_ATTR`), laid out anew by `layout`, a partition of those real rows
    numbered in row order (`vertex_of_row`): what `tasoc run --repartition-every`
    does when the learned cost model moves the partition. Equal to `lay_out` of the
    program before its first layout by the composed partition."""
    vertex_of_row = vertex_rows(dag, blocks)
    return _Rewriter(dag, layout, vertex_of_row, relaying=True).run()


def permute_rows(
    array: np.ndarray, layout: VertexLayout, vertex_of_row: np.ndarray | None = None
) -> np.ndarray:
    """A vertex-row argument (features, labels) in the laid-out program's rows, padding
    rows zeros: of the original program (one row per vertex), or of a program laid out
    already whose row `r` holds vertex `vertex_of_row[r]` (-1: padding)."""
    out = np.zeros((layout.devices * layout.block_rows, *array.shape[1:]), array.dtype)
    if vertex_of_row is None:
        out[layout.rows] = array
    else:
        real = vertex_of_row >= 0
        out[layout.rows[vertex_of_row[real]]] = array[real]
    return out


# ------------------------------------------------------------- a laid-out program

BLOCKS_ATTR = "graph.vertex_blocks"
"""The module attribute `search=roc` records: the real vertex rows of each device's
block (`array<i64: ...>`, one per device), the rest of each block's `block_rows` being
padding. With the edge blocks and `block_rows` of the GNN ops it is all a laid-out
program needs to be laid out anew (`relay_out`): which rows are vertices, and their
graph (`blocked_graph`). Not a `parallel.` attribute: the one-device program
(`parallel.unsharded`) keeps its padding, and the record."""


POINTS_ATTR = "graph.roc_cost_points"
"""The module attribute `search=roc partitioner=roc` records beside `BLOCKS_ATTR`: the
learned cost model's points, one `array<f64: ...>` per layer of rows of 5 features
and the seconds (`LayerCostModel.to_arrays`), for `tasoc run --repartition-every` to
go on learning from."""


def vertex_rows(dag: Dag, blocks: np.ndarray) -> np.ndarray:
    """The vertex of each row of a laid-out program whose block `d` holds `blocks[d]`
    real rows first (`layout_of` puts them there), numbered in row order; -1 for
    padding. LayoutError when the record does not fit the program's blocks."""
    block_rows = _block_rows(gnn_nodes(dag))
    blocks = np.asarray(blocks, dtype=np.int64)
    if np.any(blocks < 1) or np.any(blocks > block_rows):
        raise LayoutError(
            f"{BLOCKS_ATTR} {blocks.tolist()} does not fit blocks of {block_rows} rows"
        )
    local = np.arange(block_rows)
    real = (local[None, :] < blocks[:, None]).reshape(-1)
    out = np.full(real.size, -1, dtype=np.int64)
    out[real] = np.arange(int(real.sum()))
    return out


def blocked_graph(dag: Dag, blocks: np.ndarray) -> Csr:
    """The graph of a laid-out program (`BLOCKS_ATTR` `blocks`), its vertices numbered
    as `vertex_rows` numbers its real rows."""
    return _graph(gnn_nodes(dag), vertex_rows(dag, blocks))


def roc_layout(
    dag: Dag, parts: int, partitioner: str, machine: str, seed: int
) -> tuple[Dag, VertexLayout, Csr]:
    """Partition the program's graph and lay the program out by it."""
    graph, part, _ = partition(dag, parts, partitioner, machine, seed)
    layout = layout_of(graph, part)
    return lay_out(dag, layout), layout, graph
