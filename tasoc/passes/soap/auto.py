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

HiGHS solves in a thread of its own (`solve_ilp`: the cost graph read, nothing shared
written), and releases the GIL while it does, so the other starts' task graphs are
built and checked meanwhile (`SoapProblem.prepare`): on a machine of two cores or more
the ILP's seconds (2-3 s of CPU on a 3,000-op RNN step at 64 devices) no longer come
before the first proposal. What the search finds is what it found with the two in
turn: the same starts, each priced as before, and the ILP's plan among them, its
deadline the same share of the time; the ILP's `seconds` count from its start to its
plan's simulation, the starts' pricing meanwhile included. The thread is a daemon
(`_in_background`): an interrupt taken meanwhile reaches the driver at once, and the
process exits without waiting for a solve no one will read.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future

from tasoc.ir.shard_plan import Plan
from tasoc.passes.search import SearchOutcome
from tasoc.passes.soap import mcmc
from tasoc.passes.soap.cost_searches import (
    FrontierError,
    IlpSolved,
    ilp_outcome,
    solve_ilp,
    timed_model,
)
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
    ilp_limits = limits.share(ILP_SHARE)
    model = timed_model(exact_problem)  # here: building it is Python, and shared
    solving = _in_background(lambda: solve_ilp(exact_problem, ilp_limits, model))
    for plan in starts.values():
        problem.prepare(plan)
    solved = _joined(solving)
    try:
        exact = ilp_outcome(exact_problem, starts, ilp_limits, solved)
    except FrontierError as err:
        ilp_figures = {"started_from": False, "why_not": str(err)}
    else:
        starts = {**starts, "ilp": exact.best}
        problem.prepare(exact.best)  # its state, simulated for its outcome, when it has one
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


def _in_background(solve: Callable[[], IlpSolved]) -> Future[IlpSolved]:
    """`solve()` in a daemon thread, its result or error in the future returned. Not a
    `ThreadPoolExecutor`: leaving its block, and the interpreter's exit, join its
    threads, so a Ctrl-C during the starts' pricing waited for HiGHS to reach its own
    time limit (a solve cannot be cut short from Python)."""
    solving: Future[IlpSolved] = Future()

    def run() -> None:
        try:
            solving.set_result(solve())
        except BaseException as err:  # handed to the waiting thread, raised there
            solving.set_exception(err)

    threading.Thread(target=run, name="tasoc-ilp", daemon=True).start()
    return solving


def _joined(solving: Future[IlpSolved]) -> IlpSolved:
    """The ILP's solving, waited for: what the starts' pricing did not hide of it
    (`benchmarks/pass_cost.py` times this wait)."""
    return solving.result()
