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
import time
from collections.abc import Mapping

from tasoc.ir.shard_plan import Plan
from tasoc.passes.search import SearchOutcome
from tasoc.passes.soap import mcmc
from tasoc.passes.soap.cost_searches import FrontierError, search_ilp
from tasoc.passes.soap.mcmc import Settings
from tasoc.passes.soap.plan import Problem

ILP_SHARE = 0.3
"""The part of the search's time the ILP may take; MCMC has the rest (and the budget)."""


def search_auto(
    problem: Problem, baselines: Mapping[str, Plan], settings: Settings
) -> SearchOutcome[Plan]:
    """MCMC from the ILP's plan and `baselines` (the named strategies, and the greedy
    tiling `soap_shard` adds), as the module docstring says."""
    started = time.perf_counter()
    starts = dict(baselines)
    exact_settings = dataclasses.replace(
        settings,
        deadline=settings.deadline.share(ILP_SHARE),
        memory_cap=None if settings.place is not None else settings.memory_cap,
        progress=None,
    )
    try:
        exact = search_ilp(problem, baselines, exact_settings)
    except FrontierError as err:
        ilp_figures = {"started_from": False, "why_not": str(err)}
    else:
        starts["ilp"] = exact.best
        ilp_figures = {
            "started_from": True,
            "seconds": round(exact.seconds, 3),
            "simulated_seconds": exact.cost_after,
            "solver": exact.details.get("ilp"),  # None where the greedy tiling stood in
            "notes": exact.details.get("ilp_notes", []),
        }
    outcome = mcmc.search(problem, starts, settings)
    outcome.details["ilp"] = ilp_figures
    outcome.seconds = time.perf_counter() - started
    return outcome
