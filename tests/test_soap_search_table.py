"""The table of soap searches: a search added to it is a `search=` and `compare=` choice
of the pass at once, is given the problem, the starts and the limits, and its plan is
written, simulated and reported like any other (docs/soap-shard.md, "Writing a new
soap search")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from soap_helpers import parse, shard, step
from soap_programs import MLP

from tasoc.ir.shard_plan import Plan
from tasoc.passes.search import SearchOutcome, StopReason
from tasoc.passes.soap import SoapShardFailed, SoapShardPass
from tasoc.passes.soap.problem import Limits, MemoryCapError, SoapProblem, starting_cost
from tasoc.passes.soap.searches import SEARCHES, SoapSearch, comparable_names, search_names

seen: dict[str, Any] = {}
"""What the toy search was given, for the test to look at."""


def cheapest_start(
    problem: SoapProblem, starts: Mapping[str, Plan], limits: Limits
) -> SearchOutcome[Plan]:
    """The fastest of the starts, priced by the simulator."""
    seen.update(problem=problem, starts=dict(starts), limits=limits)
    priced = {origin: problem.simulate(plan) for origin, plan in starts.items()}
    origin = min(priced, key=lambda name: priced[name].cost)
    return SearchOutcome(
        best=starts[origin],
        cost_before=starting_cost(problem, starts),
        cost_after=priced[origin].cost,
        seconds=limits.deadline.elapsed(),
        stopped=StopReason.EXHAUSTED,
        details={"found_by": origin, "starts_priced": len(priced)},
    )


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> str:
    seen.clear()
    monkeypatch.setitem(SEARCHES, "cheapest-start", SoapSearch(cheapest_start, from_tiling=True))
    return "cheapest-start"


def test_a_search_added_to_the_table_runs_through_the_pass(toy: str) -> None:
    module = step(parse(MLP), loss="mse", optimizer="sgd", lr=0.1)
    _, section = shard(module, mesh=4, search=toy, budget=7, seed=3, timeout=30)
    problem, starts, limits = seen["problem"], seen["starts"], seen["limits"]
    assert problem.program.mesh.size == 4 and problem.machine.name == "cpu-4"
    assert problem.memory_cap == problem.machine.device.memory_bytes  # the default cap
    assert (limits.budget, limits.seed) == (7, 3) and limits.deadline.remaining() > 0
    assert "data-parallel" in starts and "greedy" in starts  # from_tiling
    # equal baselines are one start
    assert len({id(plan) for plan in starts.values()}) == len(starts)
    assert section["search"] == toy and section["stopped"] == "exhausted"
    assert section["starts_priced"] == len(starts)
    fastest = min(section["predicted_seconds"][name] for name in section["baselines"])
    assert section["predicted_seconds"]["plan"] <= fastest
    assert section["cost_after"] == pytest.approx(section["predicted_seconds"]["plan"])
    assert section["cost_before"] == pytest.approx(section["simulated_seconds"]["data-parallel"])
    assert 0 <= section["search_seconds"] < 30


def test_the_tables_searches_are_the_options_choices(toy: str) -> None:
    assert toy in search_names() and toy in comparable_names()
    assert search_names()[0] == "auto" and "data-parallel" in search_names()
    assert "auto" not in comparable_names()  # it is the pass's, not a comparison
    SoapShardPass(mesh=4, search=toy, compare=("ilp",))
    with pytest.raises(ValueError, match=r"search must be one of 'auto', .*'cheapest-start'"):
        SoapShardPass(mesh=4, search="annealing")
    with pytest.raises(ValueError, match="compare must list searches among"):
        SoapShardPass(mesh=4, compare=("auto",))


def test_place_needs_a_search_that_simulates(toy: str) -> None:
    with pytest.raises(ValueError, match="place= prices strategies by simulating them"):
        SoapShardPass(mesh=4, search=toy, place="belady")
    SEARCHES[toy] = SoapSearch(cheapest_start, simulates=True)
    SoapShardPass(mesh=4, search=toy, place="belady")


def test_a_search_that_finds_nothing_under_the_cap_fails_in_one_line(toy: str) -> None:
    """The contract: a search never returns a plan over `memory_cap`; it raises
    `MemoryCapError`, which the pass reports as one line."""

    def nothing_fits(problem: SoapProblem, starts: Mapping[str, Plan], limits: Limits) -> Any:
        raise MemoryCapError(f"nothing fits under {problem.memory_cap} bytes")

    SEARCHES[toy] = SoapSearch(nothing_fits)
    module = step(parse(MLP), loss="mse", optimizer="sgd", lr=0.1)
    with pytest.raises(SoapShardFailed, match=r"^soap-shard: nothing fits under 1024 bytes$"):
        shard(module, mesh=4, search=toy, memory_cap=1024)
