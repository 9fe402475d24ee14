"""The simulator against real runs on this machine (issue 30): soap-shard's predicted
step times and collectives set beside measured step times and the compiled HLO's.

    .venv/bin/python benchmarks/sim_validate.py [--machine local.toml] [--models a,b] \
        [--setups 1x2,2x1] [--randoms 2] [--rounds 10] [--budget 200] [--quick] \
        [--json rows.json]
    .venv/bin/python benchmarks/sim_validate.py --reprice rows.json [--machine M] [--json out]

Two setups of two JAX devices, each priced on its view of `--machine` (default
`local`: this host as `tasoc machine calibrate --processes 2 --devices 2` measured it,
2 nodes of 2 devices, ops priced from the measured op table; or any machine file or
preset, e.g. `cpu-2`, analytic):

- **1x2**: one process of 2 fake CPU devices (`jax_num_cpu_devices`), priced as one
  node of 2 devices (the machine's `intra` link);
- **2x1**: 2 `jax.distributed` processes of 1 CPU device on localhost, started and
  supervised as `tasoc run --processes` starts its own (`distributed.run_workers`), with
  this script as the worker, priced as 2 nodes of one device each (its `inter` link).
  A soap-shard mesh's device ids index the machine's devices, node-major, so the view
  is the machine re-shaped to the setup's processes x devices: a mesh of 2 on 2 nodes
  of 1 crosses `inter`, on 1 node of 2 `intra`. A machine of one node has no `inter`
  link; its `intra` stands in, and the output says so.

For each model of `--models` (training steps, `autodiff{optimizer=sgd}`, of
`benchmarks/autodiff.py`'s reduced shapes) the plans on a mesh of 2: every named
strategy (`strategies.STRATEGIES`: data parallel, expert, megatron and whatever is
registered there), MCMC's (`search=mcmc`) and the ILP's (`search=ilp`) plan on the
machine, every op replicated (the compute alone, no collective), and `--randoms` random
legal plans (seeded), duplicates dropped. For each plan
and setup, a row: the simulated step time (`SimulatedStrategy`) and its compute
and communication on device 0; the measured step time (the median of `--rounds`
interleaved rounds over all plans of the setup, each sample the mean of as many calls
as take `SAMPLE_S`; `timing.py`); the collectives per kind of the written IR, the
compiled HLO (`audit()`, in the setup's own processes) and the simulator's task graph
(`shard_checks.predicted_collectives`), and the IR's bytes beside the HLO's.

`--json` writes every row with its plan (`plan_to_json`: the step's node positions and
the step's fingerprint) and the model's shapes; `--reprice` measures nothing and
simulates the saved plans again with this code on `--machine` (its op table: the one
in `TASOC_CACHE_DIR`) against their saved measurements, and says how far each setup's
simulated times moved from the saved ones (`then_and_now`). So a change of tau between
two runs can be put on the simulator, the machine file, the op table or the
measurements, one at a time: run this script (copied) in a worktree at an older commit
to price with older code. A row saved without its plan (before plans were saved) is
priced on the plan its strategy makes again here, the same plan only with the
measuring run's code and machine, which the unmoved simulated times confirm.

Goals (issue 30's; exit status 0 when all are met, else 1): Kendall's tau of
simulated against measured >= 0.8 over all rows; the median absolute relative error
of simulated against measured <= 20 %; the simulator's collectives equal the IR's and
the HLO's on every plan. Printed beside them with a verdict of its own, not in the
exit status: the same tau in each setup and for each model in each setup, a stricter
bar than the issue's (a group of 8-9 plans of one model ranks on few pairs). The
machine's load before and after is printed: the measured times are only as good as
the quiet of the machine; and so is the calibration's spread (`calibration_lines`:
the quartiles of the links fitted to each of its rounds, and the compute scale of the
processes' setup), since a calibration as lucky or unlucky as one of its rounds can
decide whether a run passes.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import hashlib
import json
import math
import os
import random
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax
import numpy as np
from autodiff import MODELS
from scipy.stats import kendalltau
from shard_checks import (
    hlo_collectives,
    ir_collectives,
    is_collective,
    predicted_collectives,
    step_of,
)
from timing import averaged, calls_for, interleaved, versions
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from tasoc.backends.arguments import random_inputs
from tasoc.backends.jax.audit import Audit, audit
from tasoc.backends.jax.sharded import ShardedProgram, lower_sharded
from tasoc.cost.machines import Machine, machine
from tasoc.driver import distributed
from tasoc.driver.sources import make_context
from tasoc.ir import dag as dag_module
from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.program import entry_function
from tasoc.ir.shard_plan import Plan, write_sharded
from tasoc.ir.soap import Mesh, Sharding
from tasoc.ir.training import training_signature
from tasoc.models.registry import OptionValue
from tasoc.passes.search import Deadline
from tasoc.passes.soap import mcmc
from tasoc.passes.soap.meshes import parse_mesh
from tasoc.passes.soap.plan import Problem, complete
from tasoc.passes.soap.problem import Limits, SoapProblem, configurations
from tasoc.passes.soap.searches import BASELINES, run_search
from tasoc.passes.soap.simulated import SimulatedStrategy
from tasoc.passes.soap.strategies import STRATEGIES

MESH = 2
"""Devices of every plan: the two of each setup."""
VALIDATE_MODELS = ("dlrm", "candle_uno", "transformer", "alexnet")
QUICK_MODELS = ("candle_uno",)
SEARCHED = ("mcmc", "ilp")
"""The searches whose plans are validated besides the named strategies'."""
RANDOMS, QUICK_RANDOMS = 2, 1
ROUNDS, QUICK_ROUNDS = 10, 3
BUDGET, QUICK_BUDGET = 200, 20
SEARCH_TIMEOUT = 60.0
SAMPLE_S = 0.02
"""A sample repeats a step until it takes this long: several scheduler slices."""
SEED = 0
TAU_GOAL = 0.8
ERROR_GOAL = 0.2


