"""Equality saturation engines: tasoc's own e-graph against `egglog` (issue 5).

    python benchmarks/egraph_engines.py [--workloads nasrnn,chain] [--rounds 5] \
        [--node-limit 20000] [--repeats 5] [--chain-length 6] [--threads 1]

egglog is *not* a tasoc dependency: run this with an interpreter that has both tasoc
and egglog (e.g. a throwaway venv with `pip install egglog` and tasoc on its path);
without egglog the script says so in one line and exits with status 0.

The comparison is only fair on rules both engines can state, so the workload uses the
part of the shipped library (`load_library`, both directions as `directed` gives them)
that egglog can express as plain `rewrite`s: no `$parameters`, no shape terms
(`dim`/`shape`/`dtype`), no `where` preconditions, one output, single-result ops. The
census of what is left out is printed first: it is how much of tasoc's rule language
egglog would need encoded by other means.

What egglog still needs beyond `rewrite` to apply even those rules as tasoc does is
written here by hand, and counts in its time: a shape analysis (a `shape` function
filled by one rule per op, run to a fixed point before each rewrite iteration), and
conditions on each rewrite for what tasoc's matcher checks natively: each rule input
has the rule's rank, and element-wise `add`/`mul` match only operands of one shape.
Target type checks (tasoc skips a target that does not type-check) are not encoded;
none fails on these workloads, which the equal e-graph sizes confirm.

Each repeat builds both engines from scratch (tasoc's plan cache cleared, a new
egglog `EGraph`), engines alternating first; the figures are medians. Saturation is
`--rounds` iterations of match-all-then-apply-all (the same semantics in both), stopped
early when a round changes nothing or the e-graph holds `--node-limit` e-nodes
(checked between iterations for egglog, between applications for tasoc). Extraction
is greedy bottom-up by tree cost in both (tasoc's `extract.greedy`, egglog's `tree`
extractor), plus egglog's `greedy-dag` (tasoc's "dag cost" is the DAG size of its
tree-greedy choice); costs count AST nodes as egglog's default cost does (an argument
and its name string count two). Equal sizes and costs in both rows check the encoding.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tasoc.ir.builder import GraphBuilder
from tasoc.ir.dag import Dag, Value, from_module
from tasoc.ir.rules import (
    SAME_SHAPE_OPERANDS,
    AttrTerm,
    Dim,
    DTypeOf,
    Param,
    Pattern,
    Rule,
    ShapeOf,
)
from tasoc.models import build_model
from tasoc.passes.rewrite.egraph.egraph import ARGUMENT, ClassId, EGraph, ENode
from tasoc.passes.rewrite.egraph.extract import children_first, greedy
from tasoc.passes.rewrite.egraph.saturate import SaturationLimits, saturate
from tasoc.passes.rewrite.library import load_library
from tasoc.passes.rewrite.match import compile_plan, directed

DAG_EXTRACT_TREE_LIMIT = 5_000_000
"""egglog's `greedy-dag` extractor is skipped above this tree cost: its time and memory
grow with it (nasrnn at 5, 6, 7, 8 steps: 0.03 s, 0.17 s, 2.1 s, then a failed 7 GB
allocation), where tasoc's greedy choice and its DAG cost stay linear in the e-graph."""

UNARY = ("relu", "tanh", "sigmoid")
BINARY = ("add", "mul", "scale", "matmul")
ENCODED = frozenset({*UNARY, *BINARY, "transpose", "concat"})
"""Ops with an egglog constructor and shape rule here; others enter as opaque terms."""

# ------------------------------------------------------------------ the rule census


def _features(rule: Rule) -> set[str]:
    """What in `rule` a plain egglog `rewrite` cannot state."""
    found: set[str] = set()
    for pattern in (rule.src, rule.tgt):
        for op in pattern.ops:
            for _, term in op.attrs:
                found |= {_TERM_KINDS[type(t)] for t in _leaves(term) if type(t) in _TERM_KINDS}
            if len(op.results) > 1:
                found.add("multi-result op")
    if rule.preconditions:
        found.add("where")
    if len(rule.src.outputs) > 1:
        found.add("multi-output")
    return found


_TERM_KINDS = {Param: "$param", Dim: "dim()", ShapeOf: "shape()", DTypeOf: "dtype()"}


def _leaves(term: AttrTerm) -> Iterable[AttrTerm]:
    if isinstance(term, tuple):
        for item in term:
            yield from _leaves(item)
    elif isinstance(term, Dim) and isinstance(term.axis, Param):
        yield term
        yield term.axis
    else:
        yield term


