"""MetaFlow's flow-based recursive graph split (MetaFlow §4.3, Algorithm 2).

The backtracking search matches every rule against every candidate graph, so its cost
grows with the graph; MetaFlow keeps it affordable on large models by optimizing
pieces of at most `split_size` ops one at a time, stitching them back together and
then searching once more around each splitting point for the rewrites the split hid.
Rewrites are local (a rule's source has a few connected ops), so a split that cuts
where few rule matches sit loses little.

* `match_weights` says how many rule matches hold each op: MetaFlow's `Cap(o)`, what
  cutting next to it may break.
* `partition` splits the graph recursively, each time in two by a minimum cut that
  breaks as few matches and cuts as few values as it can (max-flow/min-cut,
  `scipy.sparse.csgraph.maximum_flow`).
* `tasoc.ir.subgraph` makes a piece a standalone `Dag` (`extract`) and puts an
  optimized version back (`splice_many`).
* `optimize_in_pieces` does it all: partition, optimize each piece, splice, and
  optimize the ops around each cut again (MetaFlow's local search at the splitting
  points); given the whole graph's cost, it keeps only what makes the graph cheaper.

Why every piece can be cut out and put back. Each bisection splits a piece into an
*upper* part closed under producers and a *lower* part closed under consumers, so
every edge between them runs from upper to lower. Then no path leaves a part and comes
back (a path from lower never reaches upper), recursively so for the parts of parts,
and ordering the pieces upper before lower orders them topologically: pieces can be
extracted and replaced in that order without ever creating a cycle.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import breadth_first_order, maximum_flow

from tasoc.cost.fusion import node_info
from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.rules import Rule
from tasoc.ir.subgraph import extract, splice, splice_many
from tasoc.passes.rewrite.match import Match, find_matches

_MAX_CAPACITY = 2**31 - 1
"""scipy's max-flow takes int32 capacities (wider ones are silently truncated)."""


# ------------------------------------------------------------------------- weights

_Site = frozenset[Node]
"""The ops of one match of several ops that hang together (see `_connected`)."""


def match_weights(dag: Dag, rules: Sequence[Rule]) -> dict[Node, int]:
    """For each op of `dag`, how many matches of `rules` hold it with other ops: the
    rewrites a cut next to it may break (MetaFlow's `Cap(o)`, the substitutions that
    use an edge of `o`).

    `rules` are used as given (pass `match.directed` rules, as the search does).
    Matches of one op are never broken, and matches whose ops are unrelated (rules
    batching two independent ops) are broken by any split (`_connected`): neither
    counts.
    """
    counts = Counter(node for site in _sites(dag, rules) for node in site)
    return {node: counts[node] for node in dag.ops}


def _sites(dag: Dag, rules: Sequence[Rule]) -> list[_Site]:
    sites = []
    for match in find_matches(dag, rules):
        nodes = _matched_nodes(match)
        if len(nodes) > 1 and _connected(nodes):
            sites.append(frozenset(nodes))
    return sites


def _matched_nodes(match: Match) -> list[Node]:
    """The ops `match` binds: walking back from its outputs to its bound inputs (a
    matched op reads only bound inputs and values of other matched ops)."""
    bound = set(match.inputs.values())
    found: list[Node] = []
    seen: set[Node] = set()
    stack = [value.node for value in match.outputs if value not in bound]
    while stack:
        node = stack.pop()
        if node in seen or node.is_arg:
            continue
        seen.add(node)
        found.append(node)
        stack.extend(value.node for value in node.inputs if value not in bound)
    return found


def _connected(nodes: Sequence[Node]) -> bool:
    """Whether the matched ops hang together: through an edge, or by reading one value
    that is not a weight.

    Rules that batch two alike ops (`pool(x), pool(y)` -> one pool of `concat(x, y)`,
    two matmuls by one weight -> one matmul of the concatenated rows) match such ops
    however far apart they are, across all the layers or time steps of a model: no
    split into small pieces keeps them, so they weigh nothing anywhere. Two ops reading
    one activation (TASO's fusable matmuls) are neighbours and do weigh.
    """
    reached = {nodes[0]}
    grew = True
    while grew:
        grew = False
        for node in nodes:
            if node not in reached and any(_touch(node, other) for other in reached):
                reached.add(node)
                grew = True
    return len(reached) == len(nodes)


