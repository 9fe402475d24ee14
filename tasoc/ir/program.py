"""What a tasoc program is: a `builtin.module` holding a `func.func @main`.

Inputs and weights are the function's arguments (weights carry `{graph.param}`);
outputs are the operands of its `func.return`. These helpers read that shape of
program so that backends, the driver and `dag` agree on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, FunctionType, ModuleOp, UnitAttr
from xdsl.ir import Block, Region, SSAValue

from tasoc.ir.graph import PARAM_ATTR, sig_of
from tasoc.ir.shapes import TensorSig

ENTRY = "main"


class ProgramError(ValueError):
    """The module is not a tasoc program (no `@main`, untyped arguments, ...)."""


@dataclass(frozen=True, slots=True)
class ArgInfo:
    """One argument of `@main`: its printed name, type and whether it is a weight."""

    name: str
    sig: TensorSig
    is_param: bool


def entry_function(module: ModuleOp) -> func.FuncOp:
    """The `func.func @main` of a program (or its only function)."""
    funcs = [op for op in module.ops if isinstance(op, func.FuncOp)]
    for f in funcs:
        if f.sym_name.data == ENTRY:
            return f
    if len(funcs) == 1:
        return funcs[0]
    raise ProgramError(f"module has no 'func.func @{ENTRY}' (found {len(funcs)} functions)")


def value_name(value: SSAValue, fallback: str) -> str:
    return value.name_hint or fallback


def arg_infos(function: func.FuncOp) -> list[ArgInfo]:
    """Name, type and weight flag of each argument of `function`."""
    attrs = function.arg_attrs.data if function.arg_attrs is not None else ()
    infos = []
    for i, arg in enumerate(function.body.block.args):
        is_param = i < len(attrs) and PARAM_ATTR in attrs[i].data
        try:
            sig = sig_of(arg.type)
        except ValueError as err:
            raise ProgramError(f"argument #{i} of @{function.sym_name.data}: {err}") from None
        infos.append(ArgInfo(value_name(arg, f"arg{i}"), sig, is_param))
    return infos


def return_values(function: func.FuncOp) -> tuple[SSAValue, ...]:
    last = function.body.block.last_op
    if not isinstance(last, func.ReturnOp):
        raise ProgramError(f"@{function.sym_name.data} does not end with func.return")
    return tuple(last.arguments)


def make_function(
    name: str, block: Block, params: Sequence[bool], outputs: Sequence[SSAValue]
) -> func.FuncOp:
    """Wrap `block` (holding its ops, not yet a return) into a `func.func`.

    Arguments whose `params` flag is set are marked `{graph.param}`.
    """
    block.add_op(func.ReturnOp(*outputs))
    arg_attrs = ArrayAttr([DictionaryAttr({PARAM_ATTR: UnitAttr()} if p else {}) for p in params])
    function_type = FunctionType.from_lists([a.type for a in block.args], [v.type for v in outputs])
    return func.FuncOp(name, function_type, Region(block), arg_attrs=arg_attrs)
