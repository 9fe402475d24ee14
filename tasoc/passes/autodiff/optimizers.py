"""The optimizer updates `autodiff{emit=step}` writes after each weight's gradient.

Each optimizer says which state it keeps (per weight, and shared by all) and how
one step updates a weight and its state, in `graph` ops. The conventions are those
of PyTorch and optax, so a step equals the update a user would write in JAX:

- `sgd`: `p - lr * g`; no state.
- `momentum`: `v' = momentum * v + g`, `p - lr * v'` (Nesterov: `p - lr * (g +
  momentum * v')`); one velocity per weight, starting at zero.
- `adam`: `graph.adam_update` (bias-corrected moments, epsilon outside the square
  root); first and second moments per weight, and one shared float32 step counter
  `adam.step` (the number of updates done; float32 counts exactly to 2^24 steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tasoc.ir.dag import Value
from tasoc.ir.shapes import DType, TensorSig
from tasoc.passes.autodiff.writer import StepWriter

Optimizer = Literal["sgd", "momentum", "adam"]

STEP_COUNTER = "adam.step"
"""The name of Adam's shared step counter argument."""

STEP_SIG = TensorSig((), DType.F32)


@dataclass(frozen=True)
class Hyperparameters:
    """The numbers an update uses (the pass's options)."""

    lr: float
    momentum: float
    nesterov: bool
    beta1: float
    beta2: float
    epsilon: float


def slots(optimizer: Optimizer) -> tuple[str, ...]:
    """The state each trained weight gets, as suffixes of its name (`w.m`, `w.v`)."""
    return {"sgd": (), "momentum": ("velocity",), "adam": ("m", "v")}[optimizer]


def shared_state(optimizer: Optimizer) -> tuple[tuple[str, TensorSig], ...]:
    """State kept once for all weights: (name, type)."""
    return ((STEP_COUNTER, STEP_SIG),) if optimizer == "adam" else ()


class Updater:
    """Writes the update of one weight at a time; `shared` holds the shared state's
    arguments and, once a step made them, their new values (`new_shared`)."""

    def __init__(
        self,
        w: StepWriter,
        optimizer: Optimizer,
        hyper: Hyperparameters,
        shared: tuple[Value, ...],
    ) -> None:
        self.w = w
        self.optimizer = optimizer
        self.hyper = hyper
        self.shared = shared
        self._step: Value | None = None

    @property
    def new_shared(self) -> tuple[Value, ...]:
        """New values of the shared state (the counter advances once per step, also
        when no weight had a gradient)."""
        if self.optimizer != "adam":
            return ()
        return (self._this_step(),)

    def _this_step(self) -> Value:
        """Adam's step number of this update: the counter plus one, made once."""
        if self._step is None:
            (counter,) = self.shared
            self._step = self.w.add(counter, self.w.ones(STEP_SIG))
        return self._step

    def update(
        self, param: Value, grad: Value, state: tuple[Value, ...]
    ) -> tuple[Value, tuple[Value, ...]]:
        """The new value of `param` and of its own `state` after one step."""
        w, hyper = self.w, self.hyper
        if self.optimizer == "sgd":
            return w.add(param, w.times(grad, -hyper.lr)), ()
        if self.optimizer == "momentum":
            (velocity,) = state
            velocity = w.add(w.times(velocity, hyper.momentum), grad)
            direction = velocity
            if hyper.nesterov:
                direction = w.add(grad, w.times(velocity, hyper.momentum))
            return w.add(param, w.times(direction, -hyper.lr)), (velocity,)
        first, second = state
        new_param, new_first, new_second = w.node(
            "adam_update",
            param,
            grad,
            first,
            second,
            self._this_step(),
            lr=hyper.lr,
            beta1=hyper.beta1,
            beta2=hyper.beta2,
            epsilon=hyper.epsilon,
        ).results
        return new_param, (new_first, new_second)