def _ops(rule: Rule) -> set[str]:
    return {op.op for pattern in (rule.src, rule.tgt) for op in pattern.ops}


@dataclass
class Census:
    proven: int
    directed: int
    features: Counter[str]
    """Directed rules using each feature (a rule may count under several)."""
    plain: list[Rule]
    """Directed rules with none of them."""
    encoded: list[Rule]
    """Plain rules over `ENCODED` ops only: the workload's rule set."""

    def lines(self) -> list[str]:
        kinds = ", ".join(f"{name} {count}" for name, count in self.features.most_common())
        return [
            f"library: {self.proven} proven rules, {self.directed} directed",
            f"  plain (egglog `rewrite` as is): {len(self.plain)} of {self.directed}"
            f" ({100 * len(self.plain) / self.directed:.0f}%)",
            f"  the others use: {kinds}",
            f"  plain and over ops with an egglog shape rule here: {len(self.encoded)}"
            f" (left out: {', '.join(sorted(set().union(*map(_ops, self.plain)) - ENCODED))})",
        ]


def census() -> Census:
    library = load_library()
    rules = directed(library.rules)
    features: Counter[str] = Counter()
    plain = []
    for rule in rules:
        found = _features(rule)
        features.update(found)
        if not found:
            plain.append(rule)
    encoded = [rule for rule in plain if _ops(rule) <= ENCODED]
    return Census(len(library.rules), len(rules), features, plain, encoded)


# ---------------------------------------------------------------------- workloads


def chain(length: int, size: int = 64) -> Dag:
    """`x @ W0 @ W1 ...` with `x @ V_i` added after every second matmul: associativity
    and transposition rules grow it without bound, unlike the zoo's RNN cells."""
    g = GraphBuilder()
    x = g.input("x", (size, size))
    h = x
    for i in range(length):
        h = g.matmul(h, g.param(f"w{i}", (size, size)))
        if i % 2:
            h = g.add(h, g.matmul(x, g.param(f"v{i}", (size, size))))
    return from_module(g.build(h))


def workload(name: str, chain_length: int) -> Dag:
    return chain(chain_length) if name == "chain" else from_module(build_model(name))


# ----------------------------------------------------------------- measurements


@dataclass
class Run:
    setup_s: float
    """Rules made ready to match: tasoc's plans, egglog's rewrites lowered and compiled."""
    load_s: float
    saturate_s: float
    rounds: int
    stopped: str
    enodes: int
    eclasses: int
    tree_s: float
    tree_cost: float
    dag_s: float = math.nan
    dag_cost: float = math.nan


@dataclass
class Series:
    runs: list[Run] = field(default_factory=list)

    def median(self, key: str) -> float:
        return statistics.median(getattr(run, key) for run in self.runs)


def ast_cost(cid: ClassId, enode: ENode) -> float:
    """egglog's default cost of the term: 1 a constructor, 1 an argument's name."""
    return 2.0 if enode[0] == ARGUMENT else 1.0


def tree_cost(choice: dict[ClassId, ENode], root: ClassId) -> float:
    memo: dict[ClassId, float] = {}
    order = children_first(choice, [root])
    for cid in order:
        enode = choice[cid]
        memo[cid] = ast_cost(cid, enode) + sum(memo[c] for c in enode[2])
    return memo[root]


def run_tasoc(dag: Dag, rules: list[Rule], rounds: int, node_limit: int) -> Run:
    compile_plan.cache_clear()
    start = time.perf_counter()
    for rule in rules:
        compile_plan(rule)
    ready = time.perf_counter()
    egraph = EGraph()
    roots, _ = egraph.add_dag(dag)
    loaded = time.perf_counter()
    limits = SaturationLimits(node_limit=node_limit, rounds=rounds, multi_rounds=0)
    result = saturate(egraph, rules, limits, deadline=math.inf)
    saturated = time.perf_counter()
    choice = greedy(egraph.classes, ast_cost)
    extracted = time.perf_counter()
    roots = [egraph.find(root) for root in roots]
    used = children_first(choice, roots)
    return Run(
        setup_s=ready - start,
        load_s=loaded - ready,
        saturate_s=saturated - loaded,
        rounds=result.rounds,
        stopped=result.stopped,
        enodes=egraph.num_nodes,
        eclasses=egraph.num_classes,
        tree_s=extracted - saturated,
        tree_cost=sum(tree_cost(choice, root) for root in roots),
        dag_cost=sum(ast_cost(cid, choice[cid]) for cid in used),
    )


