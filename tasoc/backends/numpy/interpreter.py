"""The reference interpreter: runs a `graph` program with the NumPy kernels.

Built on xDSL's interpreter framework so that it walks the IR exactly as any other
xDSL interpreter does: `func.func`/`func.return` come from xDSL's `FuncFunctions`,
and every `graph` op is registered to one implementation that looks its kernel up
in `KERNELS` by short name. That implementation also checks each result against
the op's declared type, so a kernel that drifts from the typing rules in
`tasoc.ir.shapes` fails loudly at the op instead of somewhere downstream.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues, impl, register_impls
from xdsl.interpreters.func import FuncFunctions

from tasoc.backends import describe, numpy_dtype
from tasoc.backends.arguments import check_arguments
from tasoc.backends.numpy.kernels import KERNELS
from tasoc.ir.graph import GRAPH_OPS, GraphOp, sig_of
from tasoc.ir.program import arg_infos, entry_function, refuse_encodings


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
