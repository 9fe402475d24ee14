"""`equality-rewrite`: replace a graph by a cheaper, mathematically equal graph.

    tasoc opt model.mlir -p 'equality-rewrite{search=egraph timeout=30}'

The pass converts `@main` to a light `Dag` once, searches over equal graphs with the
proven rules of a rule library (`rules=default`), and writes the cheapest graph found
back into the module. Only proven rules are applied, each in both directions: the
shipped library's as it stands, any other file's once z3 has proven them
(`library.load_library`; proving is not charged to `timeout`). Two searches:
equality saturation with ILP extraction (`egraph/`, the default: on every model of
TASO's evaluation it finds graphs at least as cheap as backtracking's, in less time,
and only its batch chains reach nasrnn's measured CPU speedup) and TASO's backtracking
search (`backtrack.py`, `search=backtrack`). With `split-size`, a large graph is
searched in pieces (`split.py`, MetaFlow's split); with `retime`, the best candidates
are timed end to end under JAX before one is chosen (`retime.py`). The cost is a
`tasoc.cost` model (`cost=analytic` by default).

`timeout` bounds the whole pass, loading the rules and re-timing included (proving a
rule file's rules with z3 on its first load is not charged: `Library.proved_now`): the
search gets `SEARCH_SHARE` of it when candidates are re-timed, re-timing the rest
(`tasoc.passes.search.Deadline`). After the search, its best graph with the
convolution weights laid out once (`weight_layout.py`: HWIO, preprocessed, not
relaid out by XLA on every call) is priced with `LAYOUT_SHARE` of the time left and
taken when the cost model prices it cheaper (`offer_weight_layout`); where re-timing
then has no time to measure anything, the input is returned laid out by that
prediction alone (`_input_laid_out`).
Measuring with `cost=measured` or `cost=xla` (an op or region not in the cache file)
is charged to the search's share too (`tasoc.passes.search.charging`): past it the
search stops, keeps the best graph it priced, and says `stopped: timeout while
measuring`. The pass returns within `timeout` + `TIMEOUT_MARGIN_S`: what can overrun
is one JAX compile of a candidate, or of the input when the search leaves re-timing
less time than that compile takes, one measurement of an op or region begun before
the deadline, and HiGHS's last step past its time limit.

What it decided goes to the run report (`tasoc opt --report r.json`, section
`equality-rewrite`): the keys every search pass writes (`SearchOutcome.write_report`:
predicted cost before and after, search time, why it stopped, the seed), the search's
own figures, and how often each rule was applied. A graph that no rule matches is
returned unchanged, with a note.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from tasoc.cost import (
    AnalyticFallback,
    CostError,
    CostModel,
    OutOfTime,
    make_cost_model,
    prices_this_machine,
)
from tasoc.ir import dag as dag_module
from tasoc.ir.dag import Dag
from tasoc.ir.program import entry_function
from tasoc.ir.rules import Rule, RuleError
from tasoc.ir.training import training_signature
from tasoc.passes.kinds import Kind, PassContract, require
from tasoc.passes.options import (
    check_at_least,
    check_byte_size,
    check_option_types,
    parse_byte_size,
)
from tasoc.passes.report import current_report
from tasoc.passes.rewrite.backtrack import BacktrackLimits, backtracking_search
from tasoc.passes.rewrite.egraph import EGraphLimits, egraph_search
from tasoc.passes.rewrite.library import Library, check_library, load_library
from tasoc.passes.rewrite.match import directed, find_matches
from tasoc.passes.rewrite.retime import CONFIDENCE, REPEATS, keep_measured_fastest
from tasoc.passes.rewrite.split import optimize_in_pieces
from tasoc.passes.rewrite.weight_layout import NAME as WEIGHT_LAYOUT
from tasoc.passes.rewrite.weight_layout import lay_out_conv_weights
from tasoc.passes.search import (
    Deadline,
    SearchOutcome,
    StopReason,
    charging,
    resolve_seed,
    search_progress,
    speedup,
    unpriced,
)
from tasoc.passes.summary import Summary, format_speedup, stop_line

DEFAULT_RETIME = 3
"""Candidates re-timed end to end when `retime` is not given and the cost model prices
the machine the pass runs on (`tasoc.cost.prices_this_machine`): no cost model ranks
XLA's compiled programs exactly, and a graph measured slower than the input must not
be returned. With a model of another device nothing is timed."""

SEARCH_SHARE = 0.75
"""The share of `timeout` the search may use when candidates are re-timed; re-timing
gets the rest, and whatever the search leaves unused."""

TIMEOUT_MARGIN_S = 1.0
"""How far past `timeout` the pass may return (module docstring)."""


LAYOUT_SHARE = 0.5
"""The share of the time the search leaves that pricing the laid-out weights may use
(`offer_weight_layout`) when candidates are re-timed: with `cost=xla` each laid-out
convolution is a region not yet measured, and a search that spent its share
measuring would otherwise leave none for it. Re-timing gets the rest."""

LAYOUT_MARGIN = 1e-9
"""How much cheaper laid-out weights must be predicted to be taken: a model that
prices the layout alike (one of a device that relays out nothing,
`Device.conv_weight_relayout`) differs only by rounding, which must not decide."""


class RewriteError(PassFailedException):
    """A rule library that does not load, or a graph the cost model refuses: one line,
    which the driver prints as `tasoc: error: equality-rewrite: ...`."""

    def __init__(self, message: str) -> None:
        super().__init__(f"equality-rewrite: {message}")


@dataclass(frozen=True)
class EqualityRewritePass(ModulePass):
    """Options (docs/rewrite.md), checked when the pass is built."""

    name: ClassVar[str] = "equality-rewrite"

    contract: ClassVar[PassContract] = PassContract(
        refuses={
            Kind.SHARDED: "the program is sharded; run equality-rewrite before soap-shard "
            "(its rules are proven on unsharded graph ops)",
            Kind.PLACED: "the program is placed; run equality-rewrite before placement (a "
            "rewritten graph would not keep the placement's schedule, swaps and frees)",
        }
    )
    """docs/decisions.md says why sharded and placed programs are refused, not rewritten."""

    search: Literal["egraph", "backtrack"] = "egraph"
    """Equality saturation with ILP extraction, or TASO's backtracking search."""
    timeout: int | float = 30.0
    """Seconds the whole pass may take, re-timing included (> 0)."""
    alpha: int | float = 1.05
    """backtrack: keep a graph costing below alpha x the best found so far (≥ 1)."""
    budget: int = 1000
    """backtrack: graphs expanded at most (> 0)."""
    node_limit: int = EGraphLimits.node_limit
    """egraph: e-nodes at which saturation stops (> 0)."""
    polish: int = EGraphLimits.polish_budget
    """egraph: graphs the polishing backtracking search expands from the extracted one
    (≥ 0; 0: none). Each expansion prices every rewrite of the graph in full, so on a
    training step of hundreds of ops it is most of the search's time."""
    cost: Literal["analytic", "analytic-h100", "analytic-h200", "measured", "xla"] = "analytic"
    """The cost model the search minimizes (`tasoc.cost.make_cost_model`); `xla` falls
    back to `analytic` where JAX cannot time (`tasoc.cost.xla`), and says so."""
    retime: int | None = None
    """Candidates re-timed end to end (≥ 0); by default `DEFAULT_RETIME` where the cost
    model prices this machine, else 0."""
    split_size: int | None = None
    """Search graphs of more ops than this in pieces of at most this many (> 0)."""
    rules: str = "default"
    """A shipped rule library's name (names joined by `+`: `default+layout`), or a rule
    file's path."""
    memory_limit: int | float | str | None = None
    """Bytes (`16GiB`, `1.5e9`, `1024`): a graph whose peak memory exceeds it costs
    infinity."""
    seed: int | None = None
    """Seed of re-timing's random inputs (≥ 0); by default `--seed`."""

    def __post_init__(self) -> None:
        check_option_types(self)
        check_at_least(self, "timeout", 0, exclusive=True)
        check_at_least(self, "alpha", 1)
        for positive in ("budget", "node_limit", "split_size"):
            check_at_least(self, positive, 0, exclusive=True)
        check_at_least(self, "retime", 0)
        check_at_least(self, "polish", 0)
        check_at_least(self, "seed", 0)
        check_byte_size(self, "memory_limit")
        try:
            check_library(self.rules)
        except RuleError as err:
            raise ValueError(f"rules: {err}") from None

    @property
    def memory_limit_bytes(self) -> int | None:
        return None if self.memory_limit is None else parse_byte_size(self.memory_limit)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require(self.contract, op, RewriteError)
        deadline = Deadline.after(self.timeout)
        # A training step's weights change every step: nothing computed from them is
        # computed once, by the cost model, by re-timing or by a layout.
        weights_fixed = training_signature(entry_function(op)) is None
        library, cost_model = self._load(weights_fixed)
        if library.proved_now:  # proving a rule file is not the search's time
            deadline = Deadline.after(self.timeout)
        graph = dag_module.from_module(op)
        rules = directed(library.rules)
        section = current_report().section(self.name)
        section.update(self._settings(library, cost_model))
        if not rules:
            section.update(note=f"no rule of {library.path} is proven; the graph is unchanged")
            return
        layout_offered = weights_fixed and lay_out_conv_weights(graph)[1] > 0
        if not layout_offered and next(find_matches(graph, rules), None) is None:
            section.update(note="no rule matches this graph; it is returned unchanged")
            return
        seed = resolve_seed(self.seed)
        outcome = self._search_and_retime(graph, rules, cost_model, deadline, seed, weights_fixed)
        outcome.write_report(section, seed)
        section.update(
            ops_before=graph.num_ops,
            ops_after=outcome.best.num_ops,
            rules_applied=dict(sorted(outcome.applied.items())),
        )
        if outcome.best != graph:
            dag_module.write_back(op, outcome.best)

    def _load(self, fold_weights: bool) -> tuple[Library, CostModel]:
        try:
            cost_model = make_cost_model(self.cost, self.memory_limit_bytes, fold_weights)
            return load_library(self.rules), cost_model
        except (RuleError, ValueError) as err:
            raise RewriteError(str(err)) from None

    def _settings(self, library: Library, cost_model: CostModel) -> dict[str, Any]:
        fallback = cost_model.reason if isinstance(cost_model, AnalyticFallback) else None
        return {
            "search": self.search,
            "alpha": self.alpha,
            "budget": self.budget,
            "timeout_s": self.timeout,
            "cost_model": cost_model.describe(),
            **({"cost_fallback": fallback} if fallback else {}),
            **library.report(),
        }

    def _search_and_retime(
        self,
        graph: Dag,
        rules: list[Rule],
        cost_model: CostModel,
        deadline: Deadline,
        seed: int,
        weights_fixed: bool,
    ) -> SearchOutcome[Dag]:
        """The search, then (where the weights are fixed: not a training step) the
        convolution weights laid out once offered, then re-timing."""
        retime = self._retime_count(cost_model)
        search_deadline = deadline.share(SEARCH_SHARE if retime > 0 else 1.0)
        try:
            if self.split_size is not None and graph.num_ops > self.split_size:
                outcome = self._search_in_pieces(graph, rules, cost_model, search_deadline)
            else:
                outcome = self._search(graph, rules, cost_model, search_deadline)
            laid_out = None
            if weights_fixed:
                offer_deadline = deadline.share(LAYOUT_SHARE if retime > 0 else 1.0)
                outcome, laid_out = offer_weight_layout(outcome, cost_model, offer_deadline)
        except CostError as err:
            raise RewriteError(str(err)) from None
        if retime > 0 and (outcome.best != graph or laid_out is not None):
            outcome = keep_measured_fastest(outcome, graph, retime, deadline, seed, weights_fixed)
            if laid_out is not None:
                outcome = _layout_kept(outcome, laid_out)
                if not outcome.details["retimed"] and outcome.details["weight_layout"]["taken"]:
                    outcome = _input_laid_out(outcome, graph, cost_model, deadline)
        return outcome

    def _retime_count(self, cost_model: CostModel) -> int:
        if isinstance(cost_model, AnalyticFallback):
            return 0  # nothing can be timed here
        if self.retime is not None:
            return self.retime
        return DEFAULT_RETIME if prices_this_machine(cost_model) else 0

    def _search_in_pieces(
        self, graph: Dag, rules: list[Rule], cost_model: CostModel, deadline: Deadline
    ) -> SearchOutcome[Dag]:
        """MetaFlow's split (`split.optimize_in_pieces`): each piece, then the ops
        around each cut, searched on their own. Bisecting until pieces have at most
        `split_size` ops gives about k = 2^⌈log2(ops / split_size)⌉ pieces and k - 1
        cuts; each search gets an equal share of the time left, and once `deadline`
        has passed the pieces left are put back as they were."""
        assert self.split_size is not None
        searches_left = 2 * 2 ** math.ceil(math.log2(graph.num_ops / self.split_size))
        applied: Counter[str] = Counter()
        skipped = 0
        stops: set[StopReason] = set()

        def optimize(piece: Dag) -> Dag:
            nonlocal searches_left, skipped
            if deadline.expired() or StopReason.MEASURING in stops:
                skipped += 1
                return piece
            share = deadline.share(1 / searches_left)
            searches_left = max(searches_left - 1, 1)
            outcome = self._search(piece, rules, cost_model, share)
            stops.add(outcome.stopped)
            applied.update(outcome.applied)
            return outcome.best

        with charging(cost_model, deadline):
            try:
                split = optimize_in_pieces(
                    graph, rules, self.split_size, optimize, cost=cost_model.cost
                )
                cost_before, cost_after = cost_model.cost(graph), cost_model.cost(split.dag)
            except OutOfTime:
                return unpriced(graph, deadline)
        stopped = (
            StopReason.MEASURING
            if StopReason.MEASURING in stops
            else StopReason.TIMEOUT
            if skipped
            else StopReason.PIECES
        )
        return SearchOutcome(
            best=split.dag,
            cost_before=cost_before,
            cost_after=cost_after,
            seconds=deadline.elapsed(),
            stopped=stopped,
            applied=applied if split.dag != graph else Counter(),
            candidates=sorted({graph: cost_before, split.dag: cost_after}.items(), key=_cost),
            details={
                "pieces": split.pieces,
                "cut_sizes": list(split.cut_sizes),
                "cut_matches_broken": list(split.cut_weights),
            },
        )

    def _search(
        self, graph: Dag, rules: list[Rule], cost_model: CostModel, deadline: Deadline
    ) -> SearchOutcome[Dag]:
        if self.search == "egraph":
            limits = EGraphLimits(node_limit=self.node_limit, polish_budget=self.polish)
            bar = search_progress(self.name, "round", limits.rounds, deadline, "enodes", _count)
            with bar as progress:
                return egraph_search(graph, rules, cost_model, limits, deadline, progress)
        with search_progress(self.name, "graph", self.budget, deadline) as progress:
            limits = BacktrackLimits(self.alpha, self.budget)
            return backtracking_search(graph, rules, cost_model, limits, deadline, progress)

    def summary(self, section: Mapping[str, Any]) -> Summary:
        """The rewrites applied and the predicted speedup, what re-timing measured and
        kept, and how the search stopped (`summary.py`)."""
        fallback = section.get("cost_fallback")
        fell_back = (
            (f"cost=xla: {fallback}; priced with the analytic CPU model",) if fallback else ()
        )
        if "note" in section:
            return Summary(section["note"], fell_back)
        applied = section.get("rules_applied", {})
        rewrites = sum(applied.values())
        if rewrites:
            headline = (
                f"{rewrites} rewrite{'s' * (rewrites > 1)} applied ({len(applied)} "
                f"rule{'s' * (len(applied) > 1)}), ops {section['ops_before']} -> "
                f"{section['ops_after']}, predicted {format_speedup(section['predicted_speedup'])}"
            )
        else:
            headline = f"the graph is unchanged ({section['ops_before']} ops): no rewrite kept"
        details = []
        retimed = section.get("retimed")
        if retimed:
            kept = retimed[0]
            which = (
                "the input"
                if kept["input"]
                else "the search's best"
                if kept["search_best"]
                else "a runner-up"
            )
            measured = section.get("measured_speedup")
            speed = f", measured {format_speedup(measured)} over the input" if measured else ""
            interval = kept.get("speedup_interval")
            if interval is not None:
                speed += f" ({_interval(interval)}, {CONFIDENCE:.0%} interval)"
            best = next((entry for entry in retimed if entry["search_best"]), None)
            if kept["input"] and best is not None and best["speedup_interval"] is not None:
                speed = (
                    f"; the search's best ({best['ops']} ops, predicted "
                    f"{format_speedup(kept['predicted'] / best['predicted'])}) measured "
                    f"{_interval(best['speedup_interval'])} over {REPEATS} paired rounds, "
                    "not significant"
                )
            details.append(f"re-timed {len(retimed)} graphs: kept {which}{speed}")
        layout = section.get("weight_layout")
        by_prediction = layout is not None and layout.get("by_prediction", False)
        if not retimed and retimed is not None:
            details.append(
                f"re-timing measured no candidate against the input in the "
                f"{section.get('retime_seconds', 0):.1f} s left: kept the input"
                + (", its convolution weights laid out as predicted" if by_prediction else "")
            )
        if layout is not None:
            verdict = "taken" if layout["taken"] else "not taken"
            if by_prediction:
                verdict += ", by prediction"
            elif "kept" in layout:
                verdict += f", re-timing {'kept' if layout['kept'] else 'did not keep'} it"
            details.append(
                f"convolution weights laid out once (HWIO, {layout['convolutions']} "
                f"convolutions): predicted {format_speedup(layout['predicted_speedup'])}, {verdict}"
            )
        steps = next(
            (
                f"{section[key]} {unit}"
                for key, unit in (("pieces", "pieces"), ("rounds", "rounds"),
                                  ("graphs_expanded", "graphs expanded"))
                if key in section
            ),
            None,
        )  # fmt: skip
        stopped = stop_line(section, steps)
        if stopped is not None:
            details.append(stopped)
        return Summary(headline, (*fell_back, *details))