def _touch(a: Node, b: Node) -> bool:
    if any(value.node is b for value in a.inputs) or any(value.node is a for value in b.inputs):
        return True
    return any(_joins(value) for value in set(a.inputs) & set(b.inputs))


def _joins(value: Value) -> bool:
    """Whether two ops reading `value` are neighbours for rewriting: unless it is a
    weight (see `_connected`)."""
    return not (value.node.is_arg and value.node.attr("is_param"))


# ----------------------------------------------------------------------- partition


@dataclass(frozen=True, slots=True)
class _Cut:
    """One bisection: the upper and lower parts (each a piece or split further), the
    upper ops whose results the lower part reads (where the cut runs: one concat at an
    Inception module's end), and how many matches inside the piece it breaks."""

    upper: _Tree
    lower: _Tree
    ops: tuple[Node, ...]
    weight: int


_Tree = tuple[Node, ...] | _Cut


def partition(dag: Dag, rules: Sequence[Rule], split_size: int) -> list[tuple[Node, ...]]:
    """`dag.ops` split into pieces of at most `split_size` ops (Algorithm 2).

    While a piece has more than `split_size` ops it is cut in two by max-flow: an
    upper part closed under producers and a lower part closed under consumers (so
    both stay convex), chosen to minimize the matches inside the piece that the cut
    breaks plus the values it cuts (`_bisect`). That is MetaFlow's minimum cut with op
    capacities `match_weights + 1`, except that each broken match counts once (a
    vertex cut charges a match at every cut op it holds, and misses a matmul pair
    split across the cut through their shared input) and every op, also one that
    reads program inputs only, is placed by the cut rather than by reachability.

    MetaFlow does not say how it keeps the halves balanced. Here the first third of
    the piece's ops in as-late-as-possible topological order is tied to the source
    and the last third to the sink, so each half keeps at least a third, while the
    middle third leaves the cut free to find a natural splitting point (between two
    modules, between an RNN step's projections and its gate tree); among equally good
    cuts the one nearest the middle wins.

    Pieces come in a topological order (upper before lower), each as its ops in
    `dag.ops` order; together they hold every op once, each can be `extract`ed (see
    the module docstring), and the result depends only on the graph and the rules.
    """
    return [leaf for leaf in _leaves(_split_tree(dag, rules, split_size)) if leaf]


def _split_tree(dag: Dag, rules: Sequence[Rule], split_size: int) -> _Tree:
    if split_size < 1:
        raise ValueError(f"split_size must be at least 1, got {split_size}")
    if dag.num_ops <= split_size:
        return dag.ops
    return _split(dag.ops, _sites(dag, rules), split_size)


def _split(nodes: tuple[Node, ...], sites: list[_Site], split_size: int) -> _Tree:
    if len(nodes) <= split_size:
        return nodes
    upper, lower = _bisect(nodes, sites)
    upper_set, lower_set = frozenset(upper), frozenset(lower)
    readers_below = {value.node for node in lower for value in node.inputs}
    boundary = tuple(node for node in upper if node in readers_below)
    return _Cut(
        _split(upper, [site for site in sites if site <= upper_set], split_size),
        _split(lower, [site for site in sites if site <= lower_set], split_size),
        boundary,
        sum(1 for site in sites if not (site <= upper_set or site <= lower_set)),
    )


