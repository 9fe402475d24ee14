"""`equality-rewrite`: replace a graph by a cheaper, mathematically equal graph.

    tasoc opt model.mlir -p 'equality-rewrite{search=egraph timeout=30}'

The pass converts `@main` to a light `Dag` once, searches over equal graphs with the
proven rules of a rule library (`rules=default`), and writes the cheapest graph found
back into the module. Only proven rules with a current proof are applied
(`library.load_library`), each in both directions. Two searches: equality saturation
with ILP extraction (`egraph/`, the default: on every model of TASO's evaluation it
finds graphs at least as cheap as backtracking's, in less time, and only its batch
chains reach nasrnn's measured CPU speedup) and TASO's backtracking search
(`search.py`, `search=backtrack`). With `split-size`, a large graph is searched in
pieces (`split.py`, MetaFlow's split); with `retime`, the best candidates are timed
end to end under JAX before one is chosen (`retime.py`). The cost is a `tasoc.cost` model
(`cost=analytic` by default).

What it decided goes to the run report (`tasoc opt --report r.json`, section
`equality-rewrite`): predicted cost before and after, search time, the search's own
figures, why it stopped, and how often each rule was applied. A graph that no rule
matches is returned unchanged, with a note.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from tasoc.cost import CostError, CostModel, make_cost_model, prices_this_machine
from tasoc.ir import dag as dag_module
from tasoc.ir.dag import Dag
from tasoc.ir.rules import Rule, RuleError
from tasoc.passes.progress import progress_bar
from tasoc.passes.report import current_report
from tasoc.passes.rewrite.egraph import EGraphLimits, egraph_search
from tasoc.passes.rewrite.library import load_library
from tasoc.passes.rewrite.match import directed, find_matches
from tasoc.passes.rewrite.retime import retime
from tasoc.passes.rewrite.search import SearchLimits, SearchResult, backtracking_search
from tasoc.passes.rewrite.split import optimize_in_pieces

SEARCHES = ("backtrack", "egraph")
"""The search strategies this pass offers."""

MIN_PIECE_SECONDS = 0.5
"""The least time a piece's search gets, when the split has used up the timeout."""

DEFAULT_RETIME = 3
"""Candidates re-timed end to end when `retime` is not given and the cost model prices
the machine the pass runs on (`tasoc.cost.prices_this_machine`): no cost model ranks
XLA's compiled programs exactly, and a graph measured slower than the input must not
be returned. With a model of another device nothing is timed."""


class RewriteError(PassFailedException):
    """A bad option, cost model or rule library: one line, which the driver prints as
    `tasoc: error: equality-rewrite: ...`."""

    def __init__(self, message: str) -> None:
        super().__init__(f"equality-rewrite: {message}")


