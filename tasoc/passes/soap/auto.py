"""`search=auto`, soap-shard's default: the exact ILP on TensorOpt's cost graph, then
MCMC on the simulator from its plan.

Neither search alone is the one to trust by default. The ILP (`ilp.py`, HiGHS) is exact
for the cost graph's sums and takes a second, but those sums do not overlap compute with
communication and count memory as the forward's activations, so its plan can be
beaten under the full simulator. MCMC (`mcmc.py`) prices every proposal with the
simulator but explores from where it starts: from data parallel alone it may spend its
whole budget climbing to what the ILP gives at once (alexnet's step on `cpu-8`:
11.6 ms after 200 proposals against the ILP's 9.22 ms).

So the ILP runs first, in `ILP_SHARE` of the time, and its plan becomes one more chain's
start beside data parallel, expert and Spartan's tiling: the written plan is MCMC's best
over all of them, never slower (simulated) than any start, the baselines included.
Where the ILP has nothing to give (a model too large for it takes the greedy tiling; a
`memory-cap` no strategy meets by its estimate) the report says so and MCMC starts
from the rest. With `place=` the ILP is solved without the cap: the cap is what swapping
answers, and MCMC prices that.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from tasoc.ir.shard_plan import Plan
from tasoc.passes.search import SearchOutcome
from tasoc.passes.soap import mcmc
from tasoc.passes.soap.cost_searches import FrontierError, search_ilp
from tasoc.passes.soap.problem import Limits, SoapProblem

ILP_SHARE = 0.3
"""The part of the search's time the ILP may take; MCMC has the rest (and the budget)."""


def search_auto(
    problem: SoapProblem, starts: Mapping[str, Plan], limits: Limits
) -> SearchOutcome[Plan]:
    """MCMC from the ILP's plan and `starts` (the baselines, and the greedy tiling the
    search table adds), as the module docstring says. Its `seconds` count both."""
    # With place= the ILP is solved without the cap: the cap is what swapping answers.
    exact_problem = (
        dataclasses.replace(problem, memory_cap=None) if problem.place is not None else problem
    )
    try:
        exact = search_ilp(exact_problem, starts, limits.share(ILP_SHARE))
    except FrontierError as err:
        ilp_figures = {"started_from": False, "why_not": str(err)}
    else:
        starts = {**starts, "ilp": exact.best}
        ilp_figures = {
            "started_from": True,
            "seconds": round(exact.seconds, 3),
            "simulated_seconds": exact.cost_after,
            "solver": exact.details.get("ilp"),  # None where the greedy tiling stood in
            "notes": exact.details.get("ilp_notes", []),
        }
    outcome = mcmc.search(problem, starts, limits)
    outcome.details["ilp"] = ilp_figures
    return outcome