def offer_weight_layout(
    outcome: SearchOutcome[Dag], cost_model: CostModel, deadline: Deadline
) -> tuple[SearchOutcome[Dag], Dag | None]:
    """`outcome` with its best graph's convolution weights laid out once
    (`weight_layout.lay_out_conv_weights`) among its candidates, and that graph (None
    where there is none, or it could not be priced in time). It becomes the best when
    the cost model prices it cheaper, counted in `applied` as `conv-weight-layout`;
    either way re-timing may measure it, since a model may not see the relayout
    (`cost=analytic` prices both alike). Reported as `weight_layout` (convolutions,
    predicted speedup, taken by the model). Priced under `deadline`: where measuring
    it runs out of time, the outcome stays, stopped `timeout while measuring`."""
    laid_out, convolutions = lay_out_conv_weights(outcome.best)
    if not convolutions or math.isnan(outcome.cost_after):
        return outcome, None
    with charging(cost_model, deadline):
        try:
            cost = cost_model.cost(laid_out)
        except OutOfTime:
            return replace(outcome, stopped=StopReason.MEASURING), None
    gain = speedup(outcome.cost_after, cost)
    taken = gain is not None and gain > 1 + LAYOUT_MARGIN
    offered = {"convolutions": convolutions, "predicted_speedup": gain, "taken": taken}
    changes: dict[str, Any] = {
        "candidates": sorted([(laid_out, cost), *outcome.candidates], key=_cost),
        "details": {**outcome.details, "weight_layout": offered},
        "seconds": outcome.seconds + deadline.elapsed(),
    }
    if taken:
        changes.update(best=laid_out, cost_after=cost, applied=_with_layout(outcome, convolutions))
    return replace(outcome, **changes), laid_out