@dataclass(frozen=True)
class EqualityRewritePass(ModulePass):
    """Options (docs/rewrite.md): `search` (`backtrack` or `egraph`), `timeout`
    (seconds), `alpha` and `budget` (backtracking's relaxation and graphs expanded),
    `node_limit` (e-nodes saturation stops at), `cost` (a `make_cost_model` name),
    `retime` (candidates re-timed end to end; default 3 when the cost model prices this
    machine, else 0), `split_size` (search graphs of more ops in pieces), `rules` (a
    shipped library or a rule file), `memory_limit` (bytes; graphs over it cost
    infinity)."""

    name: ClassVar[str] = "equality-rewrite"

    alpha: int | float = 1.05
    budget: int = 1000
    timeout: int | float = 30.0
    search: str = "egraph"
    cost: str = "analytic"
    rules: str = "default"
    memory_limit: int | None = None
    node_limit: int = EGraphLimits.node_limit
    retime: int | None = None
    split_size: int | None = None

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self._check_options()
        try:
            library = load_library(self.rules)
            cost_model = make_cost_model(self.cost, self.memory_limit)
        except (RuleError, ValueError) as err:
            raise RewriteError(str(err)) from None
        graph = dag_module.from_module(op)
        rules = directed(library.rules)
        section = current_report().section(self.name)
        section.update(
            rules=str(library.path),
            rules_loaded=len(library.rules),
            rules_not_proven=len(library.unproven),
            cost_model=cost_model.describe(),
        )
        if next(find_matches(graph, rules), None) is None:
            section.update(note="no rule matches this graph; it is returned unchanged")
            return
        try:
            if self.split_size is not None and graph.num_ops > self.split_size:
                result = self._search_in_pieces(graph, rules, cost_model)
            else:
                result = self._search(graph, rules, cost_model, self.timeout)
        except CostError as err:
            raise RewriteError(str(err)) from None
        best, cost_after, applied = result.best, result.cost_after, result.applied
        retime_count = self._retime_count(cost_model)
        if retime_count > 0 and best != graph:
            timed = retime(graph, result.cost_before, result.candidates, retime_count)
            kept = timed[0]
            if kept.graph == graph:
                applied = Counter()
            best, cost_after = kept.graph, kept.predicted
            section.update(
                retimed=[
                    {"ops": t.graph.num_ops, "predicted": t.predicted, "measured_s": t.measured_s,
                     "wins": t.wins, "input": t.graph == graph,
                     "search_best": t.graph == result.best}
                    for t in timed
                ],
            )  # fmt: skip
        section.update(
            search=self.search,
            alpha=self.alpha,
            budget=self.budget,
            timeout_s=self.timeout,
            cost_before=result.cost_before,
            cost_after=cost_after,
            predicted_speedup=result.cost_before / cost_after if cost_after > 0 else None,
            ops_before=graph.num_ops,
            ops_after=best.num_ops,
            search_seconds=round(result.seconds, 3),
            stopped=result.stopped,
            **result.details,
            rules_applied=dict(sorted(applied.items())),
        )
        if best != graph:
            _replace_body(op, dag_module.to_module(best))

    def _retime_count(self, cost_model: CostModel) -> int:
        if self.retime is not None:
            return self.retime
        return DEFAULT_RETIME if prices_this_machine(cost_model) else 0

    def _search_in_pieces(
        self, graph: Dag, rules: list[Rule], cost_model: CostModel
    ) -> SearchResult:
        """MetaFlow's split (`split.optimize_in_pieces`): each piece, then the ops
        around each cut, searched on their own. Bisecting until pieces have at most
        `split_size` ops gives about k = 2^⌈log2(ops / split_size)⌉ pieces and k - 1
        cuts; each search gets an equal share of the time left."""
        start = time.perf_counter()
        deadline = start + self.timeout
        pieces = 2 ** math.ceil(math.log2(graph.num_ops / self.split_size))
        searches_left = 2 * pieces
        applied: Counter[str] = Counter()

        def optimize(piece: Dag) -> Dag:
            nonlocal searches_left
            share = (deadline - time.perf_counter()) / max(searches_left, 1)
            searches_left -= 1
            result = self._search(piece, rules, cost_model, max(share, MIN_PIECE_SECONDS))
            applied.update(result.applied)
            return result.best

        split = optimize_in_pieces(graph, rules, self.split_size, optimize, cost=cost_model.cost)
        cost_before, cost_after = cost_model.cost(graph), cost_model.cost(split.dag)
        return SearchResult(
            best=split.dag,
            cost_before=cost_before,
            cost_after=cost_after,
            seconds=time.perf_counter() - start,
            stopped="pieces searched",
            applied=applied if split.dag != graph else Counter(),
            candidates=sorted({graph: cost_before, split.dag: cost_after}.items(), key=_cost),
            details={
                "pieces": split.pieces,
                "cut_sizes": list(split.cut_sizes),
                "cut_matches_broken": list(split.cut_weights),
            },
        )

    def _search(
        self, graph: Dag, rules: list[Rule], cost_model: CostModel, timeout: float
    ) -> SearchResult:
        if self.search == "egraph":
            limits = EGraphLimits(node_limit=self.node_limit)
            with progress_bar(self.name, "round", limits.rounds, delay=1.0) as update:
                return egraph_search(
                    graph, rules, cost_model, limits, timeout,
                    lambda rounds, enodes: update(rounds, enodes=enodes),
                )  # fmt: skip
        limits = SearchLimits(self.alpha, self.budget, timeout)
        with progress_bar(self.name, "graph", self.budget, delay=1.0) as update:
            return backtracking_search(
                graph, rules, cost_model, limits,
                lambda expanded, best: update(expanded, best=f"{best:.3g}"),
            )  # fmt: skip

    def _check_options(self) -> None:
        if self.search not in SEARCHES:
            raise RewriteError(f"unknown search '{self.search}' (available: {', '.join(SEARCHES)})")
        if not self.alpha >= 1.0:
            raise RewriteError(f"alpha must be at least 1, got {self.alpha}")
        if self.budget < 1 or self.timeout <= 0:
            raise RewriteError("budget and timeout must be positive")
        if self.split_size is not None and self.split_size < 1:
            raise RewriteError(f"split-size must be positive, got {self.split_size}")
        if self.node_limit < 1:
            raise RewriteError(f"node-limit must be positive, got {self.node_limit}")
        if self.retime is not None and self.retime < 0:
            raise RewriteError(f"retime must not be negative, got {self.retime}")


def _replace_body(module: ModuleOp, new: ModuleOp) -> None:
    """Move `new`'s ops into `module` in place of its own (a pass edits its module)."""
    block = module.body.block
    for old in list(block.ops):
        old.detach()
        old.erase()
    for moved in list(new.body.block.ops):
        moved.detach()
        block.add_op(moved)


def _cost(candidate: tuple[Dag, float]) -> float:
    return candidate[1]