@dataclass(frozen=True)
class Setup:
    """Processes x CPU devices per process, the JAX devices a plan runs on."""

    processes: int
    devices: int

    @property
    def name(self) -> str:
        return f"{self.processes}x{self.devices}"

    def view(self, base: Machine) -> tuple[Machine, str]:
        """`base` as this setup uses it, `processes` nodes of `devices` devices (what a
        mesh's device ids cross follows from it), and a note where `base` cannot say
        (a link the machine does not have, stood in for by its `intra`; a measured
        machine with no compute scale for processes, whose steps the op table then prices
        as one process runs them)."""
        notes = []
        if self.devices > base.devices_per_node:
            notes.append(
                f"{base.name} has {base.devices_per_node} device(s) per node, not {self.devices}"
            )
        inter = base.inter
        if self.processes > 1 and inter is None:
            inter = base.intra
            notes.append(
                f"{base.name} has one node: its intra link stands for the processes' link "
                f"(calibrate with --processes {self.processes})"
            )
        shaped = dataclasses.replace(
            base, nodes=self.processes, devices_per_node=self.devices, inter=inter
        )
        setup = shaped.setup_of(self.processes * self.devices)
        scaled = setup in dict(base.compute_scales)
        if base.pricing == "measured" and self.processes > 1 and not scaled:
            notes.append(
                f"{base.name} has no compute scale for {setup}: its op table prices the "
                "processes' ops as one process runs them (calibrate with --processes "
                f"{self.processes})"
            )
        return shaped, "; ".join(notes)


SETUPS = {s.name: s for s in (Setup(1, MESH), Setup(MESH, 1))}


@dataclass
class Candidate:
    """One plan of one model, and its training step sharded by it."""

    model: str
    strategy: str
    problem: Problem
    """The unsharded step's problem, which the plan's ops are nodes of."""
    plan: Plan
    module: ModuleOp
    shapes: dict[str, OptionValue] = dataclasses.field(default_factory=dict)
    """The options the model's step was built with (`--reprice` builds it again so)."""


@dataclass
class Measured:
    """One sharded step as it ran in a setup: the collectives per kind of its IR and of
    its compiled HLO (`audit()`), their bytes, and its timed samples (seconds per step)."""

    ir: dict[str, int]
    hlo: dict[str, int]
    ir_bytes: int
    hlo_bytes: int
    samples: list[float]

    @classmethod
    def of(cls, found: Audit, samples: list[float]) -> Measured:
        return cls(
            ir_collectives(found),
            hlo_collectives(found),
            sum(r.asked_bytes for r in found.rows),
            sum(r.found_bytes for r in found.rows),
            samples,
        )


@dataclass
class Row:
    """One plan in one setup: simulated beside measured."""

    setup: str
    candidate: Candidate
    simulated_s: float
    compute_s: float
    """Compute tasks on device 0 of the simulated step, summed."""
    communication_s: float
    """Collective tasks on device 0 of the simulated step, summed."""
    predicted: dict[str, int]
    """Collectives per kind in the simulated step's task graph."""
    measured: Measured

    @property
    def measured_s(self) -> float:
        return statistics.median(self.measured.samples)

    @property
    def same_collectives(self) -> bool:
        return self.predicted == self.measured.ir == self.measured.hlo

    @property
    def error(self) -> float:
        """Relative error of the simulated time against the measured one."""
        return abs(self.simulated_s - self.measured_s) / self.measured_s

    def to_json(self) -> dict[str, object]:
        """The row for `--json`: what was measured and simulated, and the plan (by the
        step's node positions, `plan_to_json`), so that `--reprice` can price the same
        plan again with other code or another machine without measuring it again."""
        return {
            "setup": self.setup,
            "model": self.candidate.model,
            "strategy": self.candidate.strategy,
            "shapes": self.candidate.shapes,
            "plan": plan_to_json(self.candidate.problem.dag, self.candidate.plan),
            "simulated_s": self.simulated_s,
            "compute_s": self.compute_s,
            "communication_s": self.communication_s,
            "predicted": self.predicted,
            "measured_s": self.measured_s,
            **dataclasses.asdict(self.measured),
        }