def _with_layout(outcome: SearchOutcome[Dag], convolutions: int) -> Counter[str]:
    """`outcome.applied` with the convolutions laid out counted."""
    return outcome.applied + Counter({WEIGHT_LAYOUT: convolutions})


def _layout_kept(outcome: SearchOutcome[Dag], laid_out: Dag) -> SearchOutcome[Dag]:
    """After re-timing: whether it kept the laid-out graph (`weight_layout.kept`), and
    the layout counted in `applied` where it did although the model had not taken it."""
    layout = {**outcome.details["weight_layout"], "kept": outcome.best == laid_out}
    details = {**outcome.details, "weight_layout": layout}
    applied = outcome.applied
    if layout["kept"] and WEIGHT_LAYOUT not in applied:
        applied = _with_layout(outcome, layout["convolutions"])
    return replace(outcome, details=details, applied=applied)


def _input_laid_out(
    outcome: SearchOutcome[Dag], graph: Dag, cost_model: CostModel, deadline: Deadline
) -> SearchOutcome[Dag]:
    """Where re-timing measured nothing against the input (no time left) and so kept
    it, the input with its convolution weights laid out, when the model took the
    layout and prices that graph cheaper than the input: the per-call relayout it
    saves is priced from the weights' bytes (`fusion.relaid_out_weights`), and it was
    measured faster on 13 of 14 CNNs and slower on none (docs/benchmarks.md, issue
    34), while the search's rewrites are kept only when measured faster. Reported
    as `weight_layout.by_prediction`."""
    laid_out, convolutions = lay_out_conv_weights(graph)
    cost = dict(outcome.candidates).get(laid_out)
    if cost is None:
        with charging(cost_model, deadline):
            try:
                cost = cost_model.cost(laid_out)
            except OutOfTime:  # a region to measure, and no time left
                return outcome
    if not cost < outcome.cost_before / (1 + LAYOUT_MARGIN):
        return outcome
    layout = {**outcome.details["weight_layout"], "kept": True, "by_prediction": True}
    return replace(
        outcome,
        best=laid_out,
        cost_after=cost,
        applied=Counter({WEIGHT_LAYOUT: convolutions}),
        details={**outcome.details, "weight_layout": layout},
    )


def _interval(interval: Sequence[float]) -> str:
    """A speedup interval as the summary words it: `0.97-1.04x`."""
    low, high = interval
    return f"{low:.2f}-{high:.2f}x"


def _count(value: float) -> str:
    return str(int(value))


def _cost(candidate: tuple[Dag, float]) -> float:
    return candidate[1]
