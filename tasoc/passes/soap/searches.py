"""The table of soap searches, and the baselines every search starts from.

`soap-shard{search=NAME}` takes a named strategy (`strategies.STRATEGIES`: what a
practitioner prescribes) or a search of this table; `compare=` takes the searches
marked `comparable`. Both lists are read from the tables when the pass is built, so a
search added here is an option at once:

    def search_mine(problem: SoapProblem, starts: Mapping[str, Plan], limits: Limits):
        plan = ...                                   # a plan of problem.program
        state = problem.simulate(plan)               # priced by the one simulator
        return SearchOutcome(plan, starting_cost(problem, starts), state.cost,
                             limits.deadline.elapsed(), StopReason.EXHAUSTED)

    SEARCHES["mine"] = SoapSearch(search_mine)

(docs/soap-shard.md, "Writing a new soap search"; `problem.py` says what a search is
given and must return.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tasoc.ir.shard_plan import Plan
from tasoc.passes.search import SearchOutcome
from tasoc.passes.soap import exhaustive, mcmc
from tasoc.passes.soap.auto import search_auto
from tasoc.passes.soap.cost_searches import greedy_plan, search_ft, search_greedy, search_ilp
from tasoc.passes.soap.plan import Prescription, Problem, complete
from tasoc.passes.soap.problem import Limits, SoapProblem
from tasoc.passes.soap.strategies import STRATEGIES

SearchFunction = Callable[[SoapProblem, Mapping[str, Plan], Limits], SearchOutcome[Plan]]
"""A soap search: the problem, its starts by origin and its limits in; the best plan out."""


@dataclass(frozen=True)
class SoapSearch:
    """One entry of `SEARCHES`: the search and what the pass needs to know of it."""

    run: SearchFunction
    unit: tuple[str, str] | None = None
    """The unit of its progress bar's steps and the report key counting them; None: it
    draws no bar (it has no budget of steps)."""
    simulates: bool = False
    """Whether it prices strategies on the simulator (so `place=` can price swapping)."""
    from_tiling: bool = False
    """Whether Spartan's greedy tiling is one more start (cheap, and often close)."""
    comparable: bool = True
    """Whether `compare=` may place its plan beside the pass's own."""


SEARCHES: dict[str, SoapSearch] = {
    "auto": SoapSearch(  # the ILP's plan refined by MCMC (auto.py)
        search_auto,
        unit=("proposal", "proposals"),
        simulates=True,
        from_tiling=True,
        comparable=False,
    ),
    "mcmc": SoapSearch(  # FlexFlow's Metropolis-Hastings search (mcmc.py)
        mcmc.search,
        unit=("proposal", "proposals"),
        simulates=True,
        from_tiling=True,
    ),
    "exhaustive": SoapSearch(  # every strategy of a small program (exhaustive.py)
        exhaustive.search,
        unit=("strategy", "simulations"),
        simulates=True,
    ),
    "ft": SoapSearch(search_ft),  # TensorOpt's frontier tracking (frontier.py)
    "greedy": SoapSearch(search_greedy),  # Spartan's greedy tiling (greedy.py)
    "ilp": SoapSearch(search_ilp),  # one configuration per op, exact by HiGHS (ilp.py)
}
"""The searches, by `search=` name."""

BASELINES = ("data-parallel", "owt", "dlrm-hybrid", "megatron", "layer-wise", "zero", "expert")
"""The named strategies every report compares with, and every search starts from, where
they apply (`Prescription.inapplicable`): the plans a practitioner would pick."""


GRAPH_SEARCH = "roc"
"""ROC's vertex partitioning of a GNN step (`vertex_layout.py`): its own path in the
pass, since it changes the program (padded vertices, blocked edges) before a plan is
made, which no search of `SEARCHES` may do."""


def search_names() -> tuple[str, ...]:
    """Every `search=` choice: `auto` (the default), the named strategies (the baselines
    first), the rest of the searches, then `roc`."""
    return tuple(dict.fromkeys(("auto", *BASELINES, *STRATEGIES, *SEARCHES, GRAPH_SEARCH)))


def comparable_names() -> tuple[str, ...]:
    """Every `compare=` choice."""
    return tuple(name for name, entry in SEARCHES.items() if entry.comparable)


def baseline_plans(program: Problem) -> tuple[dict[str, Plan], dict[str, str]]:
    """The completed plans of the baselines that apply to `program`, and why each other
    does not. Baselines prescribing alike (expert and owt where there are no recurrent
    layers) share one plan object, which the pass simulates and a search starts from
    once."""
    plans: dict[str, Plan] = {}
    not_applying: dict[str, str] = {}
    done: list[tuple[Prescription, Plan]] = []
    for name in BASELINES:
        prescription = STRATEGIES[name](program)
        if prescription.inapplicable is not None:
            not_applying[name] = prescription.inapplicable
            continue
        same = next((plan for other, plan in done if other == prescription), None)
        plans[name] = same if same is not None else complete(program, prescription)
        done.append((prescription, plans[name]))
    return plans, not_applying


def distinct(baselines: Mapping[str, Plan]) -> dict[str, Plan]:
    """`baselines` with each plan once, under the first name it has: the starts of a
    search (one chain, or one FT anchor, per plan)."""
    starts: dict[str, Plan] = {}
    for origin, plan in baselines.items():
        if all(plan is not other for other in starts.values()):
            starts[origin] = plan
    return starts


def run_search(
    name: str, problem: SoapProblem, baselines: Mapping[str, Plan], limits: Limits
) -> SearchOutcome[Plan]:
    """Search `name` from the baselines, each distinct plan once, and from Spartan's
    tiling where the search wants it (`SoapSearch.from_tiling`)."""
    entry = SEARCHES[name]
    starts = distinct(baselines)
    if entry.from_tiling:
        starts["greedy"] = greedy_plan(problem)[0]
    return entry.run(problem, starts, limits)