# ------------------------------------------------------------- the egglog encoding


def egglog_language() -> SimpleNamespace:
    """The `Tensor` sort, its `shape` analysis and the shape rules (defined here, not at
    module level, so that the script imports without egglog)."""
    from egglog import (
        Expr,
        StringLike,
        Vec,
        eq,
        function,
        i64,
        i64Like,
        rule,
        ruleset,
        set_,
        vars_,
    )

    class Tensor(Expr, egg_sort="TasocTensor"):
        def __init__(self, name: StringLike) -> None: ...

        @classmethod
        def opaque(cls, key: StringLike, args: Vec[Tensor]) -> Tensor: ...

        @classmethod
        def relu(cls, a: Tensor) -> Tensor: ...

        @classmethod
        def tanh(cls, a: Tensor) -> Tensor: ...

        @classmethod
        def sigmoid(cls, a: Tensor) -> Tensor: ...

        @classmethod
        def add(cls, a: Tensor, b: Tensor) -> Tensor: ...

        @classmethod
        def mul(cls, a: Tensor, b: Tensor) -> Tensor: ...

        @classmethod
        def scale(cls, a: Tensor, b: Tensor) -> Tensor: ...

        @classmethod
        def matmul(cls, a: Tensor, b: Tensor) -> Tensor: ...

        @classmethod
        def transpose(cls, a: Tensor, perm: Vec[i64]) -> Tensor: ...

        @classmethod
        def concat(cls, a: Tensor, b: Tensor, axis: i64Like) -> Tensor: ...

    @function(merge=lambda old, new: old)
    def shape(t: Tensor) -> Vec[i64]: ...

    a, b, e = vars_("a b e", Tensor)
    sa, sb = vars_("sa sb", Vec[i64])
    (k,) = vars_("k", i64)
    last = sa.length() - 1
    shapes = ruleset(
        *(
            rule(e == getattr(Tensor, op)(a), shape(a) == sa).then(set_(shape(e)).to(sa))
            for op in UNARY
        ),
        *(
            rule(e == getattr(Tensor, op)(a, b), shape(a) == sa, shape(b) == sa).then(
                set_(shape(e)).to(sa)
            )
            for op in ("add", "mul")
        ),
        rule(e == Tensor.scale(a, b), shape(a) == sa, shape(b) == Vec[i64].empty()).then(
            set_(shape(e)).to(sa)
        ),
        rule(
            e == Tensor.matmul(a, b),
            shape(a) == sa,
            shape(b) == sb,
            sa.length() == sb.length(),
            sa[last] == sb[last - 1],
        ).then(set_(shape(e)).to(sa.set(last, sb[last]))),
        rule(
            e == Tensor.concat(a, b, k),
            shape(a) == sa,
            shape(b) == sb,
            sa.length() == sb.length(),
            sa.set(k, sb[k]) == sb,
        ).then(set_(shape(e)).to(sa.set(k, sa[k] + sb[k]))),
        name="shapes",
    )

    def vec(items: Sequence[int]) -> Any:
        return Vec[i64](*map(i64, items)) if items else Vec[i64].empty()

    def transpose_shape(perm: Sequence[int]) -> Any:
        """The shape rule of one permutation (egglog has no generic gather of a Vec)."""
        return rule(
            e == Tensor.transpose(a, vec(perm)), shape(a) == sa, eq(sa.length()).to(i64(len(perm)))
        ).then(set_(shape(e)).to(Vec[i64](*(sa[p] for p in perm))))

    return SimpleNamespace(
        Tensor=Tensor, shape=shape, shapes=shapes, vec=vec, transpose_shape=transpose_shape
    )


def encode_op(lang: SimpleNamespace, op: str, attrs: dict[str, Any], args: list[Any]) -> Any:
    """The egglog term of `op` on `args`, or None where it has no constructor here."""
    tensor = lang.Tensor
    if (op in UNARY and len(args) == 1) or (op in BINARY and len(args) == 2):
        return getattr(tensor, op)(*args)
    if op == "transpose":
        return tensor.transpose(args[0], lang.vec(attrs["perm"]))
    if op == "concat" and len(args) == 2:
        return tensor.concat(args[0], args[1], attrs["axis"])
    return None


