"""The memory a program needs when run in program order: peak device bytes and their kind.

The order of `@main`'s ops is a schedule (DESIGN.md §2 `memory`): run in that order,
the device bytes held at once peak somewhere, and that peak is what a device must
hold. For a training step it is the figure that placement (swapping,
rematerialization) has to beat, so it is split by what the bytes are, as SwapAdvisor
and the frameworks' memory reports split it:

- params: `graph.param` arguments and the results that replace them;
- optimizer state: `graph.state` arguments and the results that replace them;
- inputs: the other arguments (inputs, labels);
- saved activations: results of the ops the loss depends on (forward and loss);
- gradients: every other result (the backward pass and the update's temporaries).

A program without a loss (a forward program, or one that marks none) has no backward
part: all its results are activations. `training.py` says which argument and result
is which.

There is one rule for when a value holds memory, the schedule's replay
(`memory.replay`, docs/memory.md "Peak device memory"): an argument is the caller's
and is held for the whole step (unless a `memory.free` releases it), a result from
the op that makes it to its last reader (returned values: to the end; a result
nothing reads: at its op only), and an op's operands and results are all held while
it runs. `peak_memory` is that replay with each value's kind, so its peak is the
replay's — the figure the placement pass reports as `unplaced_peak_bytes` and the
verifier checks a capacity against — at the same op. Linear time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import IntEnum

from xdsl.dialects import func
from xdsl.ir import BlockArgument, Operation, OpResult, SSAValue

from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.limits import format_bytes
from tasoc.ir.memory import replay
from tasoc.ir.program import arg_infos, entry_block, return_values
from tasoc.ir.training import TrainingSignature, training_signature


class Kind(IntEnum):
    """What a live value is, for the split of the peak (module docstring)."""

    PARAMS = 0
    GRADIENTS = 1
    OPTIMIZER_STATE = 2
    ACTIVATIONS = 3
    INPUTS = 4


@dataclass(frozen=True, slots=True)
class MemorySplit:
    """Bytes live at one point, by kind."""

    params: int
    gradients: int
    optimizer_state: int
    activations: int
    inputs: int

    @property
    def total(self) -> int:
        return self.params + self.gradients + self.optimizer_state + self.activations + self.inputs


@dataclass(frozen=True, slots=True)
class PeakMemory:
    """Where a program run in block order holds the most device bytes, and what they are.

    `op` is the 0-based position of the op in `@main`'s block where the peak is first
    reached, and `op_name` its name (`Replay.peak_op`); both None when the peak is at
    the start, before any op: only when no op holds as much as the arguments alone (a
    program without ops, or a placed one whose `memory.free`s release arguments).
    """

    peak_bytes: int
    op: int | None
    op_name: str | None
    split: MemorySplit

    def describe(self) -> str:
        """One line: `peak 12.3 MiB live at op 57 (graph.conv2d_grad_input): params ...`."""
        where = "at the start" if self.op is None else f"at op {self.op} ({self.op_name})"
        parts = (
            ("params", self.split.params),
            ("gradients", self.split.gradients),
            ("optimizer state", self.split.optimizer_state),
            ("saved activations", self.split.activations),
            ("inputs", self.split.inputs),
        )
        kinds = ", ".join(f"{name} {format_bytes(count)}" for name, count in parts)
        return f"peak {format_bytes(self.peak_bytes)} live {where}: {kinds}"

    def to_json(self) -> dict[str, object]:
        return {
            "peak_bytes": self.peak_bytes,
            "op": self.op,
            "op_name": self.op_name,
            "split_bytes": asdict(self.split),
        }


def peak_memory(function: func.FuncOp) -> PeakMemory:
    """The peak device bytes of `function` run in block order, split by kind: the
    replay's peak and op (module docstring), each held value classified by `_kinds`."""
    kinds = _kinds(function, return_values(function))
    run = replay(function, kind=lambda value: kinds.get(value, Kind.GRADIENTS))
    at = run.peak_op
    split = run.peak_split
    return PeakMemory(
        peak_bytes=run.peak_bytes,
        op=at,
        op_name=None if at is None else run.ops[at].name,
        split=MemorySplit(*(split.get(kind, 0) for kind in Kind)),
    )


def _kinds(function: func.FuncOp, returned: tuple[SSAValue, ...]) -> dict[SSAValue, Kind]:
    """The kind of every value that is not a gradient (module docstring)."""
    signature = training_signature(function)
    arguments = entry_block(function).args
    kinds: dict[SSAValue, Kind] = {}
    if signature is None:
        infos = arg_infos(function)
        params = tuple(index for index, info in enumerate(infos) if info.is_param)
        signature = TrainingSignature(None, (), (), params, (), (), ())
    own = {index: Kind.PARAMS for index in signature.params}
    own.update({index: Kind.OPTIMIZER_STATE for index in signature.state})
    if signature.loss is None:
        for op in entry_block(function).ops:
            kinds.update({result: Kind.ACTIVATIONS for result in op.results})
    else:
        kinds.update({result: Kind.ACTIVATIONS for result in _ancestors(returned[signature.loss])})
    for result, argument in signature.replaces:
        if argument in own:
            kinds[returned[result]] = own[argument]
    for index, argument in enumerate(arguments):
        kinds[argument] = own.get(index, Kind.INPUTS)
    return kinds


def _ancestors(value: SSAValue) -> set[OpResult]:
    """The results of `value`'s defining op and of every op it depends on."""
    seen: set[Operation] = set()
    stack = [value]
    results: set[OpResult] = set()
    while stack:
        current = stack.pop()
        if isinstance(current, BlockArgument) or not isinstance(current, OpResult):
            continue
        op = current.op
        if op in seen:
            continue
        seen.add(op)
        results.update(op.results)
        stack.extend(op.operands)
    return results


def value_kinds(dag: Dag, signature: TrainingSignature | None) -> dict[Value, str]:
    """What every value of `dag` is, as `peak_memory` splits a training step's memory:
    params and optimizer state (arguments and the results replacing them), inputs
    (other arguments), saved activations (results of the ops the loss depends on; every
    result of a program without a loss) and gradients (the rest)."""
    params = (
        signature.params
        if signature
        else tuple(i for i, arg in enumerate(dag.args) if arg.attr("is_param"))
    )
    state = signature.state if signature else ()
    own = {i: "params" for i in params} | {i: "optimizer_state" for i in state}
    kinds = {arg.out: own.get(i, "inputs") for i, arg in enumerate(dag.args)}
    loss = signature.loss if signature else None
    forward = set(dag.ops) if loss is None else _node_ancestors(dag.outputs[loss].node)
    for node in dag.ops:
        for value in node.results:
            kinds[value] = "activations" if node in forward else "gradients"
    for result, argument in signature.replaces if signature else ():
        if argument in own:
            kinds[dag.outputs[result]] = own[argument]
    return kinds


def _node_ancestors(node: Node) -> set[Node]:
    seen: set[Node] = set()
    stack = [node]
    while stack:
        top = stack.pop()
        if top not in seen and not top.is_arg:
            seen.add(top)
            stack.extend(v.node for v in top.inputs)
    return seen
