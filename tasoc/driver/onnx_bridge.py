"""The driver's side of the ONNX bridge: `--input-shape`, import, export, the `.npz`
side file and the onnxruntime comparison.

An ONNX file carries its weights; a tasoc program carries only their names (`{graph.param}`
arguments). Whatever the driver does with an ONNX input, it keeps the imported values
beside the module and hands them on: to the exporter (`-o out.onnx`), to an `.npz` beside
text IR (`-o out.mlir` → `out.npz`, which `tasoc run --params` reads back), and to the
run (`tasoc run model.onnx`). The `onnx` and `onnxruntime` packages are imported only
here and only when used, so `.mlir` runs never load them.
"""

from __future__ import annotations

import argparse
import os
import re
import zipfile
from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tasoc.driver.errors import DriverError, UsageError, note, one_line
from tasoc.ir.program import ProgramError, arg_infos, entry_function

if TYPE_CHECKING:
    import onnx

ONNX = "onnx"
"""The frontend name and file extension of ONNX models."""

InputShapes = dict[str, tuple[int, ...]]

_DIMS = re.compile(r"[1-9]\d*(x[1-9]\d*)*")


def input_shape_arg(text: str) -> tuple[str, tuple[int, ...]]:
    """argparse type of `--input-shape NAME=D0xD1x...` (dims >= 1).

    The last `=` splits, so an ONNX input name may itself hold one.
    """
    name, separator, dims = text.rpartition("=")
    if not separator or not name or not _DIMS.fullmatch(dims):
        raise argparse.ArgumentTypeError(
            f"expected NAME=DIMS with dims >= 1 joined by 'x' (e.g. input=1x3x224x224), "
            f"got '{text}'"
        )
    return name, tuple(int(dim) for dim in dims.split("x"))


def collect_input_shapes(pairs: Sequence[tuple[str, tuple[int, ...]]] | None) -> InputShapes:
    """The repeated `--input-shape` options as one mapping; a name given two shapes is an
    error rather than a silent last-one-wins."""
    shapes: InputShapes = {}
    for name, shape in pairs or ():
        if shapes.get(name, shape) != shape:
            raise UsageError(f"--input-shape gives '{name}' two different shapes")
        shapes[name] = shape
    return shapes


def require_onnx_for_shapes(frontend: str, shapes: InputShapes) -> None:
    """`--input-shape` only means something for an ONNX input; saying so beats ignoring it."""
    if shapes and frontend != ONNX:
        raise UsageError("--input-shape applies to .onnx inputs only")


def import_model(
    source: bytes | str, name: str, shapes: InputShapes
) -> tuple[ModuleOp, dict[str, np.ndarray]]:
    """`import_onnx` on INPUT (its path, or the bytes read from stdin); its one-line
    error, prefixed with INPUT's name, and its notes (an opset upgraded) as
    `tasoc: note:` lines, prefixed the same way."""
    from tasoc.backends.onnx import OnnxImportError, import_onnx

    notes: list[str] = []
    try:
        imported = import_onnx(source, shapes, notes)
    except OnnxImportError as err:
        # The importer names its Python parameter; on the command line it is the option.
        message = re.sub(r"^input_shapes ", "--input-shape ", one_line(str(err)))
        if isinstance(source, str):  # the message starts with INPUT's name already
            message = message.replace(f"'{source}'", "the file")
        raise DriverError(f"{name}: {message}") from None
    for message in notes:
        note(f"{name}: {message}")
    return imported


def program_weights(module: ModuleOp, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The values of the weights `module` still takes: a pass may have dropped some, and
    `tasoc run --params` rejects names the program does not take."""
    names = {info.name for info in arg_infos(entry_function(module)) if info.is_param}
    return {name: value for name, value in values.items() if name in names}


def export_model(
    module: ModuleOp, weights: Mapping[str, np.ndarray] | None, seed: int
) -> onnx.ModelProto:
    """`export_onnx` with its refusals as one-line DriverErrors."""
    from tasoc.backends.onnx import OnnxExportError, export_onnx

    try:
        return export_onnx(module, weights, seed)
    except (OnnxExportError, ProgramError) as err:
        raise DriverError(f"cannot export to ONNX: {one_line(str(err))}") from None


def takes_weights(module: ModuleOp) -> bool:
    """Whether `@main` has any `{graph.param}` argument (so random ones are worth a note)."""
    return any(info.is_param for info in arg_infos(entry_function(module)))


def weights_path(output: str) -> str:
    """Where the weights of an ONNX input go beside text IR written to `output`."""
    return f"{os.path.splitext(output)[0]}.npz"


def write_npz(stream: IO[bytes], values: Mapping[str, np.ndarray]) -> None:
    """An `.npz` as `np.savez` writes it, built member by member because `np.savez` takes
    the names as keyword arguments, and a weight named `file` would collide with its own.

    bfloat16 values are written as float32, exactly: `.npy` has no bfloat16 (NumPy would
    save raw 2-byte values, which read back as no number), and `--params` casts floats
    to the argument's type. Members may pass 2 GiB (zip64), as a large weight does."""
    with zipfile.ZipFile(stream, "w") as archive:
        for name, value in values.items():
            array = np.asarray(value)
            if array.dtype == ml_dtypes.bfloat16:
                array = array.astype(np.float32)
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, array, allow_pickle=False)


def onnxruntime_outputs(
    source: onnx.ModelProto | str, activations: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """Run `source` (a model, or an ONNX file with its external data) under onnxruntime
    (CPU) with `activations` as its non-initializer inputs.

    They pair by position: the activation arguments of an imported `@main` are the
    model's non-initializer inputs in order, as are the inputs of an exported model.
    """
    import onnx

    from tasoc.backends.onnx.errors import first_line
    from tasoc.backends.onnx.runtime import inference_session

    model = (
        source
        if isinstance(source, onnx.ModelProto)
        else onnx.load(source, load_external_data=False)
    )
    initializers = {tensor.name for tensor in model.graph.initializer}
    inputs = [info for info in model.graph.input if info.name not in initializers]
    if len(inputs) != len(activations):
        raise DriverError(
            f"the ONNX model takes {len(inputs)} inputs, @main {len(activations)} activations"
        )
    feeds = {
        info.name: np.asarray(value).astype(
            onnx.helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type)
        )
        for info, value in zip(inputs, activations, strict=True)
    }
    try:
        return [np.asarray(output) for output in inference_session(source).run(None, feeds)]
    except Exception as err:  # its C++ binding raises direct Exception subclasses (Fail, ...)
        raise DriverError(f"onnxruntime cannot run the model: {first_line(err)}") from None