def encode_rule(lang: SimpleNamespace, rule: Rule) -> Any:
    """`rule` as an egglog `rewrite`, with tasoc's matcher checks as conditions."""
    from egglog import eq, i64, rewrite, var

    inputs = {i.name: var(i.name, lang.Tensor) for i in rule.inputs}
    src = _encode_pattern(lang, rule.src, inputs)
    tgt = _encode_pattern(lang, rule.tgt, inputs)
    conditions = [eq(lang.shape(inputs[i.name]).length()).to(i64(i.rank)) for i in rule.inputs]
    conditions += [
        eq(lang.shape(src[op.operands[0]])).to(lang.shape(src[op.operands[1]]))
        for op in rule.src.ops
        if op.op in SAME_SHAPE_OPERANDS
    ]
    (output,) = rule.src.outputs
    (target,) = rule.tgt.outputs
    return rewrite(src[output]).to(tgt[target], *conditions)


def _encode_pattern(lang: SimpleNamespace, pattern: Pattern, inputs: dict[str, Any]) -> dict:
    values = dict(inputs)
    for op in pattern.ops:
        term = encode_op(lang, op.op, dict(op.attrs), [values[name] for name in op.operands])
        assert term is not None, f"{op.op} has no egglog constructor"
        (result,) = op.results
        values[result] = term
    return values


def encode_graph(lang: SimpleNamespace, dag: Dag, egraph: Any) -> list[Any]:
    """Add `dag` to `egraph`, every value's shape set; the terms of its outputs. Each
    value is `let`-bound, so a term refers to its operands by name: the Python API
    lowers a nested term by walking it, shared operands once per use (4-14 s for
    nasrnn's 252 values, instead of 0.2-0.4 s)."""
    from egglog import Vec, set_

    terms: dict[Value, Any] = {}
    shapes = []
    for node in (*dag.args, *dag.ops):  # `ops` is in topological order
        if node.op == ARGUMENT:
            made = [lang.Tensor(f"{node.attr('index')}:{node.attr('name')}")]
        else:
            args = [terms[value] for value in node.inputs]
            term = encode_op(lang, node.op, dict(node.attrs), args)
            key = f"{node.op}{node.attrs}"
            made = (
                [term]
                if term is not None and len(node.sigs) == 1
                else [lang.Tensor.opaque(f"{key}#{i}", Vec(*args)) for i in range(len(node.sigs))]
            )
        for index, term in enumerate(made):
            bound = egraph.let(f"v{len(terms)}", term)
            terms[Value(node, index)] = bound
            shapes.append(set_(lang.shape(bound)).to(lang.vec(node.sigs[index].shape)))
    egraph.register(*shapes)
    return [terms[value] for value in dag.outputs]


@dataclass
class EgglogWorkload:
    """What is encoded once per workload (like tasoc's parsed rules): the rewrites and
    the shape rules of the permutations they and the graph use."""

    lang: SimpleNamespace
    rewrites: Any
    shapes: Any


def egglog_workload(lang: SimpleNamespace, dag: Dag, rules: list[Rule]) -> EgglogWorkload:
    from egglog import ruleset

    perms = {
        op.attr("perm")
        for rule in rules
        for pattern in (rule.src, rule.tgt)
        for op in pattern.ops
        if op.op == "transpose"
    } | {node.attr("perm") for node in dag.ops if node.op == "transpose"}
    shapes = ruleset(*(lang.transpose_shape(perm) for perm in sorted(perms)), name="perms")
    rewrites = ruleset(*(encode_rule(lang, rule) for rule in rules), name="rewrites")
    return EgglogWorkload(lang, rewrites, shapes)


