"""`tasoc run --steps N`: run a training step N times, feeding its updates back.

A training step (`autodiff{... emit=step}`, DESIGN.md §2) returns the loss and, for
each param and optimizer-state argument, the result marked `graph.replaces = N` that
is its next value. The loop calls the step, puts each such result in place of the
argument it replaces, and reports the loss of every step. The other arguments (the
batch and its labels) stay the same each step, so the loss of any trainable model
falls as it fits that batch.

On JAX the arguments stay on the device between steps and the replaced ones are
donated to the call (`lower(module, donate=...)`), so XLA updates params and state in
place instead of holding two copies; only the loss comes back to the host each step
(which also waits for the step, so the per-step time is the step's). A sharded step
keeps its arguments on its meshes, each laid out as the step reads it (its new weights
leave in their arguments' layouts), donated too when it runs on one mesh (segments on
device groups are jitted apart and cannot donate). On the numpy reference every
step is an interpreter run.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends.numpy import run_reference
from tasoc.driver.errors import DriverError
from tasoc.ir.parallel import is_sharded, meshes
from tasoc.ir.training import LOSS_ATTR, REPLACES_ATTR, TrainingSignature
from tasoc.passes.progress import progress_bar

if TYPE_CHECKING:
    from tasoc.backends.jax import JaxProgram
    from tasoc.backends.jax.sharded import ShardedProgram

Step = Callable[[], float]
"""One training step on the loop's current arguments; returns the step's loss."""


@dataclass(frozen=True, slots=True)
class TrainingRun:
    """The loss and the wall-clock seconds of each step, in order."""

    losses: tuple[float, ...]
    seconds: tuple[float, ...]


def steppable(signature: TrainingSignature | None, input_name: str) -> TrainingSignature:
    """The signature of a program `--steps` can run: one that computes a loss and says
    which arguments its results replace; DriverError otherwise."""
    if signature is None or not signature.replaces:
        raise DriverError(
            f"{input_name}: --steps runs a training step, and @main has no result marked "
            f"{REPLACES_ATTR} (make one with autodiff{{... emit=step}})"
        )
    if signature.loss is None:
        raise DriverError(f"{input_name}: --steps prints the loss, and @main has no {LOSS_ATTR}")
    return signature


def train(
    module: ModuleOp,
    signature: TrainingSignature,
    arguments: Sequence[np.ndarray],
    steps: int,
    backend: str,
    on_step: Callable[[int, float], None],
) -> TrainingRun:
    """Run `steps` training steps from `arguments` on `backend`, calling `on_step(step,
    loss)` (1-based) after each; a progress bar on a terminal for runs over a second."""
    step = (_jax_step if backend == "jax" else _reference_step)(module, signature, arguments)
    return loop(step, steps, on_step)


def loop(step: Step, steps: int, on_step: Callable[[int, float], None]) -> TrainingRun:
    """Call `step()` (one training step, returning its loss) `steps` times, timing each
    and calling `on_step(number, loss)` after it, under a progress bar: the loop every
    runner of training steps shares."""
    losses: list[float] = []
    seconds: list[float] = []
    with progress_bar("training", unit="step", total=steps, delay=1.0) as update:
        for number in range(1, steps + 1):
            start = time.perf_counter()
            loss = step()
            seconds.append(time.perf_counter() - start)
            losses.append(loss)
            on_step(number, loss)
            update(number, loss=f"{loss:.4g}")
    return TrainingRun(tuple(losses), tuple(seconds))


def _reference_step(
    module: ModuleOp, signature: TrainingSignature, arguments: Sequence[np.ndarray]
) -> Step:
    current = list(arguments)

    def step() -> float:
        results = run_reference(module, current)
        for result, argument in signature.replaces:
            current[argument] = results[result]
        return float(results[signature.loss])  # type: ignore[index]

    return step


def _jax_step(
    module: ModuleOp, signature: TrainingSignature, arguments: Sequence[np.ndarray]
) -> Step:
    return JaxSteps(module, signature, arguments).step


class JaxSteps:
    """A training step lowered for JAX (on its mesh when sharded), its arguments kept
    on the devices between steps and its params and state fed back (the module
    docstring). `results` holds the last step's results; `host_arguments` the current
    arguments as NumPy arrays (what a re-partitioned run carries over to a new layout:
    `repartition.py`)."""

    def __init__(
        self, module: ModuleOp, signature: TrainingSignature, arguments: Sequence[np.ndarray]
    ) -> None:
        # JAX takes a second to import: only when used.
        from tasoc.backends.jax import lower
        from tasoc.backends.jax.sharded import lower_sharded

        replaced = [argument for _, argument in signature.replaces]
        try:
            if is_sharded(module):
                # On its mesh; each new weight leaves laid out as the argument it
                # replaces, in its buffer (the simulator's memory assumes so) unless the
                # program runs on device groups, whose segments cannot donate.
                one_mesh = len(meshes(module)) == 1
                program: JaxProgram | ShardedProgram = lower_sharded(
                    module, replaced if one_mesh else ()
                )
            else:
                program = lower(module, donate=replaced)
        except ValueError as err:  # an op without a JAX lowering, too few devices
            raise DriverError(f"cannot run on jax: {err}") from None
        self.program = program
        self.signature = signature
        self.current = list(program.device_args(arguments))
        self.results: Sequence[object] = ()

    def step(self) -> float:
        """One step on the current arguments; returns its loss."""
        with warnings.catch_warnings():
            # A backend that cannot reuse a donated buffer says so on every call; the
            # step is still right, only not in place.
            warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
            self.results = self.program.fn(*self.current)
        for result, argument in self.signature.replaces:
            self.current[argument] = self.results[result]
        return float(self.results[self.signature.loss])  # type: ignore[index, arg-type]

    def host_arguments(self) -> list[np.ndarray]:
        """The current arguments (params and state as the last step left them)."""
        return [np.asarray(value) for value in self.current]
