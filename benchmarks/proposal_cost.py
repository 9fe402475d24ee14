"""What one MCMC proposal costs (issue 31): CPU milliseconds per proposal of a chain from
data parallel, and per memory check (the cost read of a proposal its time did not
reject), on FlexFlow's models at its shapes.

    .venv/bin/python benchmarks/proposal_cost.py [--models rnnlm] [--devices 16,64] \
        [--machine k80-cluster] [--proposals 20]

Each row: `mcmc.Chain` (seed 0, beta 20) from the data-parallel plan of the model's
training step (`benchmarks/papers_shapes.py`'s FlexFlow workload), priced on
`--machine` with the device's memory as the cap, `--proposals` proposals; CPU time of
this process (`time.process_time`), so the time slices other jobs take do not count.
The accepted count and the best simulated step tell two commits' chains apart: an
exact change makes the same proposals and ends at the same plan.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from papers_shapes import FLEXFLOW, TRAIN, rows_by_model

from tasoc.cost.machines import machine
from tasoc.driver.sources import build_zoo_model
from tasoc.ir import dag as dag_module
from tasoc.ir.program import entry_function
from tasoc.ir.training import training_signature
from tasoc.passes.search import Deadline
from tasoc.passes.soap import simulated
from tasoc.passes.soap.mcmc import Chain
from tasoc.passes.soap.meshes import parse_mesh
from tasoc.passes.soap.plan import Problem
from tasoc.passes.soap.problem import SoapProblem
from tasoc.passes.soap.searches import baseline_plans

SEED = 0


@dataclass(frozen=True)
class CostRow:
    model: str
    devices: int
    proposals: int
    accepted: int
    best: float
    """The chain's best simulated step (seconds)."""
    per_proposal: float
    """CPU seconds per proposal."""
    checks: int
    per_check: float
    """CPU seconds per memory check."""


class CheckClock:
    """Times every read of `SimulatedStrategy.cost` (the memory check of a proposal the
    time did not reject) while installed."""

    def __init__(self) -> None:
        self.count, self.seconds = 0, 0.0
        self._cost = simulated.SimulatedStrategy.cost

    def __enter__(self) -> CheckClock:
        read = self._cost.fget
        assert read is not None

        def timed(state: simulated.SimulatedStrategy) -> float:
            started = time.process_time()
            try:
                return read(state)
            finally:
                self.count += 1
                self.seconds += time.process_time() - started

        simulated.SimulatedStrategy.cost = property(timed)  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *_: object) -> None:
        simulated.SimulatedStrategy.cost = self._cost  # type: ignore[method-assign]


def cost_row(name: str, devices: int, preset: str, proposals: int) -> CostRow:
    step = build_zoo_model(FLEXFLOW[name].spec_at(devices) + TRAIN)
    dag = dag_module.from_module(step)
    program = Problem(dag, parse_mesh(str(devices)), training_signature(entry_function(step)), {})
    cluster = machine(preset)
    problem = SoapProblem(program, cluster, int(cluster.device.memory_bytes))
    plan = baseline_plans(program)[0]["data-parallel"]
    chain = Chain(problem.simulate(plan), problem.space(plan), random.Random(SEED), 20)
    with CheckClock() as clock:
        started = time.process_time()
        chain.run(proposals, Deadline.after(10**6))
        cpu = time.process_time() - started
    return CostRow(
        name,
        devices,
        chain.proposals,
        chain.accepted,
        chain.best_cost,
        cpu / max(chain.proposals, 1),
        clock.count,
        clock.seconds / max(clock.count, 1),
    )


def table(rows: Sequence[CostRow]) -> str:
    lines = [
        "| model | devices | proposals | accepted | best ms | CPU ms per proposal "
        "| checks | CPU ms per check |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r.model} | {r.devices} | {r.proposals} | {r.accepted} | {r.best * 1e3:.3f} "
        f"| {r.per_proposal * 1e3:.0f} | {r.checks} | {r.per_check * 1e3:.0f} |"
        for r in rows
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[CostRow]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="rnnlm")
    parser.add_argument("--devices", default="16,64")
    parser.add_argument("--machine", default="k80-cluster")
    parser.add_argument("--proposals", type=int, default=20)
    args = parser.parse_args(argv)
    counts = [int(count) for count in args.devices.split(",")]
    rows: list[CostRow] = []
    for count in counts:
        rows += rows_by_model(
            args.models,
            lambda name, count=count: cost_row(name, count, args.machine, args.proposals),
            table,
        )
    return rows


if __name__ == "__main__":
    main()