# ------------------------------------------------------------------ the plans


def problem_of(step: ModuleOp) -> Problem:
    dag = dag_module.from_module(step)
    return Problem(dag, parse_mesh(MESH), training_signature(entry_function(step)), {})


def plans_of(
    problem: Problem, cluster: Machine, budget: int, randoms: int
) -> Iterator[tuple[str, Plan]]:
    """The named strategies' plans, the searches', every op replicated (no collectives:
    the compute alone) and `randoms` random legal ones (seeds 1, 2, ...); a plan equal
    to one before it is left out (on a mesh of 2 several strategies often agree), as is
    one a strategy or search cannot make."""
    seen: list[Plan] = []

    def new(plan: Plan | None) -> bool:
        if plan is None or any(_same_plan(plan, other) for other in seen):
            return False
        seen.append(plan)
        return True

    named: dict[str, Plan] = {}
    for name, strategy in STRATEGIES.items():
        try:
            named[name] = complete(problem, strategy(problem))
        except ValueError as err:  # PlanError and the strategies' own refusals
            print(f"  {name}: no plan ({err})", file=sys.stderr)
            continue
        if new(named[name]):
            yield name, named[name]
    baselines = {name: named[name] for name in BASELINES if name in named}
    for search in SEARCHED:
        deadline = Deadline.after(SEARCH_TIMEOUT)  # each its own: not what the last left
        limits = Limits(budget, deadline, SEED)
        try:
            plan = run_search(search, SoapProblem(problem, cluster), baselines, limits).best
        except ValueError as err:  # the ILP's FrontierError: too large, infeasible
            print(f"  {search}: no plan ({err})", file=sys.stderr)
            continue
        if new(plan):
            yield search, plan
    if new(replicated := mcmc.uniform_plan(problem, lambda rule, mesh: {})):
        yield "replicated", replicated
    for seed in range(1, randoms + 1):
        rng = random.Random(seed)
        plan = mcmc.uniform_plan(
            problem, lambda rule, mesh, rng=rng: rng.choice(configurations(rule, mesh))
        )
        if new(plan):
            yield f"random {seed}", plan


def _same_plan(a: Plan, b: Plan) -> bool:
    """The same program written (notes aside)."""
    fields = ("configs", "operands", "values", "outputs", "meshes")
    return all(getattr(a, f) == getattr(b, f) for f in fields)


# ------------------------------------------------------------------ saved plans


class SavedError(Exception):
    """A `--reprice` file that cannot be priced again (one line: what and where)."""


PLAN_FORMAT = 1
"""`plan_to_json`'s format: a node is its position among the dag's arguments then ops."""


def _nodes(dag: Dag) -> tuple[Node, ...]:
    return (*dag.args, *dag.ops)


def dag_fingerprint(dag: Dag) -> str:
    """What a saved plan's node positions mean: each node's op, operand positions and
    result types, hashed. A step built otherwise (other shapes, another model or
    autodiff) has another, and its saved plans are refused rather than misread."""
    index = {node: i for i, node in enumerate(_nodes(dag))}
    lines = (
        f"{node.op} {[(index[v.node], v.index) for v in node.inputs]} {node.sigs}"
        for node in _nodes(dag)
    )
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def _sharding_to_json(sharding: Sharding) -> list[object]:
    return [sharding.mesh, [list(dim) for dim in sharding.dims], list(sharding.unreduced)]


def _sharding_of(data: list[object]) -> Sharding:
    mesh, dims, unreduced = data
    return Sharding(str(mesh), tuple(tuple(dim) for dim in dims), tuple(unreduced))  # type: ignore[union-attr]


def plan_to_json(dag: Dag, plan: Plan) -> dict[str, object]:
    """`plan` (of `dag`) as JSON: nodes by position (`_nodes`), values as [node,
    result], shardings as [mesh, dims, unreduced], the dag's fingerprint beside them."""
    index = {node: i for i, node in enumerate(_nodes(dag))}
    return {
        "format": PLAN_FORMAT,
        "dag": dag_fingerprint(dag),
        "configs": [
            [index[node], {factor: list(axes) for factor, axes in config.items()}]
            for node, config in plan.configs.items()
        ],
        "operands": [
            [index[node], [_sharding_to_json(s) for s in shardings]]
            for node, shardings in plan.operands.items()
        ],
        "values": [
            [index[value.node], value.index, _sharding_to_json(s)]
            for value, s in plan.values.items()
        ],
        "outputs": [_sharding_to_json(s) for s in plan.outputs],
        "notes": list(plan.notes),
        "meshes": [
            [mesh.name, [list(axis) for axis in mesh.axes], mesh.devices and list(mesh.devices)]
            for mesh in plan.meshes
        ],
        "order": None if plan.order is None else [index[node] for node in plan.order],
    }


