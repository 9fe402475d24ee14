"""What soap-shard's default pass spends before its first proposal and per proposal
(issue 31, item 3), in CPU seconds, on FlexFlow's models at its shapes.

    .venv/bin/python benchmarks/pass_cost.py [--models rnnlm,rnntc,nmt] [--devices 64] \
        [--machine k80-cluster] [--timeout 10] [--budget 2000] [--clock process|main]

Each row: the pass with its defaults (`search=auto`, seed 0, the device's memory as
the cap) on the model's training step (`benchmarks/papers_shapes.py`'s FlexFlow
workload), its `timeout` counted on this process's CPU clock (`time.process_time`)
instead of the wall clock, so that a loaded machine does not decide how far the
search gets: CPU seconds until MCMC's chains begin (the setup: baselines completed,
Spartan's tiling and the ILP on the cost graph, the starts simulated and checked),
proposals made and CPU seconds per proposal while the chains run, CPU seconds after
them (the written plan and the baselines priced for the report, the IR written), the
written plan's simulated step and why the search stopped. HiGHS's own time limit stays
on the wall clock (the ILP gets its share of the CPU-clock timeout as wall seconds).

With a timeout far above what the work needs (`--timeout 1e6 --budget 20`) every phase
runs to its end and the run is the same on any machine and load: two commits that
price alike make the same proposals and write the same plan, at their own CPU cost.

`search=auto` solves the ILP in a thread of its own while the main thread prices the
starts (`auto.py`), so the pass is two threads for a while. Two clocks then say two
things: `--clock process` (the default) counts every thread's CPU seconds, what one
core would take for the whole; `--clock main` counts the main thread's CPU seconds
plus the ILP thread's CPU seconds spent while the main thread waited for it
(`auto._joined`): the wall clock of a machine with two idle cores, each thread on its
own. The table gives the setup on both (`setup` and `setup main`), the ILP thread's CPU
seconds and how many of them the main thread waited for.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from papers_shapes import FLEXFLOW, TRAIN, rows_by_model
from xdsl.context import Context

from tasoc.driver.sources import build_zoo_model
from tasoc.ir import dag as dag_module
from tasoc.passes import search
from tasoc.passes.report import RunReport, reporting
from tasoc.passes.soap import SoapShardPass, auto, mcmc
from tasoc.passes.soap.problem import Limits

SEED = 0


@dataclass(frozen=True)
class CostRow:
    model: str
    ops: int
    setup: float
    """CPU seconds until the chains begin (every thread's)."""
    setup_main: float
    """The same on `--clock main`: the main thread's, and the ILP's it waited for."""
    ilp: float
    """CPU seconds of the ILP's thread (HiGHS and its model's arrays)."""
    waited: float
    """CPU seconds of the ILP's thread spent while the main thread waited for it."""
    chains: float
    """CPU seconds of the chains."""
    after: float
    """CPU seconds after the chains, to the end of the pass."""
    proposals: int
    step: float
    """The written plan's simulated step (seconds)."""
    stopped: str

    @property
    def per_second(self) -> float | None:
        """Proposals per CPU second of the chains; None without a proposal."""
        return self.proposals / self.chains if self.proposals and self.chains else None


class IlpThread:
    """The ILP's thread timed (`auto.solve_ilp` in it, `auto._joined` waiting for it):
    its CPU seconds, and those spent while the main thread waited."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.waited = 0.0
        self._clock: int | None = None
        self._ended = 0.0
        self._main = time.pthread_getcpuclockid(threading.main_thread().ident or 0)

    def main_clock(self) -> float:
        """`--clock main`: the main thread's CPU seconds plus the ILP's waited for."""
        return time.clock_gettime(self._main) + self.waited

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        solve, joined = auto.solve_ilp, auto._joined

        def timed_solve(*args: Any) -> Any:
            started = time.thread_time()
            self._clock = time.pthread_getcpuclockid(threading.get_ident())
            try:
                return solve(*args)
            finally:
                self._ended = time.thread_time()
                self.cpu += self._ended - started

        def timed_joined(solving: Any) -> Any:
            try:  # the ILP thread's CPU clock where it still runs
                before = None if solving.done() else time.clock_gettime(self._clock)  # type: ignore[arg-type]
            except (OSError, TypeError, ValueError):  # it ended meanwhile
                before = None
            result = joined(solving)
            if before is not None:
                self.waited += max(0.0, self._ended - before)
            return result

        auto.solve_ilp, auto._joined = timed_solve, timed_joined  # type: ignore[assignment]
        try:
            yield
        finally:
            auto.solve_ilp, auto._joined = solve, joined  # type: ignore[assignment]


@contextlib.contextmanager
def cpu_clock(clock: Any = time.process_time) -> Iterator[None]:
    """Every deadline made meanwhile (`Deadline.after`) counts `clock`'s seconds: CPU
    seconds of this process by default."""
    after = search.Deadline.__dict__["after"]

    def on_cpu(cls: type[search.Deadline], seconds: float, _: Any = None) -> search.Deadline:
        return after.__func__(cls, seconds, clock)

    search.Deadline.after = classmethod(on_cpu)  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        search.Deadline.after = after  # type: ignore[method-assign]


@contextlib.contextmanager
def chains_timed(marks: dict[str, float], main: Callable[[], float]) -> Iterator[None]:
    """The CPU clock when MCMC's chains begin and end (`mcmc._halving`), in `marks`,
    and `main`'s when they begin."""
    halving = mcmc._halving

    def timed(chains: Mapping[str, mcmc.Chain], limits: Limits) -> Any:
        marks["begin"], marks["begin_main"] = time.process_time(), main()
        try:
            return halving(chains, limits)
        finally:
            marks["end"] = time.process_time()

    mcmc._halving = timed  # type: ignore[assignment]
    try:
        yield
    finally:
        mcmc._halving = halving  # type: ignore[assignment]


def cost_row(name: str, args: argparse.Namespace) -> CostRow:
    step = build_zoo_model(FLEXFLOW[name].spec_at(args.devices) + TRAIN)
    ops = len(dag_module.from_module(step).ops)
    marks: dict[str, float] = {}
    ilp = IlpThread()
    clock = ilp.main_clock if args.clock == "main" else time.process_time
    with (
        cpu_clock(clock),
        ilp.timed(),
        chains_timed(marks, ilp.main_clock),
        reporting(RunReport()) as report,
    ):
        started, started_main = time.process_time(), ilp.main_clock()
        SoapShardPass(
            mesh=args.devices,
            machine=args.machine,
            timeout=args.timeout,
            budget=args.budget,
            seed=SEED,
        ).apply(Context(), step)
        ended, ended_main = time.process_time(), ilp.main_clock()
    section: dict[str, Any] = report.sections["soap-shard"]
    begin, end = marks.get("begin", ended), marks.get("end", ended)
    return CostRow(
        name,
        ops,
        begin - started,
        marks.get("begin_main", ended_main) - started_main,
        ilp.cpu,
        ilp.waited,
        end - begin,
        ended - end,
        int(section.get("proposals") or 0),
        section["predicted_seconds"]["plan"],
        str(section["stopped"]),
    )


def table(rows: Sequence[CostRow]) -> str:
    lines = [
        "| model | ops | setup CPU s | setup main s | ILP thread CPU s (waited) "
        "| chains CPU s | after CPU s | proposals | proposals per CPU s | step ms | stopped |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        rate = "-" if r.per_second is None else f"{r.per_second:.2f}"
        lines.append(
            f"| {r.model} | {r.ops} | {r.setup:.2f} | {r.setup_main:.2f} "
            f"| {r.ilp:.2f} ({r.waited:.2f}) | {r.chains:.2f} | {r.after:.2f} "
            f"| {r.proposals} | {rate} | {r.step * 1e3:.3f} | {r.stopped} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[CostRow]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="rnnlm,rnntc,nmt")
    parser.add_argument("--devices", type=int, default=64)
    parser.add_argument("--machine", default="k80-cluster")
    parser.add_argument("--timeout", type=float, default=10.0, help="CPU seconds")
    parser.add_argument("--budget", type=int, default=2000)
    parser.add_argument(
        "--clock",
        choices=("process", "main"),
        default="process",
        help="what the timeout counts: every thread's CPU seconds, or two idle cores' wall",
    )
    args = parser.parse_args(argv)
    return rows_by_model(args.models, lambda name: cost_row(name, args), table)


if __name__ == "__main__":
    main()
