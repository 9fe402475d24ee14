"""Argument values for running a program: random, loaded from `.npz`, and checked.

Every backend runs `@main` on a list of arrays in argument order. `random_inputs`
makes such a list deterministically from a seed, reading the IR to keep the values
meaningful: a model's weights are drawn N(0, 1/fan_in) so that deep stacks of
matmuls and convolutions neither explode nor vanish (an 8-layer BERT stays finite),
batchnorm variances are positive, and embedding ids index a real row. `load_inputs`
takes named values from a file (`tasoc run --params`). `check_arguments` is the one
place that says whether a list of arrays fits a program's signature.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from tasoc.backends import describe, numpy_dtype
from tasoc.ir import graph as G
from tasoc.ir.conversion import ConversionOp
from tasoc.ir.indices import index_operand
from tasoc.ir.limits import check_argument_bytes
from tasoc.ir.program import ArgInfo, arg_infos, argument_bytes, entry_function
from tasoc.ir.shapes import DType, TensorSig
from tasoc.ir.training import STATE_ATTR

_LAYOUT_OPS = (G.ReshapeOp, G.TransposeOp, G.ConcatOp, G.SplitOp, ConversionOp)
"""Ops that move elements without changing them: a weight reshaped or transposed
before a matmul is still that matmul's weight, an id reshaped is still an id, and a
value laid out on devices (`parallel`) or moved between memories (`memory`) is the
value its reader reads (Adam's second moment swapped in is still non-negative)."""

_INT_RANGE = (-8, 8)
"""Integers that are neither ids nor fed to a known op are drawn from this range (from
0 for an unsigned type); booleans are true or false alike."""

_VAR_RANGE = (0.5, 1.5)
"""Batchnorm variances and normalization scales: positive and near 1, like those of a
trained network."""

_STEP_RANGE = (1, 10)
"""Adam's step operand, the 1-based number of an update (its bias correction divides
by 1 - beta**step, so step 0 would divide by zero)."""


def check_arguments(infos: Sequence[ArgInfo], args: Sequence[np.ndarray]) -> None:
    """Raise ValueError, naming the argument, unless `args` fit `infos` exactly."""
    if len(args) != len(infos):
        names = ", ".join(info.name for info in infos)
        raise ValueError(f"@main takes {len(infos)} arguments ({names}), got {len(args)}")
    for index, (info, arg) in enumerate(zip(infos, args, strict=True)):
        array = np.asarray(arg)
        if array.shape != info.sig.shape or array.dtype != numpy_dtype(info.sig.dtype):
            raise ValueError(
                f"argument '{info.name}' (#{index}) expects {info.sig}, got {describe(array)}"
            )


def _uses(value: SSAValue) -> Iterator[tuple[Operation, int, SSAValue]]:
    """(op, operand index, value as that op sees it) for every use of `value`,
    looking through layout ops to the op that does arithmetic with it."""
    for use in value.uses:
        if isinstance(use.operation, _LAYOUT_OPS):
            for result in use.operation.results:
                yield from _uses(result)
        else:
            yield use.operation, use.index, value


_POSITIVE_OPERANDS: dict[type[Operation], tuple[int, ...]] = {
    G.BatchnormOp: (1, 4),
    G.BatchnormTrainOp: (1,),
    G.LayernormOp: (1,),
    G.LogOp: (0,),
    G.SqrtOp: (0,),
    G.ReciprocalOp: (0,),
    G.DivOp: (1,),
    G.PowOp: (0,),
}
"""Operands drawn from `_VAR_RANGE`, by op class: see `_is_positive_operand`."""


def _is_positive_operand(op: Operation, index: int) -> bool:
    """A batchnorm variance, a normalization's scale (batchnorm's, a training
    batchnorm's, layernorm's gamma), the operand of log, sqrt or reciprocal, a divisor
    or the base of a power: drawn from `_VAR_RANGE`. Frameworks start scales at one; a
    scale near zero would also make the backward of a training-mode batchnorm so
    ill-conditioned in float32 that two correct backends disagree; the others stay in
    their op's domain, away from its pole."""
    return index in _POSITIVE_OPERANDS.get(type(op), ())


def _fan_in(op: Operation, index: int, value: SSAValue) -> int | None:
    """Fan-in of `value` as the weight operand `index` of a contraction, else None."""
    shape = G.sig_of(value.type).shape
    if isinstance(op, G.Conv2dOp) and index == 1:
        return math.prod(shape[1:])
    if isinstance(op, G.MatmulOp):
        return shape[-1] if index == 0 else shape[-2]
    return None


def _random_value(info: ArgInfo, value: SSAValue, rng: np.random.Generator) -> np.ndarray:
    sig: TensorSig = info.sig
    dtype = numpy_dtype(sig.dtype)
    if any(name == STATE_ATTR for name, _ in info.attributes):
        return np.zeros(sig.shape, dtype)  # optimizer state starts at zero (Adam's step too)
    uses = list(_uses(value))
    if sig.dtype == DType.BOOL:
        return rng.integers(0, 2, sig.shape).astype(dtype)
    if not sig.dtype.is_float:
        bounds = [found.bound(op) for op, index, _ in uses if (found := index_operand(op, index))]
        if bounds and min(bounds) < 1 and sig.size:
            raise ValueError(f"argument '{info.name}' indexes an axis with no entries")
        if bounds:
            low, high = 0, min(bounds)
        elif any(_is_positive_operand(op, index) for op, index, _ in uses):
            low, high = 1, _INT_RANGE[1]  # an integer divisor, say: never zero
        else:
            low, high = _INT_RANGE
        return rng.integers(max(low, np.iinfo(dtype).min), high, sig.shape).astype(dtype)
    if any(_is_positive_operand(op, index) for op, index, _ in uses):
        return rng.uniform(*_VAR_RANGE, sig.shape).astype(dtype)
    if any(isinstance(op, G.AdamUpdateOp) and index == 3 for op, index, _ in uses):
        return np.abs(rng.standard_normal(sig.shape)).astype(dtype)  # a second moment
    if any(isinstance(op, G.AdamUpdateOp) and index == 4 for op, index, _ in uses):
        return rng.integers(*_STEP_RANGE, sig.shape).astype(dtype)
    fan_ins = [f for op, index, seen in uses if (f := _fan_in(op, index, seen))]
    scale = 1.0 / math.sqrt(max(fan_ins)) if info.is_param and fan_ins else 1.0
    return (rng.standard_normal(sig.shape) * scale).astype(dtype)


def random_inputs(module: ModuleOp, seed: int = 0) -> list[np.ndarray]:
    """Deterministic random values for every argument of `@main`, in order.

    Optimizer state (`{graph.state}`) is zero, as a training run starts it.
    Floats are N(0, 1); a weight (`{graph.param}`) used as a matmul or convolution
    operand is scaled by 1/sqrt(fan_in); batchnorm variances, normalization scales
    (gamma), the operands of log, sqrt and reciprocal, divisors and the bases of powers
    are uniform in [0.5, 1.5]; integer ids, labels and gather indices are
    uniform over the rows of every table (the classes of every loss, the entries of
    every gathered axis) they index, integer divisors and bases of powers over [1, 8),
    other integers over [-8, 8) (unsigned: [0, 8)), booleans fair coins; Adam's second
    moment is |N(0, 1)| and its step an integer in [1, 10).
    Raises LimitError, before drawing any, when the arguments together are over
    `limits.max_argument_bytes()`.
    """
    function = entry_function(module)
    infos = arg_infos(function)
    check_argument_bytes(argument_bytes(infos), "the arguments of @main")
    rng = np.random.default_rng(seed)
    # np.asarray: numpy returns scalars, not 0-d arrays, for rank-0 draws, and
    # runtimes such as onnxruntime accept only arrays.
    return [
        np.asarray(_random_value(info, arg, rng))
        for info, arg in zip(infos, function.body.block.args, strict=True)
    ]


def value_kind(dtype: np.dtype) -> str:
    """The kind a value is cast within, never across (`load_inputs`, the ONNX export's
    weights): bool, int or float."""
    if dtype == np.bool_:
        return "bool"
    return "int" if np.issubdtype(dtype, np.integer) else "float"


def load_inputs(module: ModuleOp, npz_path: str | Path, seed: int = 0) -> list[np.ndarray]:
    """Arguments of `@main` taken by name from an `.npz` file (`tasoc run --params`).

    Every weight must be in the file; activation inputs missing from it are drawn as
    `random_inputs(module, seed)` would. Values are cast to the declared element type
    within their kind (float64 weights load into f32, say); a name matching no
    argument, a missing weight, a wrong shape or a mix of floats, integers and booleans
    raises ValueError.
    """
    infos = arg_infos(entry_function(module))
    with np.load(npz_path) as data:
        stored = {name: data[name] for name in data.files}
    unknown = sorted(stored.keys() - {info.name for info in infos})
    if unknown:
        raise ValueError(f"{npz_path}: no argument of @main is named {', '.join(unknown)}")
    missing = [info.name for info in infos if info.is_param and info.name not in stored]
    if missing:
        raise ValueError(f"{npz_path}: missing weights {', '.join(missing)}")
    fallback = random_inputs(module, seed)
    values = []
    for info, default in zip(infos, fallback, strict=True):
        if info.name not in stored:
            values.append(default)
            continue
        array = stored[info.name]
        target = numpy_dtype(info.sig.dtype)
        same_kind = value_kind(array.dtype) == value_kind(target)
        if array.shape != info.sig.shape or not same_kind:
            raise ValueError(f"{npz_path}: '{info.name}' expects {info.sig}, got {describe(array)}")
        if array.size and np.issubdtype(target, np.integer):
            # An integer cast wraps silently (int64 2^40 into i32 is 0): refuse instead.
            bounds = np.iinfo(target)
            if array.min() < bounds.min or array.max() > bounds.max:
                raise ValueError(
                    f"{npz_path}: '{info.name}' holds values outside {info.sig.dtype} "
                    f"({array.min()}..{array.max()})"
                )
        values.append(array.astype(target))
    return values