def plan_from_json(dag: Dag, data: dict[str, object]) -> Plan:
    """The plan `plan_to_json` wrote for `dag` (SavedError: another format or dag)."""
    if data.get("format") != PLAN_FORMAT:
        raise SavedError(f"plan format {data.get('format')!r}, not {PLAN_FORMAT}")
    if data.get("dag") != (found := dag_fingerprint(dag)):
        raise SavedError(f"plan of another step (dag {data.get('dag')}, this one {found})")
    nodes = _nodes(dag)
    meshes = tuple(
        Mesh(name, tuple((axis, size) for axis, size in axes), None if ids is None else tuple(ids))
        for name, axes, ids in data["meshes"]  # type: ignore[attr-defined]
    )
    order = data["order"]
    return Plan(
        {nodes[i]: {f: tuple(axes) for f, axes in c.items()} for i, c in data["configs"]},  # type: ignore[attr-defined]
        {nodes[i]: tuple(map(_sharding_of, s)) for i, s in data["operands"]},  # type: ignore[attr-defined]
        {Value(nodes[i], r): _sharding_of(s) for i, r, s in data["values"]},  # type: ignore[attr-defined]
        tuple(map(_sharding_of, data["outputs"])),  # type: ignore[arg-type]
        list(data["notes"]),  # type: ignore[call-overload]
        meshes,
        None if order is None else tuple(nodes[i] for i in order),  # type: ignore[attr-defined]
    )


def written(
    name: str,
    step: ModuleOp,
    problem: Problem,
    planned: Iterable[tuple[str, Plan]],
    shapes: dict[str, OptionValue] | None = None,
) -> list[Candidate]:
    """Each plan of `planned` (of `step`'s `problem`, `step` built with `shapes`)
    written as a sharded step."""
    found = []
    for strategy, plan in planned:
        module = step.clone()
        write_sharded(module, problem.dag, plan, problem.mesh)
        found.append(Candidate(name, strategy, problem, plan, module, dict(shapes or {})))
        print(f"  {name} {strategy}: planned", file=sys.stderr, flush=True)
    return found


def candidates(name: str, cluster: Machine, budget: int, randoms: int) -> list[Candidate]:
    """The plans of `name`'s training step (`plans_of`), written."""
    shapes = MODELS[name][0]
    step = step_of(name, shapes)
    problem = problem_of(step)
    return written(name, step, problem, plans_of(problem, cluster, budget, randoms), shapes)


def row_of(setup: Setup, cluster: Machine, candidate: Candidate, measured: Measured) -> Row:
    """`candidate` simulated on `cluster` (the setup's view) beside how it ran."""
    simulated = SimulatedStrategy.of(candidate.problem, candidate.plan, cluster, None, memory=False)
    busy = {"device": 0.0, "net": 0.0}
    graph = simulated.step.graph
    for task_id in graph.ids():
        task = graph[task_id]
        resource = task.resource
        if isinstance(resource, tuple) and resource[1:] == (0,) and resource[0] in busy:
            busy["net" if is_collective(task) else "device"] += task.duration
    return Row(
        setup.name,
        candidate,
        simulated.time,
        busy["device"],
        busy["net"],
        predicted_collectives(simulated),
        measured,
    )


# ------------------------------------------------------------------ pricing saved rows

ROW_FIELDS = ("setup", "model", "strategy", "simulated_s", "ir", "hlo", "ir_bytes", "hlo_bytes")


