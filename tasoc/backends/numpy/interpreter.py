"""The reference interpreter: runs a `graph` program with the NumPy kernels.

Built on xDSL's interpreter framework so that it walks the IR exactly as any other
xDSL interpreter does: `func.func`/`func.return` come from xDSL's `FuncFunctions`,
and every `graph` op is registered to one implementation that looks its kernel up
in `KERNELS` by short name. That implementation also checks each result against
the op's declared type, so a kernel that drifts from the typing rules in
the op's definition (`tasoc.ir.ops`) fails loudly at the op instead of somewhere downstream.

`run_float64` runs the same kernels with float64 in place of every float type: the
program as exact arithmetic would nearly compute it, which `tasoc run --check` asks
when two float32 computations of it disagree (`tasoc.driver.run`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues, impl, register_impls
from xdsl.interpreters.func import FuncFunctions

from tasoc.backends import describe, numpy_dtype
from tasoc.backends.arguments import check_arguments
from tasoc.backends.numpy.kernels import FLOATS, KERNELS
from tasoc.ir.graph import GRAPH_OPS, GraphOp, sig_of
from tasoc.ir.program import (
    ArgInfo,
    arg_infos,
    entry_function,
    refuse_encodings,
    return_values,
)


class KernelTypeError(RuntimeError):
    """A reference kernel returned a result that contradicts the op's type: a bug."""


def _run_kernel(
    functions: InterpreterFunctions, interpreter: Interpreter, op: GraphOp, args: PythonValues
) -> PythonValues:
    results = [np.asarray(r) for r in KERNELS[op.op_name()](op.py_attrs(), args)]
    for index, (value, array) in enumerate(zip(op.results, results, strict=True)):
        sig = sig_of(value.type)
        if array.shape != sig.shape or array.dtype != numpy_dtype(sig.dtype):
            raise KernelTypeError(
                f"{op.name} kernel returned {describe(array)} for result #{index}, typed {sig}"
            )
    return tuple(results)


class GraphFunctions(InterpreterFunctions):
    """xDSL interpreter implementations of every `graph` op (one per op class)."""


for _op_class in GRAPH_OPS:
    setattr(GraphFunctions, f"run_{_op_class.op_name()}", impl(_op_class)(_run_kernel))
register_impls(GraphFunctions)


def run_reference(module: ModuleOp, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run `@main` of `module` on `args` (in argument order) and return its results.

    Raises ValueError naming the argument when `args` do not match `@main`'s
    signature exactly (count, shape and dtype; bfloat16 is `ml_dtypes.bfloat16`).

    IEEE arithmetic, as XLA computes it: an overflow is inf and an invalid operation
    NaN, without NumPy's RuntimeWarnings (weights of NaN are the user's to run; `tasoc
    run` says once which outputs are not finite).
    """
    function = entry_function(module)
    refuse_encodings(function, "the numpy reference interpreter")
    check_arguments(arg_infos(function), args)
    interpreter = Interpreter(module)
    interpreter.register_implementations(FuncFunctions())
    interpreter.register_implementations(GraphFunctions())
    with np.errstate(all="ignore"):
        results: tuple[Any, ...] = interpreter.call_op(function, tuple(np.asarray(a) for a in args))
    return list(results)


def _float64(array: Any) -> np.ndarray:
    """`array` as float64 if it holds narrower floats, else as it is."""
    values = np.asarray(array)
    return values.astype(np.float64) if values.dtype in FLOATS else values


def _as_checked(info: ArgInfo, arg: np.ndarray) -> np.ndarray:
    """What `check_arguments` sees of an argument of `run_float64`: a float argument
    given in float64 is checked as if given in its declared type."""
    array = np.asarray(arg)
    if info.sig.dtype.is_float and array.dtype == np.float64:
        return array.astype(numpy_dtype(info.sig.dtype))
    return array


def run_float64(module: ModuleOp, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """`@main` of `module` with every float value held in float64: its float arguments
    widened, and each op's float results widened before the next op reads them.

    The kernels compute in float64 already (`kernels.in_float64`); here nothing is
    rounded back to float32 (or half precision) between ops, so the results are what
    the program computes in float64: a witness of what exact arithmetic gives, against
    which two float32 computations' errors can be measured. A program's own narrowing
    (a `cast`, a constant's type) still rounds where it stands, then is widened. Float
    arguments may come in their declared type or in float64 (finite differences
    perturb in float64); float results are float64, the others typed as declared.
    """
    function = entry_function(module)
    refuse_encodings(function, "the numpy reference interpreter")
    infos = arg_infos(function)
    same_count = len(args) == len(infos)  # else check_arguments says how many it takes
    check_arguments(infos, list(map(_as_checked, infos, args)) if same_count else args)
    block = function.body.block
    values = {v: _float64(a) for v, a in zip(block.args, args, strict=True)}
    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            continue
        if not isinstance(op, GraphOp):
            raise ValueError(f"the numpy reference interpreter cannot run '{op.name}'")
        results = KERNELS[op.op_name()](op.py_attrs(), [values[v] for v in op.operands])
        values.update(zip(op.results, map(_float64, results), strict=True))
    return [values[v] for v in return_values(function)]