def run_egglog(work: EgglogWorkload, dag: Dag, rounds: int, node_limit: int, threads: int) -> Run:
    from egglog import EGraph as EgglogGraph
    from egglog import run

    start = time.perf_counter()
    egraph = EgglogGraph()
    egraph.set_num_threads(threads)
    analysis = (run(work.lang.shapes) + run(work.shapes)).saturate()
    egraph.run(analysis + run(work.rewrites))  # on the empty e-graph: compiles the rules
    ready = time.perf_counter()
    outputs = encode_graph(work.lang, dag, egraph)
    loaded = time.perf_counter()
    done, stopped = 0, "rounds"
    while done < rounds:
        egraph.run(analysis)
        report = egraph.run(run(work.rewrites))
        done += 1
        if not report.updated:
            stopped = "saturated"
            break
        if _egglog_nodes(egraph, work.lang) >= node_limit:
            stopped = "node limit"
            break
    egraph.run(analysis)
    saturated = time.perf_counter()
    tree = [egraph.extract(term, include_cost=True)[1] for term in outputs]
    extracted = time.perf_counter()
    dag_s = dag_cost = math.nan
    if sum(tree) <= DAG_EXTRACT_TREE_LIMIT:
        dag_cost = sum(
            egraph.extract(term, include_cost=True, extractor="greedy-dag")[1] for term in outputs
        )
        dag_s = time.perf_counter() - extracted
    enodes, eclasses = _egglog_size(egraph)
    return Run(
        setup_s=ready - start,
        load_s=loaded - ready,
        saturate_s=saturated - loaded,
        rounds=done,
        stopped=stopped,
        enodes=enodes,
        eclasses=eclasses,
        tree_s=extracted - saturated,
        tree_cost=sum(tree),
        dag_s=dag_s,
        dag_cost=dag_cost,
    )


def _egglog_nodes(egraph: Any, lang: SimpleNamespace) -> int:
    """E-nodes: rows of the `Tensor` constructors (the `shape` table is the analysis)."""
    total = sum(size for _, size in egraph.all_function_sizes())
    return total - egraph.function_size(lang.shape)


def _egglog_size(egraph: Any) -> tuple[int, int]:
    """(e-nodes, e-classes) of the `Tensor` sort. Classes are distinct canonical outputs
    of the constructor rows; the public API has no count of them, so this reads the
    frozen tables of the binding (`EGraph._egraph`)."""
    frozen = egraph._egraph.freeze()
    rows = [
        row
        for fn in frozen.functions.values()
        if fn.output_sort == "TasocTensor" and not fn.is_let_binding
        for row in fn.rows
        if not row.subsumed
    ]
    return len(rows), len({row.output for row in rows})


# ------------------------------------------------------------------------- report

COLUMNS: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("setup s", "setup_s", "{:.4f}".format),
    ("load s", "load_s", "{:.4f}".format),
    ("saturate s", "saturate_s", "{:.4f}".format),
    ("e-nodes", "enodes", "{:.0f}".format),
    ("e-classes", "eclasses", "{:.0f}".format),
    ("tree extract s", "tree_s", "{:.4f}".format),
    ("tree cost", "tree_cost", "{:.0f}".format),
    ("dag extract s", "dag_s", "{:.4f}".format),
    ("dag cost", "dag_cost", "{:.0f}".format),
)


def table(rows: list[tuple[str, str, Series]]) -> list[str]:
    header = ["workload", "engine", "rounds", "stopped", *(name for name, _, _ in COLUMNS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, engine, series in rows:
        last = series.runs[-1]
        cells = [name, engine, str(last.rounds), last.stopped]
        for _, key, fmt in COLUMNS:
            median = series.median(key)
            cells.append("-" if math.isnan(median) else fmt(median))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="nasrnn,chain")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--node-limit", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chain-length", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1, help="egglog worker threads")
    args = parser.parse_args(argv)
    try:
        import egglog  # noqa: F401
    except ImportError:
        print("egraph_engines: egglog is not installed (it is not a tasoc dependency); skipped")
        return 0
    found = census()
    print("\n".join(found.lines()))
    print(
        f"egglog {version('egglog')}, {args.threads} thread(s); rounds {args.rounds}, "
        f"node limit {args.node_limit}, {args.repeats} repeats; "
        f"load average before {os.getloadavg()[0]:.2f}"
    )
    lang = egglog_language()
    rows: list[tuple[str, str, Series]] = []
    for name in args.workloads.split(","):
        dag = workload(name, args.chain_length)
        work = egglog_workload(lang, dag, found.encoded)
        ours, theirs = Series(), Series()
        for repeat in range(args.repeats):
            for engine in ("tasoc", "egglog")[:: 1 if repeat % 2 == 0 else -1]:
                if engine == "tasoc":
                    ours.runs.append(run_tasoc(dag, found.encoded, args.rounds, args.node_limit))
                else:
                    theirs.runs.append(
                        run_egglog(work, dag, args.rounds, args.node_limit, args.threads)
                    )
        label = f"{name} ({dag.num_ops} ops)"
        rows += [(label, "tasoc", ours), (label, "egglog", theirs)]
    print("\n".join(table(rows)))
    print(f"load average after {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