def saved_rows(path: Path) -> list[dict[str, Any]]:
    """The rows `--json` wrote to `path`, checked for what `repriced` reads (SavedError:
    unreadable, not rows, or a row without its measurement, setup or model)."""
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise SavedError(f"cannot read {path}: {err.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SavedError(f"{path} is not JSON ({err})") from None
    if not isinstance(data, list) or not data:
        raise SavedError(f"{path} holds no rows (a list of what --json writes)")
    for number, row in enumerate(data, 1):
        if not isinstance(row, dict):
            raise SavedError(f"{path}: row {number} is not an object")
        missing = [name for name in (*ROW_FIELDS, "samples") if name not in row]
        if missing:
            raise SavedError(f"{path}: row {number} lacks {', '.join(missing)}")
        if row["setup"] not in SETUPS:
            raise SavedError(f"{path}: row {number}: unknown setup {row['setup']!r}")
        if row["model"] not in MODELS:
            raise SavedError(f"{path}: row {number}: unknown model {row['model']!r}")
        if not row["samples"] or not all(
            isinstance(t, int | float) and t > 0 for t in row["samples"]
        ):
            raise SavedError(f"{path}: row {number}: samples must be positive seconds")
    return data


def repriced(
    saved: Sequence[dict[str, Any]], base: Machine, budget: int, randoms: int
) -> list[tuple[dict[str, Any], Row]]:
    """Each saved row (`saved_rows`) beside its plan simulated again on its setup's
    view of `base` with this code, its measurement as it was: what separates a change
    of the simulator, the machine file or the op table (`TASOC_CACHE_DIR`) from one of
    the measurements. A row saved with its plan is priced on that plan; one without
    (a file written before plans were saved) on the plan its strategy makes again
    here (`plans_of` on the first setup's view, as the measured run searched): the
    same plan only with the measured run's code and machine, which `then_and_now`
    tells by the simulated times. A row whose strategy makes no plan again is left
    out, and said so."""
    views = {name: SETUPS[name].view(base) for name in dict.fromkeys(r["setup"] for r in saved)}
    found: dict[tuple[str, str], Candidate] = {}
    for model in dict.fromkeys(row["model"] for row in saved):
        mine = [row for row in saved if row["model"] == model]
        shapes = mine[0].get("shapes") or MODELS[model][0]
        step = step_of(model, shapes)
        problem = problem_of(step)
        planned = {}
        for row in mine:
            if "plan" in row:
                try:
                    planned[row["strategy"]] = plan_from_json(problem.dag, row["plan"])
                except (KeyError, IndexError, TypeError, ValueError) as err:
                    raise SavedError(f"{model} {row['strategy']}: bad plan ({err!r})") from None
        if missing := {row["strategy"] for row in mine} - set(planned):
            print(f"  {model}: planning {', '.join(sorted(missing))} again", file=sys.stderr)
            cluster = next(iter(views.values()))[0]
            for strategy, plan in plans_of(problem, cluster, budget, randoms):
                if strategy in missing:
                    planned[strategy] = plan
                    missing.discard(strategy)
                if not missing:  # no search runs that no row asks for
                    break
        for candidate in written(model, step, problem, planned.items(), shapes):
            found[model, candidate.strategy] = candidate
    pairs = []
    for row in saved:
        candidate = found.get((row["model"], row["strategy"]))
        if candidate is None:
            print(f"  {row['model']} {row['strategy']}: no plan again, left out", file=sys.stderr)
            continue
        measured = Measured(*(row[name] for name in ROW_FIELDS[-4:]), list(row["samples"]))
        setup = SETUPS[row["setup"]]
        pairs.append((row, row_of(setup, views[setup.name][0], candidate, measured)))
    return pairs


def then_and_now(pairs: Sequence[tuple[dict[str, Any], Row]]) -> list[str]:
    """Per setup, how the re-priced simulated times compare with the saved ones: how
    many are the same (to 1e-9: the same plan, code and machine) and the ratios'
    median and range."""
    lines = []
    for name in dict.fromkeys(row.setup for _, row in pairs):
        ratios = [row.simulated_s / then["simulated_s"] for then, row in pairs if row.setup == name]
        same = sum(abs(r - 1) < 1e-9 for r in ratios)
        lines.append(
            f"- {name}: {same} of {len(ratios)} simulated as saved; now / saved: median "
            f"{statistics.median(ratios):.3f}, {min(ratios):.3f}-{max(ratios):.3f}"
        )
    return lines


# ------------------------------------------------------------------ running them


def measured(
    modules: Sequence[ModuleOp],
    rounds: int,
    arguments: Callable[[ShardedProgram, ModuleOp], Sequence[jax.Array]],
    agree: Callable[[list[int]], list[int]],
) -> list[Measured]:
    """Each module lowered, audited and timed: calls per sample counted on each
    (`agree` makes every process of a run take the same counts), then `rounds`
    interleaved rounds of one sample of each."""
    found, calls = [], []
    for module in modules:
        program = lower_sharded(module)
        found.append(audit(module, program))
        args = arguments(program, module)
        calls.append(lambda fn=program.fn, args=args: fn(*args))
    counts = agree([calls_for(call, SAMPLE_S) for call in calls])
    samples = interleaved([averaged(c, n) for c, n in zip(calls, counts, strict=True)], rounds)
    return [Measured.of(f, s) for f, s in zip(found, samples, strict=True)]


def measured_here(modules: Sequence[ModuleOp], rounds: int) -> list[Measured]:
    """The 1xN setup: this process's fake CPU devices."""
    return measured(
        modules,
        rounds,
        lambda program, module: program.device_args(random_inputs(module, SEED)),
        lambda counts: counts,
    )


def measured_in_processes(setup: Setup, modules: Sequence[ModuleOp], rounds: int) -> list[Measured]:
    """The PxN setup: `setup.processes` workers (this script, `--worker`) started and
    supervised as `tasoc run --processes` starts its own (`distributed.run_workers`);
    process 0's measurements."""
    with tempfile.TemporaryDirectory(prefix="sim-validate-") as folder:
        for index, module in enumerate(modules):
            (Path(folder) / f"{index:03d}.mlir").write_text(str(module))
        cluster = distributed.Cluster(
            f"127.0.0.1:{distributed.free_port()}",
            setup.processes,
            0,
            setup.devices,
            distributed.DEFAULT_CONNECT_TIMEOUT,
        )
        words = ["--worker", folder, "--rounds", str(rounds), "--processes", str(setup.processes)]
        distributed.run_workers(words, cluster, range(setup.processes), _worker_command)
        results = json.loads((Path(folder) / RESULTS).read_text())
    return [Measured(**result) for result in results]


def _worker_command(words: Sequence[str], cluster: distributed.Cluster, index: int) -> list[str]:
    """This script as worker `index` of `cluster`."""
    return [sys.executable, str(Path(__file__)), *words, *distributed.place_of(cluster, index)]


RESULTS = "results.json"
"""What process 0 of a worker run writes into the folder of the modules."""


def worker(args: argparse.Namespace) -> None:
    """One process of the PxN setup: join the run, then measure every module of the
    folder as all processes do, in the same order; process 0 writes the results."""
    from jax.experimental import multihost_utils

    distributed.join(
        distributed.Cluster(
            args.coordinator,
            args.processes,
            args.process_id,
            args.devices,
            distributed.DEFAULT_CONNECT_TIMEOUT,
        )
    )
    folder = Path(args.worker)
    context = make_context()
    modules = [
        Parser(context, path.read_text()).parse_module() for path in sorted(folder.glob("*.mlir"))
    ]

    def agree(counts: list[int]) -> list[int]:
        return [int(n) for n in multihost_utils.broadcast_one_to_all(np.array(counts))]

    results = measured(
        modules,
        args.rounds,
        lambda program, module: distributed.global_arguments(program, random_inputs(module, SEED)),
        agree,
    )
    if args.process_id == 0:
        (folder / RESULTS).write_text(json.dumps([dataclasses.asdict(r) for r in results]))


# ------------------------------------------------------------------ the report


def tau(rows: Sequence[Row]) -> float:
    """Kendall's tau of simulated against measured step time (nan under 2 rows)."""
    if len(rows) < 2:
        return float("nan")
    return float(kendalltau([r.simulated_s for r in rows], [r.measured_s for r in rows])[0])


def groups(rows: Sequence[Row]) -> dict[str, list[Row]]:
    """The rows tau is asked of: all, each setup's, each model's in each setup."""
    found: dict[str, list[Row]] = {"all": list(rows)}
    for row in rows:
        found.setdefault(row.setup, []).append(row)
        found.setdefault(f"{row.setup} {row.candidate.model}", []).append(row)
    return found


@dataclass
class Goals:
    taus: dict[str, float]
    median_error: float
    same_collectives: float
    """The share of rows whose simulated, IR and HLO collectives agree."""

    @property
    def ranked(self) -> bool:
        """tau over all rows at the goal: the issue's."""
        return self.taus["all"] >= TAU_GOAL

    @property
    def ranked_in_every_group(self) -> bool:
        """Every group's tau at the goal too (a group of one plan has none)."""
        return all(t >= TAU_GOAL for t in self.taus.values() if not math.isnan(t))

    @property
    def met(self) -> bool:
        return self.ranked and self.median_error <= ERROR_GOAL and self.same_collectives == 1.0

    def lines(self) -> list[str]:
        def verdict(ok: bool) -> str:
            return "met" if ok else "MISSED"

        groups = [(name, t) for name, t in self.taus.items() if name != "all"]
        lines = [
            f"- Kendall tau >= {TAU_GOAL} over all rows ({verdict(self.ranked)}): "
            f"{self.taus['all']:.2f}",
            f"- (stricter, not in the verdict) the same in each setup and model "
            f"({verdict(self.ranked_in_every_group)}): "
            + ", ".join(f"{name} {t:.2f}" for name, t in groups),
            f"- median |simulated - measured| / measured <= {ERROR_GOAL:.0%} "
            f"({verdict(self.median_error <= ERROR_GOAL)}): {self.median_error:.1%}",
            f"- collectives simulated == IR == HLO on every plan "
            f"({verdict(self.same_collectives == 1.0)}): {self.same_collectives:.0%}",
        ]
        return lines


def goals_of(rows: Sequence[Row]) -> Goals:
    return Goals(
        {name: tau(group) for name, group in groups(rows).items()},
        statistics.median(r.error for r in rows),
        sum(r.same_collectives for r in rows) / len(rows),
    )


def _kinds(counts: dict[str, int]) -> str:
    return ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items())) or "none"


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| setup | model | plan | simulated ms (compute + comm.) | measured ms (IQR) | error "
        "| collectives: simulated / IR / HLO | same | IR bytes (HLO) |",
        "| --- | --- | --- | ---: | ---: | ---: | --- | --- | ---: |",
    ]
    for r in rows:
        m = r.measured
        q1, _, q3 = (
            statistics.quantiles(m.samples, n=4) if len(m.samples) > 1 else [r.measured_s] * 3
        )
        lines.append(
            f"| {r.setup} | {r.candidate.model} | {r.candidate.strategy} "
            f"| {r.simulated_s * 1e3:.3f} "
            f"({r.compute_s * 1e3:.3f} + {r.communication_s * 1e3:.3f}) "
            f"| {r.measured_s * 1e3:.3f} ({q1 * 1e3:.2f}-{q3 * 1e3:.2f}) | {r.error:.0%} "
            f"| {_kinds(r.predicted)} / {_kinds(m.ir)} / {_kinds(m.hlo)} "
            f"| {'yes' if r.same_collectives else 'NO'} | {m.ir_bytes} ({m.hlo_bytes}) |"
        )
    return "\n".join(lines)


