"""Does a cost model rank candidate graphs as XLA runs them? Kendall tau per cost model.

For each zoo model (its small variant: a few ms per run on 2 cores) the script draws
candidate graphs the way equality-rewrite's searches meet them: the input, the
graphs the e-graph search (extraction and polishing) and the backtracking search
list as their cheapest under the analytic CPU model, and the graphs a walk of k
random rewrites from the input reaches (the search's intermediate graphs, which
include worse ones: a ranking must tell those apart too). It prices each with
`cost=analytic`, `cost=measured` and `cost=xla`, measures each under `jax.jit`
(interleaved rounds over all candidates of a model, the median of `--repeats`
samples of at least 20 ms each), and prints Kendall's tau between predicted and
measured times per model and over all candidates (`scipy.stats.kendalltau`).

    .venv/bin/python benchmarks/cost_rank.py --markdown

Overall tau pools models whose times differ by orders of magnitude, which any model
ranks; the per-model taus (and their mean) are the ones that tell candidates of one
graph apart. Measured caches (`cost=measured`'s ops, `cost=xla`'s regions) live in
`--cache-dir` (default: tasoc's cache directory), so a second run prices from them.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from importlib.metadata import version

from tasoc.cost import AnalyticCost, CostModel, MeasuredCost, XlaCost
from tasoc.cost.measured import end_to_end_sampler
from tasoc.ir import dag as dag_module
from tasoc.ir.dag import Dag
from tasoc.ir.rules import Rule
from tasoc.models.registry import get_model
from tasoc.passes.rewrite.apply import apply
from tasoc.passes.rewrite.backtrack import BacktrackLimits, backtracking_search
from tasoc.passes.rewrite.egraph import EGraphLimits, egraph_search
from tasoc.passes.rewrite.library import load_library
from tasoc.passes.rewrite.match import directed, find_matches
from tasoc.passes.search import Deadline

MODELS: dict[str, dict[str, int | float]] = {
    "nasrnn": {"hidden": 256, "length": 5},
    "bert": {"layers": 2, "hidden": 128, "heads": 4, "seq": 32},
    "resnext50": {"image": 32, "width": 0.25, "groups": 8, "group_width": 4},
    "nasnet_a": {"size": 16, "filters": 8, "cells": 2},
    "squeezenet": {"image": 64, "width": 0.5},
    "inception_v3": {"image": 75, "width": 0.125},
    "resnet50": {"image": 32, "width": 0.25},
    "vgg19": {"image": 32, "width": 0.25},
}
"""The eight models of TASO's, Tensat's and Constable's evaluations, at shapes that
run in 1-10 ms on the 2-core development machine (the zoo's `small` variants run in
0.1-0.8 ms, where XLA's per-op runtime overhead and the machine's noise swamp what
a rewrite changes; the papers' shapes take seconds per candidate to measure)."""

COSTS = ("analytic", "measured", "xla")

WALK_DEPTHS = (2, 16, 4, 32, 1, 8, 64, 3)
"""Rewrites applied on each random walk from the input, in the order walks are drawn:
short and long ones alternate, so a few walks already give graphs near the input and
far from it."""

MATCHES_CONSIDERED = 200
"""A walk step picks among the first this many matches of the graph."""


@dataclass(frozen=True)
class Candidate:
    """One candidate graph of a model and where it came from."""

    graph: Dag
    origin: str


def random_walk(graph: Dag, rules: Sequence[Rule], depth: int, rng: random.Random) -> Dag:
    """`graph` after up to `depth` rule applications, each drawn at random from the
    first `MATCHES_CONSIDERED` matches that apply."""
    for _ in range(depth):
        matches = []
        for match in find_matches(graph, rules):
            matches.append(match)
            if len(matches) >= MATCHES_CONSIDERED:
                break
        rng.shuffle(matches)
        for match in matches:
            new = apply(graph, match)
            if new is not None and new != graph and new.num_ops <= 1.5 * graph.num_ops + 4:
                graph = new
                break
        else:
            break
    return graph


def draw_candidates(
    graph: Dag, rules: Sequence[Rule], count: int, search_s: float, seed: int
) -> list[Candidate]:
    """Up to `count` distinct candidates of `graph` (module docstring): the input, the
    searches' cheapest (analytic CPU), then random walks of `WALK_DEPTHS` rewrites."""
    analytic = AnalyticCost()
    found: dict[Dag, str] = {graph: "input"}
    egraph = egraph_search(graph, rules, analytic, EGraphLimits(), Deadline.after(search_s))
    for rank, (candidate, _) in enumerate(egraph.candidates):
        found.setdefault(candidate, f"egraph #{rank + 1}")
    backtrack = backtracking_search(
        graph, rules, analytic, BacktrackLimits(budget=50), Deadline.after(search_s)
    )
    for rank, (candidate, _) in enumerate(backtrack.candidates):
        found.setdefault(candidate, f"backtrack #{rank + 1}")
    searched = list(found.items())[: max(count // 2, 1)]
    found = dict(searched)
    rng = random.Random(seed)
    for _ in range(4):
        for depth in WALK_DEPTHS:
            if len(found) >= count:
                break
            found.setdefault(random_walk(graph, rules, depth, rng), f"walk {depth}")
        if len(found) >= count:
            break
    return [Candidate(g, origin) for g, origin in list(found.items())[:count]]


def measure(graphs: Sequence[Dag], repeats: int, seed: int) -> list[list[float]]:
    """`repeats` samples of seconds per run of each graph under `jax.jit`, in
    interleaved rounds (A, B, C, A, B, C, ...)."""
    samplers = [end_to_end_sampler(g, seed=seed) for g in graphs]
    samples: list[list[float]] = [[] for _ in graphs]
    for _ in range(repeats):
        for sample, values in zip(samplers, samples, strict=True):
            values.append(sample())
    return samples


def kendall(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Kendall's tau-b between two lists (nan with fewer than two or no variation)."""
    from scipy.stats import kendalltau

    if len(predicted) < 2:
        return float("nan")
    return float(kendalltau(predicted, measured).statistic)


@dataclass
class ModelResult:
    name: str
    ops: int
    candidates: list[Candidate]
    predicted: dict[str, list[float]]
    samples: list[list[float]]
    seconds: float
    truth: str = "median"
    """Which statistic of a candidate's samples `measured` is: "median" or "fastest"."""

    @property
    def measured(self) -> list[float]:
        pick = statistics.median if self.truth == "median" else min
        return [pick(values) for values in self.samples]

    def tau(self, cost: str) -> float:
        return kendall(self.predicted[cost], self.measured)


def run_model(
    name: str,
    count: int,
    repeats: int,
    search_s: float,
    seed: int,
    models: dict[str, CostModel],
    log: Callable[[str], None],
    small: bool = False,
) -> ModelResult:
    start = time.perf_counter()
    zoo = get_model(name)
    graph = dag_module.from_module(zoo.build(**(zoo.small if small else MODELS[name])))
    rules = directed(load_library("default").rules)
    candidates = draw_candidates(graph, rules, count, search_s, seed)
    log(f"{name}: {len(candidates)} candidates ({graph.num_ops} ops), pricing")
    predicted = {cost: [model.cost(c.graph) for c in candidates] for cost, model in models.items()}
    log(f"{name}: measuring {len(candidates)} candidates x {repeats} rounds")
    samples = measure([c.graph for c in candidates], repeats, seed)
    return ModelResult(
        name, graph.num_ops, candidates, predicted, samples, time.perf_counter() - start
    )


def fmt(value: float) -> str:
    return "n/a" if value != value else f"{value:.2f}"  # nan


def table(results: Sequence[ModelResult], costs: Sequence[str]) -> list[str]:
    """The markdown table: tau per model and cost, the mean of the per-model taus,
    and tau over all candidates pooled."""
    head = ["model", "candidates", "measured range (ms)", *(f"tau {c}" for c in costs)]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in results:
        span = f"{min(r.measured) * 1e3:.3f}-{max(r.measured) * 1e3:.3f}"
        taus = [fmt(r.tau(c)) for c in costs]
        lines.append(f"| `{r.name}` | {len(r.candidates)} | {span} | " + " | ".join(taus) + " |")
    means = [fmt(statistics.mean(r.tau(c) for r in results if r.tau(c) == r.tau(c))) for c in costs]
    lines.append("| mean of models | | | " + " | ".join(means) + " |")
    total = sum(len(r.candidates) for r in results)
    pooled = []
    for c in costs:
        predicted = [p for r in results for p in r.predicted[c]]
        measured = [m for r in results for m in r.measured]
        pooled.append(fmt(kendall(predicted, measured)))
    lines.append(f"| all candidates | {total} | | " + " | ".join(pooled) + " |")
    return lines


def details(results: Sequence[ModelResult], costs: Sequence[str]) -> list[str]:
    """Every candidate: origin, ops, each model's prediction and the measured time (us)."""
    head = ["model", "candidate", "ops", *(f"{c} us" for c in costs), "measured us"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in results:
        for i, c in enumerate(r.candidates):
            cells = [f"{r.predicted[cost][i] * 1e6:.1f}" for cost in costs]
            lines.append(
                f"| `{r.name}` | {c.origin} | {c.graph.num_ops} | "
                + " | ".join(cells)
                + f" | {r.measured[i] * 1e6:.1f} |"
            )
    return lines


def header() -> str:
    load = os.getloadavg()
    return (
        f"- {datetime.date.today()}, {platform.processor() or platform.machine()} "
        f"({os.cpu_count()} cores), Python {platform.python_version()}, "
        f"jax {version('jax')}, xdsl {version('xdsl')}, numpy {version('numpy')}; "
        f"load average at the end {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--per-model", type=int, default=8, help="candidates per model")
    parser.add_argument("--repeats", type=int, default=21, help="interleaved rounds")
    parser.add_argument("--search-seconds", type=float, default=10.0)
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--details", action="store_true", help="every candidate's times")
    parser.add_argument("--small", action="store_true", help="the zoo's small variants")
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown or args.per_model < 2 or args.repeats < 1:
        why = f"unknown model {unknown[0]!r}" if unknown else "--per-model >= 2, --repeats >= 1"
        print(f"cost_rank.py: error: {why}", file=sys.stderr)
        return 1
    models: dict[str, CostModel] = {
        "analytic": AnalyticCost(),
        "measured": MeasuredCost(args.cache_dir),
        "xla": XlaCost(args.cache_dir),
    }

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    results = [
        run_model(
            n, args.per_model, args.repeats, args.search_seconds, args.seed, models, log, args.small
        )
        for n in names
    ]
    lines = table(results, COSTS)
    fastest = [replace(r, truth="fastest") for r in results]
    lines += ["", "Against each candidate's fastest round instead of its median:", ""]
    lines += table(fastest, COSTS)
    if args.details:
        lines += ["", *details(results, COSTS)]
    if args.markdown:
        print(header())
        command = " ".join(sys.argv[1:] if argv is None else argv)
        print(f"- command: benchmarks/cost_rank.py {command}")
        print()
    print("\n".join(lines))
    xla = models["xla"]
    assert isinstance(xla, XlaCost)
    total = sum(r.seconds for r in results)
    print(f"\nregions measured this run: {xla.measured}; {total:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
