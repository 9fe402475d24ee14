"""`autodiff`: turn a forward program into one training step, in the `graph` dialect.

    tasoc opt model.mlir -p 'autodiff{loss=softmax-cross-entropy optimizer=adam lr=1e-3}'

`@main(inputs..., params...) -> output` becomes

    @main(inputs..., labels, params..., optimizer state...) -> (loss, new params..., new state...)

(`emit=gradients`: `-> (loss, gradients...)`, no state), with the marks of
`tasoc.ir.training` saying which result replaces which argument. Forward, loss,
backward and update are ordinary ops, so every later pass (equality-rewrite,
soap-shard, placement) optimizes the step like any program. The pass is a shell:
read `@main` into the light graph, build the step there (`step.py`), write it back,
report. docs/autodiff.md has the program convention, the gradient of every op and
the numerics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from tasoc.ir import dag as dag_module
from tasoc.ir.dag import Dag
from tasoc.ir.limits import format_bytes
from tasoc.ir.liveness import peak_memory
from tasoc.ir.program import entry_function
from tasoc.ir.shapes import ShapeError
from tasoc.ir.training import is_training_program
from tasoc.passes.autodiff.losses import Loss
from tasoc.passes.autodiff.optimizers import Optimizer
from tasoc.passes.autodiff.step import forward_with_loss, training_step
from tasoc.passes.kinds import Kind, PassContract, require
from tasoc.passes.options import check_at_least, check_fraction, check_option_types
from tasoc.passes.report import current_report
from tasoc.passes.summary import Summary


class AutodiffFailed(PassFailedException):
    """A program `autodiff` cannot differentiate, in one line, which the driver prints
    as `tasoc: error: autodiff: ...`."""

    def __init__(self, message: str) -> None:
        super().__init__(f"autodiff: {message}")


@dataclass(frozen=True)
class AutodiffPass(ModulePass):
    """Options (docs/autodiff.md), checked when the pass is built."""

    name: ClassVar[str] = "autodiff"

    contract: ClassVar[PassContract] = PassContract(
        refuses={
            Kind.TRAINING: "@main is already a training step (it computes a loss); apply "
            "autodiff to the forward program",
            Kind.SHARDED: "the program is sharded; run autodiff before soap-shard (gradients "
            "of a sharded forward program are not supported: each gradient would need a "
            "sharding of its own, and the collectives between them)",
            Kind.PLACED: "the program is placed; run autodiff before placement (placement "
            "plans the memory of the training step autodiff writes)",
        },
        adds=frozenset({Kind.TRAINING}),
        removes=frozenset({Kind.GRAPH}),
    )
    """docs/decisions.md says why a sharded forward program is refused, not differentiated."""

    loss: Loss = "sum"
    """What the step minimizes: the output's sum, its mean squared error to labels, or
    its softmax cross-entropy with integer class labels (classes on the last axis)."""
    optimizer: Optimizer = "sgd"
    """The update `emit=step` applies to each trained weight."""
    lr: int | float = 0.01
    """Learning rate (> 0)."""
    momentum: int | float = 0.9
    """momentum: the velocity's decay, in [0, 1)."""
    nesterov: bool = False
    """momentum: Nesterov's look-ahead update."""
    beta1: int | float = 0.9
    """adam: decay of the first moment, in [0, 1)."""
    beta2: int | float = 0.999
    """adam: decay of the second moment, in [0, 1)."""
    epsilon: int | float = 1e-8
    """adam: added to the root of the second moment (>= 0)."""
    bn_momentum: int | float = 0.1
    """Weight of the batch in the running mean/variance of each batchnorm, in [0, 1]."""
    labels: str | None = None
    """An input argument of the forward program to use as the labels (by name); by
    default the step gets a new `labels` argument."""
    emit: Literal["step", "gradients"] = "step"
    """The whole update, or the loss and the gradients only."""

    def __post_init__(self) -> None:
        check_option_types(self)
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a positive finite number, got {self.lr}")
        for fraction in ("momentum", "beta1", "beta2"):
            check_fraction(self, fraction)
        check_fraction(self, "bn_momentum", top_included=True)
        if not math.isfinite(self.epsilon):
            raise ValueError(f"epsilon must be finite, got {self.epsilon}")
        check_at_least(self, "epsilon", 0)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require(self.contract, op, AutodiffFailed)
        # The contract refuses steps with a loss; marks without one (a hand-written
        # update loop) are no forward program either.
        if is_training_program(entry_function(op)):
            raise AutodiffFailed(
                "@main is already a training program (its arguments or results carry "
                "graph.state/labels/replaces/gradient_of marks); apply autodiff to the "
                "forward program"
            )
        forward = dag_module.from_module(op)
        try:
            step = training_step(forward, self)
        except (ShapeError, ValueError) as err:
            raise AutodiffFailed(str(err)) from None
        dag_module.write_back(op, step.dag)
        memory = peak_memory(entry_function(op))
        current_report().section(self.name).update(
            loss=self.loss,
            optimizer=self.optimizer if self.emit == "step" else None,
            lr=self.lr if self.emit == "step" else None,
            emit=self.emit,
            forward_ops=forward.num_ops,
            step_ops=step.dag.num_ops,
            trained_weights=step.trained,
            running_statistics=step.running_statistics,
            state_arguments=step.state,
            memory=memory.to_json(),
        )

    def summary(self, section: Mapping[str, Any]) -> Summary:
        """The loss and optimizer, the weights trained, and the step's peak memory with
        its largest parts (`summary.py`)."""
        memory = section["memory"]
        split = memory["split_bytes"]
        trained = f"{section['trained_weights']} weight tensors"
        if section["optimizer"] is None:
            what = f"loss {section['loss']}: the gradients of {trained}"
        else:
            what = (
                f"loss {section['loss']}, optimizer {section['optimizer']} (lr {section['lr']:g}): "
                f"a training step of {trained}"
            )
        weights = f" ({format_bytes(split['params'])})" if split.get("params") else ""
        ops = f", {section['step_ops']} ops from {section['forward_ops']}"
        largest = sorted(((n, b) for n, b in split.items() if b), key=lambda item: -item[1])
        parts = ", ".join(f"{name.replace('_', ' ')} {format_bytes(b)}" for name, b in largest[:3])
        at = f" at op {memory['op']} ({memory['op_name']})" if memory.get("op") is not None else ""
        peak = f"peak memory {format_bytes(memory['peak_bytes'])}{at}: {parts}"
        return Summary(what + weights + ops, (peak,))

    def verification_pair(self, before: ModuleOp, after: ModuleOp) -> tuple[ModuleOp, ModuleOp]:
        """The two programs `tasoc opt --verify-each` compares for this pass, which
        changes `@main`'s arguments: the forward program plus the loss
        (`forward_with_loss`, `@main(inputs..., labels, params...) -> loss`) and the
        step's loss alone on the same leading arguments (the step adds optimizer state
        after them, which its loss never reads). So the check is that the step computes
        the loss of the program it was made from; its gradients are checked against
        `jax.grad` by the tests (docs/autodiff.md)."""
        reference = forward_with_loss(dag_module.from_module(before), self)
        step = dag_module.from_module(after)
        loss_only = Dag(step.args[: len(reference.args)], step.outputs[:1], step.name)
        return dag_module.to_module(reference), dag_module.to_module(loss_only)