def misranked(rows: Sequence[Row]) -> list[str]:
    """Per setup and model, each pair of plans the simulator orders unlike the
    measurement: what to look at when tau misses."""
    lines = []
    for name, group in groups(rows).items():
        if name == "all" or " " not in name:
            continue
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                if (a.simulated_s - b.simulated_s) * (a.measured_s - b.measured_s) < 0:
                    lines.append(
                        f"- {name}: {a.candidate.strategy} vs {b.candidate.strategy}: "
                        f"simulated {a.simulated_s / b.simulated_s:.2f}x, "
                        f"measured {a.measured_s / b.measured_s:.2f}x"
                    )
    return lines


def fits(rows: Sequence[Row]) -> list[str]:
    """Per setup, least squares of the measured times: on the simulated ones, measured
    = a x simulated + b (a far from 1: a scale the cost model misses; b: a per-step
    cost it does not price); and on what a machine file prices, measured = c x
    compute (device 0's simulated compute) + L x collectives + M x MB + e, which gives
    a collective's latency L and time per megabyte M as this machine delivers them."""
    lines = []
    for name, group in groups(rows).items():
        if name not in SETUPS or len(group) < 2:
            continue
        measured = np.array([r.measured_s for r in group])
        a, b = np.polyfit([r.simulated_s for r in group], measured, 1)
        lines.append(f"- {name}: measured = {a:.2f} x simulated + {b * 1e3:.3f} ms")
        if len(group) > 4:
            terms = np.array(
                [
                    [r.compute_s, sum(r.measured.ir.values()), r.measured.ir_bytes, 1.0]
                    for r in group
                ]
            )
            (c, latency, per_byte, e), *_ = np.linalg.lstsq(terms, measured)
            lines.append(
                f"- {name}: measured = {c:.2f} x compute + {latency * 1e6:.0f} us x collectives"
                f" + {per_byte * 1e12:.0f} us/MB"
                f" + {e * 1e3:.3f} ms"
            )
    return lines