def _bisect(
    nodes: tuple[Node, ...], sites: Sequence[_Site]
) -> tuple[tuple[Node, ...], tuple[Node, ...]]:
    """(upper, lower) of a piece of at least two ops, by a minimum cut.

    Vertices: one per op, source and sink, and gadgets (Lawler's hyperedge cut) that
    price what a split costs: a vertex per value read inside the piece (capacity one
    unit from its producer, uncuttable edges to its readers: one unit when read across
    the cut) and a pair per match (uncuttable edges from its ops to the first, one unit
    from the first to the second, uncuttable from the second back to its ops: one unit
    when the match is split). An uncuttable edge from each reader to its producer
    keeps the source side closed under producers. Below one unit in all, each middle
    op pays 1 for lying on the far side of the piece's midpoint.
    """
    count = len(nodes)
    pinned = max(1, count // 3)
    index = {node: i for i, node in enumerate(nodes)}
    readers: dict[Value, set[int]] = {}
    for i, node in enumerate(nodes):
        for value in node.inputs:
            if value.node in index:
                readers.setdefault(value, set()).add(i)
    # The position preference stays below one unit while the int32 capacities allow.
    room = (_MAX_CAPACITY // 2 - count) // (len(readers) + len(sites) + 1)
    unit = max(1, min(count - 2 * pinned + 1, room))
    uncuttable = unit * (len(readers) + len(sites)) + count + 1
    source, sink = count, count + 1
    edges: dict[tuple[int, int], int] = {}
    gadget = count + 2
    for value, reading in readers.items():
        producer = index[value.node]
        edges[producer, gadget] = unit
        for reader in sorted(reading):
            edges[gadget, reader] = uncuttable
            edges[reader, producer] = uncuttable
        gadget += 1
    for site in sites:
        edges[gadget, gadget + 1] = unit
        for node in site:
            edges[index[node], gadget] = uncuttable
            edges[gadget + 1, index[node]] = uncuttable
        gadget += 2
    for rank, i in enumerate(_latest_first(nodes, readers)):
        if rank < pinned or rank >= count - pinned:
            edges[(source, i) if rank < pinned else (i, sink)] = uncuttable
        else:
            edges[(source, i) if 2 * rank < count else (i, sink)] = 1
    upper_side = _source_side(edges, gadget, source, sink)[:count]
    upper = tuple(node for node, up in zip(nodes, upper_side, strict=True) if up)
    lower = tuple(node for node, up in zip(nodes, upper_side, strict=True) if not up)
    return upper, lower


def _latest_first(nodes: Sequence[Node], readers: Mapping[Value, set[int]]) -> list[int]:
    """The piece's op indices in as-late-as-possible order: by decreasing length of
    the longest path to the piece's end, then by position.

    A topological order whose prefixes hold each op only as early as its users need
    it, which keeps an RNN step's input projections (which depend on program inputs
    alone) with the step that reads them rather than with the first step.
    """
    remaining = [0] * len(nodes)
    for i in reversed(range(len(nodes))):
        users = (reader for value in nodes[i].results for reader in readers.get(value, ()))
        remaining[i] = max((remaining[user] + 1 for user in users), default=0)
    return sorted(range(len(nodes)), key=lambda i: (-remaining[i], i))


def _source_side(
    edges: Mapping[tuple[int, int], int], vertices: int, source: int, sink: int
) -> np.ndarray:
    """Which vertices lie on the source side of a minimum cut: those the source
    reaches in the residual graph of a maximum flow."""
    tails = np.array([tail for tail, _ in edges])
    heads = np.array([head for _, head in edges])
    capacities = np.fromiter(edges.values(), dtype=np.int32, count=len(edges))
    graph = csr_array((capacities, (tails, heads)), shape=(vertices, vertices))
    flow = maximum_flow(graph, source, sink).flow
    residual = csr_array(graph - flow > 0)
    reached = np.zeros(vertices, dtype=bool)
    reached[breadth_first_order(residual, source, return_predecessors=False)] = True
    return reached


def _leaves(tree: _Tree) -> list[tuple[Node, ...]]:
    if isinstance(tree, _Cut):
        return [*_leaves(tree.upper), *_leaves(tree.lower)]
    return [tree]


@dataclass(frozen=True, slots=True)
class _Span:
    """A cut seen from its leaves: pieces `lo..mid-1` (in `partition` order) are its
    upper part, `mid..hi-1` its lower one."""

    cut: _Cut
    lo: int
    mid: int
    hi: int


def _spans_by_depth(tree: _Tree) -> list[list[_Span]]:
    """Every cut of `tree` as a span, grouped by depth (the root's cut first)."""
    levels: list[list[_Span]] = []

    def visit(node: _Tree, lo: int, depth: int) -> int:
        if not isinstance(node, _Cut):
            return lo + 1
        mid = visit(node.upper, lo, depth + 1)
        hi = visit(node.lower, mid, depth + 1)
        while len(levels) <= depth:
            levels.append([])
        levels[depth].append(_Span(node, lo, mid, hi))
        return hi

    visit(tree, 0, 0)
    return levels


# ------------------------------------------------------------ optimize in pieces


@dataclass(frozen=True)
class SplitResult:
    """What `optimize_in_pieces` did."""

    dag: Dag
    """The optimized graph."""
    pieces: int
    """How many pieces the graph was split into (1: optimized whole)."""
    cut_sizes: tuple[int, ...]
    """For each cut, the ops above it whose results are read below it; the root's
    cut first, then breadth-first."""
    cut_weights: tuple[int, ...]
    """For each cut, the matches it broke among those inside the piece it split (the
    boundary search may recover them), in the same order."""


def optimize_in_pieces(
    dag: Dag,
    rules: Sequence[Rule],
    split_size: int,
    optimize: Callable[[Dag], Dag],
    boundary_radius: int = 2,
    cost: Callable[[Dag], float] | None = None,
) -> SplitResult:
    """`dag` optimized piece by piece (MetaFlow §4.3): `partition`, `optimize` each
    piece, splice them back, then for each cut, deepest first, `optimize` the ops
    around it once more so that rewrites spanning the cut are found.

    The ops around a cut are those within `boundary_radius` edges (either way, among
    the ops the cut separates) of an edge across it or of two ops on either side that
    read one value (a shared-input match). They are made convex by adding the ops on
    paths between them, unless that grows them past both `split_size` and twice their
    own size (a long skip connection across the cut); then the ops that a path from
    them reaches through some other op are left out instead.

    `optimize` gets a standalone `Dag` and must return an equal one with the same
    argument and output types (e.g. the best graph of `backtracking_search`). A piece
    does not see what reads its outputs, so a version cheaper on its own can make the
    whole graph dearer: merging two convolutions saves a launch inside the piece, yet
    the split after the merged one keeps each batchnorm outside from fusing into its
    convolution. Given `cost` (the whole graph's), an optimized piece is put in only
    where it makes the graph cheaper, and the result never costs more than `dag`.
    """
    if boundary_radius < 0:
        raise ValueError(f"boundary_radius must be non-negative, got {boundary_radius}")
    tree = _split_tree(dag, rules, split_size)
    levels = _spans_by_depth(tree)
    if levels:
        leaves = _leaves(tree)
        current, labels = _optimize_regions(dag, {}, leaves, range(len(leaves)), optimize, cost)
        for spans in reversed(levels):
            regions = _boundaries(current, labels, spans, boundary_radius, split_size)
            regions = [region for region in regions if region]
            # A region's ops take one label of its cut's pieces: the cuts above see
            # that whole group on one side, so which one does not matter.
            region_labels = [min(labels[node] for node in region) for region in regions]
            current, labels = _optimize_regions(
                current, labels, regions, region_labels, optimize, cost
            )
    else:
        current = optimize(dag)
    if cost is not None and cost(current) > cost(dag):
        current = dag  # cheaper piece by piece, yet not together: keep the input
    spans = [span for level in levels for span in level]
    return SplitResult(
        current,
        len(spans) + 1,
        tuple(len(span.cut.ops) for span in spans),
        tuple(span.cut.weight for span in spans),
    )


def _optimize_regions(
    dag: Dag,
    labels: Mapping[Node, int],
    regions: Sequence[Iterable[Node]],
    region_labels: Sequence[int],
    optimize: Callable[[Dag], Dag],
    cost: Callable[[Dag], float] | None,
) -> tuple[Dag, dict[Node, int]]:
    """`dag` with each region optimized (where that makes it cheaper, given `cost`),
    and the new ops' labels: a region's ops take its label, the other ops keep theirs
    (`labels` holds the old ops' labels: the leaf piece each came from)."""
    before = math.inf if cost is None else cost(dag)
    replacements = []
    for region in regions:
        piece = extract(dag, region, is_weight=_is_weight)
        optimized = optimize(piece.dag)
        dearer = (
            cost is not None
            and optimized != piece.dag
            and not cost(splice(dag, piece, optimized)) < before
        )
        replacements.append((piece, piece.dag if dearer else optimized))
    new, origin = splice_many(dag, replacements)
    return new, {
        node: region_labels[source] if isinstance(source, int) else labels[source]
        for node, source in origin.items()
    }


def _is_weight(node: Node) -> bool:
    """Whether `node` computes from weights and constants alone: a piece marks the
    argument standing for its result a weight, so the cost model folds it in the piece
    as it does in the whole graph."""
    return node_info(node).weight


def _boundaries(
    dag: Dag, labels: Mapping[Node, int], spans: Sequence[_Span], radius: int, limit: int
) -> list[set[Node]]:
    """The convex sets of ops around the cuts `spans` (disjoint: one depth)."""
    side: dict[int, tuple[int, bool]] = {
        label: (k, label < span.mid)
        for k, span in enumerate(spans)
        for label in range(span.lo, span.hi)
    }
    uses = dag.consumers()
    seeds: list[set[Node]] = [set() for _ in spans]
    for node in dag.ops:
        where = side.get(labels[node])
        if where is None or where[1]:
            continue
        for value in node.inputs:
            siblings = (use.node for use in uses[value]) if _joins(value) else ()
            for other in (value.node, *siblings):
                if not other.is_arg and side.get(labels[other]) == (where[0], True):
                    seeds[where[0]].update((other, node))
    regions = []
    for k, span in enumerate(spans):
        region = _near(dag, seeds[k], radius, labels, range(span.lo, span.hi))
        hull = _hull(dag, region)
        regions.append(hull if len(hull) <= max(limit, 2 * len(region)) else _core(dag, region))
    return regions


def _near(
    dag: Dag, seeds: set[Node], radius: int, labels: Mapping[Node, int], group: range
) -> set[Node]:
    """The ops labelled in `group` within `radius` edges (either way) of `seeds`."""
    uses = dag.consumers()
    region = set(seeds)
    frontier = list(seeds)
    for _ in range(radius):
        step = []
        for node in frontier:
            near = [v.node for v in node.inputs]
            near += [use.node for v in node.results for use in uses.get(v, ())]
            for other in near:
                if not other.is_arg and other not in region and labels[other] in group:
                    region.add(other)
                    step.append(other)
        frontier = step
    return region


def _hull(dag: Dag, region: set[Node]) -> set[Node]:
    """`region` and every op on a path between two of its ops: the least convex set
    holding it."""
    if not region:
        return region
    position = dag.position()
    first = min(position[node] for node in region)
    last = max(position[node] for node in region)
    below = _reach(dag, region, forward=True, bound=last)
    above = _reach(dag, region, forward=False, bound=first)
    return region | (below & above)


def _core(dag: Dag, region: set[Node]) -> set[Node]:
    """`region` less every op of it that a path from it reaches through an op outside
    it: a convex subset, never empty (the region's first op stays)."""
    last = max(dag.position()[node] for node in region)
    escaped = _reach(dag, region, forward=True, bound=last) - region
    return region - _reach(dag, escaped, forward=True, bound=last)


def _reach(dag: Dag, start: Iterable[Node], forward: bool, bound: int) -> set[Node]:
    """Ops strictly after (`forward`) or before `start` along edges, not past
    position `bound` in `dag.ops` (paths between the region's ops stay inside it)."""
    position = dag.position()
    uses = dag.consumers()
    reached: set[Node] = set()
    stack = list(start)
    while stack:
        node = stack.pop()
        if forward:
            nexts = [use.node for v in node.results for use in uses.get(v, ())]
        else:
            nexts = [v.node for v in node.inputs if not v.node.is_arg]
        for other in nexts:
            inside = position[other] <= bound if forward else position[other] >= bound
            if other not in reached and inside:
                reached.add(other)
                stack.append(other)
    return reached
