"""The weight values of a text program: `--params FILE`, or the `.npz` beside INPUT.

A tasoc program names its weights (`{graph.param}` arguments) but never holds their
values (DESIGN.md §2). `tasoc opt m.onnx -o m.mlir` writes them to `m.npz`; so that
import → optimize → export keeps them, `tasoc opt m.mlir ... -o out.onnx` and
`tasoc run m.mlir` read `m.npz` when it lies beside INPUT (same stem), or the file
`--params` names. The values are checked against the program's signature when they
are read (`tasoc.backends.arguments.load_inputs`: every weight present, shapes and
element kinds right, no stray names), so a mismatch is one line before any work.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends.arguments import load_inputs
from tasoc.driver.errors import DriverError
from tasoc.driver.onnx_bridge import weights_path
from tasoc.ir.program import ProgramError, arg_infos, entry_function

WEIGHTS_EXTENSION = ".npz"
TEXT_EXTENSION = ".mlir"


@dataclass(frozen=True)
class WeightsFile:
    """An `.npz` of argument values by name, and how it was chosen."""

    path: str
    beside: str | None = None
    """The INPUT it was found beside, or None when `--params` named it."""

    @property
    def kind(self) -> str:
        """How messages name the file's role."""
        return "--params file" if self.beside is None else f"weights file beside {self.beside}"


def find_weights(input_spec: str | None, params: str | None) -> WeightsFile | None:
    """`--params`, else the `.npz` with INPUT's stem when INPUT is a `.mlir` file that
    has one beside it, else None (the program's weights are then drawn at random)."""
    if params is not None:
        return WeightsFile(params)
    if input_spec is None or os.path.splitext(input_spec)[1] != TEXT_EXTENSION:
        return None
    candidate = weights_path(input_spec)
    return WeightsFile(candidate, input_spec) if os.path.isfile(candidate) else None


def load_arguments(module: ModuleOp, weights: WeightsFile, seed: int) -> list[np.ndarray]:
    """Every argument of `@main` in order: the file's values, activations it lacks
    drawn from `seed`; a file that does not fit the program is a one-line error."""
    try:
        return load_inputs(module, weights.path, seed)
    except OSError as err:
        raise DriverError(
            f"cannot read {weights.kind} '{weights.path}': {err.strerror or err}"
        ) from None
    except (ValueError, KeyError, EOFError, zipfile.BadZipFile, ProgramError) as err:
        # np.load raises these for a file that is not an .npz; load_inputs names the file.
        message = str(err) if weights.path in str(err) else f"{weights.path}: {err}"
        raise DriverError(f"bad {weights.kind}: {message}") from None


def load_weights(module: ModuleOp, weights: WeightsFile) -> dict[str, np.ndarray]:
    """The values of `module`'s weights by argument name, read from `weights`."""
    values = load_arguments(module, weights, seed=0)
    infos = arg_infos(entry_function(module))
    return {info.name: value for info, value in zip(infos, values, strict=True) if info.is_param}