CALIBRATED = ("intra: ", "inter: ", "compute: ")
"""The `sources` of a calibrated machine that say how its links and compute scales
were measured, with the spread of the links' rounds (`calibration.fit_rounds`)."""


def calibration_lines(base: Machine) -> list[str]:
    """What `base`'s calibration measured and how much its rounds varied, for the
    reader of a run to judge whether the calibration, not the model, decides it: the
    machine's link and compute sources, its links' per-kind collective prices (as the
    machine holds them, which a hand-edited file may have changed since calibration),
    and its compute scales (none on a preset)."""
    lines = [f"# {source}" for source in base.sources if source.startswith(CALIBRATED)]
    links = (("intra", base.intra), ("inter", base.inter))
    lines += [
        f"# {name} per collective kind: "
        + "; ".join(
            f"{kind} {price.bandwidth / 1e9:.3g} GB/s, {price.latency_s * 1e6:.3g} us"
            for kind, price in link.collectives
        )
        for name, link in links
        if link is not None and link.collectives
    ]
    scales = ", ".join(f"{setup} x{scale:.3g}" for setup, scale in base.compute_scales)
    return [*lines, f"# compute scales: {scales or 'none'}"]


# ------------------------------------------------------------------ driver


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--machine",
        default="local",
        help="machine file or preset (local: the last 'tasoc machine calibrate --processes "
        "2 --devices 2')",
    )
    parser.add_argument(
        "--models", default=None, help=f"comma-separated ({','.join(VALIDATE_MODELS)})"
    )
    parser.add_argument("--setups", default=",".join(SETUPS), help="comma-separated")
    parser.add_argument("--randoms", type=int, default=None, help=f"random plans ({RANDOMS})")
    parser.add_argument("--rounds", type=int, default=None, help=f"timed rounds ({ROUNDS})")
    parser.add_argument("--budget", type=int, default=None, help=f"mcmc proposals ({BUDGET})")
    parser.add_argument("--quick", action="store_true", help="one model, few rounds")
    parser.add_argument("--json", type=Path, help="also write every row (and its plan) here")
    parser.add_argument(
        "--reprice",
        type=Path,
        metavar="ROWS",
        help="measure nothing: simulate the plans of the rows a --json run wrote again, "
        "with this code on --machine, against their saved measurements",
    )
    worker_options = parser.add_argument_group("worker (set by the launcher)")
    worker_options.add_argument("--worker", help=argparse.SUPPRESS)
    worker_options.add_argument("--processes", type=int, help=argparse.SUPPRESS)
    worker_options.add_argument("--coordinator", help=argparse.SUPPRESS)
    worker_options.add_argument("--process-id", type=int, help=argparse.SUPPRESS)
    worker_options.add_argument("--devices", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quick = args.quick
    args.models = (args.models or ",".join(QUICK_MODELS if quick else VALIDATE_MODELS)).split(",")
    unknown = sorted(m for m in args.models if m not in MODELS)
    if unknown:
        parser.error(f"unknown model {', '.join(unknown)}; known: {', '.join(MODELS)}")
    args.setups = args.setups.split(",")
    if bad := sorted(set(args.setups) - set(SETUPS)):
        parser.error(f"unknown setup {', '.join(bad)}; known: {', '.join(SETUPS)}")
    args.randoms = (
        args.randoms if args.randoms is not None else (QUICK_RANDOMS if quick else RANDOMS)
    )
    args.rounds = args.rounds or (QUICK_ROUNDS if quick else ROUNDS)
    args.budget = args.budget or (QUICK_BUDGET if quick else BUDGET)
    return args


def use_devices(count: int) -> None:
    """At least `count` fake CPU devices in this process: made now, unless JAX's
    backends already run (a test process makes its own, enough for a mesh of 2)."""
    with contextlib.suppress(RuntimeError):
        jax.config.update("jax_num_cpu_devices", count)
    if len(jax.devices()) < count:
        raise SystemExit(f"sim_validate: needs {count} JAX devices, has {len(jax.devices())}")


@dataclass
class Results:
    rows: list[Row]
    goals: Goals
    notes: dict[str, str]


def header(args: argparse.Namespace, base: Machine) -> None:
    """The run's first lines: date, load, versions, the machine and its calibration."""
    load = os.getloadavg()
    print(
        f"# {datetime.date.today()}, {os.cpu_count()} cores, load {load[0]:.2f} {load[1]:.2f} "
        f"{load[2]:.2f} before, {versions()}"
    )
    if args.reprice:
        measured_how = f"measured as saved in {args.reprice} (re-priced, nothing measured now)"
    else:
        measured_how = (
            f"measured on this machine, median of {args.rounds} interleaved rounds, "
            f"each a mean over ~{SAMPLE_S * 1e3:.0f} ms"
        )
    print(f"# simulated on {base.name} ({args.machine}); {measured_how}")
    print("\n".join(calibration_lines(base)))


def report(rows: Sequence[Row], notes: dict[str, str]) -> Goals:
    """The table, notes, goals, misordered pairs, fits and load after, printed."""
    goals = goals_of(rows)
    print(table(rows))
    for name, note in notes.items():
        print(f"\nnote: {name}: {note}")
    print("\nGoals:")
    print("\n".join(goals.lines()))
    if lines := misranked(rows):
        print("\nPairs the simulator orders unlike the measurement:")
        print("\n".join(lines))
    print("\nLeast-squares fit per setup:")
    print("\n".join(fits(rows)))
    load = os.getloadavg()
    print(
        f"\n# load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} after; "
        f"goals {'met' if goals.met else 'MISSED'}"
    )
    return goals


def measured_rows(args: argparse.Namespace, base: Machine) -> tuple[list[Row], dict[str, str]]:
    """The plans of `args.models`, measured in each setup of `args.setups` and
    simulated on its view of `base`."""
    views = {name: SETUPS[name].view(base) for name in args.setups}
    first = views[args.setups[0]][0]
    plans = [c for name in args.models for c in candidates(name, first, args.budget, args.randoms)]
    rows, notes = [], {}
    for name, (cluster, note) in views.items():
        setup = SETUPS[name]
        modules = [c.module for c in plans]
        if setup.processes == 1:
            runs = measured_here(modules, args.rounds)
        else:
            runs = measured_in_processes(setup, modules, args.rounds)
        rows += [row_of(setup, cluster, c, m) for c, m in zip(plans, runs, strict=True)]
        if note:
            notes[name] = note
        print(f"  {name}: measured", file=sys.stderr, flush=True)
    return rows, notes


def repriced_rows(args: argparse.Namespace, base: Machine) -> tuple[list[Row], dict[str, str]]:
    """`args.reprice`'s rows simulated again (`repriced`), with how they moved."""
    pairs = repriced(saved_rows(args.reprice), base, args.budget, args.randoms)
    if not pairs:
        raise SavedError(f"no row of {args.reprice} could be planned again")
    print("# the simulated times against the saved ones:")
    print("\n".join(f"# {line[2:]}" for line in then_and_now(pairs)))
    rows = [row for _, row in pairs]
    views = {row.setup: SETUPS[row.setup].view(base) for row in rows}
    return rows, {name: note for name, (_, note) in views.items() if note}


def main(argv: Sequence[str] | None = None) -> Results | None:
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return None
    use_devices(MESH)
    base = machine(args.machine)
    header(args, base)
    try:
        rows, notes = (repriced_rows if args.reprice else measured_rows)(args, base)
    except SavedError as err:
        raise SystemExit(f"sim_validate: error: {err}") from None
    if args.json:
        args.json.write_text(json.dumps([row.to_json() for row in rows], indent=1))
    goals = report(rows, notes)
    return Results(rows, goals, notes)


if __name__ == "__main__":
    results = main()
    sys.exit(0 if results is None or results.goals.met else 1)
