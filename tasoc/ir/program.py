"""What a tasoc program is: a `builtin.module` holding a `func.func @main`.

Inputs and weights are the function's arguments (weights carry `{graph.param}`);
outputs are the operands of its `func.return`. These helpers read that shape of
program so that backends, the driver and `dag` agree on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FunctionType,
    ModuleOp,
    NoneAttr,
    TensorType,
    UnitAttr,
)
from xdsl.ir import Attribute, Block, Region, SSAValue

from tasoc.ir.graph import PARAM_ATTR, sig_of
from tasoc.ir.shapes import TensorSig

ENTRY = "main"


class ProgramError(ValueError):
    """The module is not a tasoc program (no `@main`, untyped arguments, ...)."""


NamedAttrs = tuple[tuple[str, Attribute], ...]
"""Attributes as `(name, attribute)` pairs sorted by name: hashable, one order."""

SIGNATURE_PROPERTIES = frozenset({"sym_name", "function_type", "arg_attrs", "res_attrs"})
"""The properties of a `func.func` that its name, arguments and results determine; the
rest of its properties and attributes (`sym_visibility`, ...) are `function_attributes`."""


@dataclass(frozen=True, slots=True)
class ArgInfo:
    """One argument of `@main`: its printed name, type, whether it is a weight, and
    its other argument attributes (`{my.attr = 1}`; `graph.param` is `is_param`)."""

    name: str
    sig: TensorSig
    is_param: bool
    attributes: NamedAttrs = ()


def named(attributes: Mapping[str, Attribute]) -> NamedAttrs:
    """`attributes` in the one hashable order the light graph keeps them in."""
    return tuple(sorted(attributes.items()))


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


def entry_block(function: func.FuncOp) -> Block:
    """The one block of `function`'s body; ProgramError for a body of several blocks
    (control flow, which no tasoc program has) or none (a declaration)."""
    blocks = function.body.blocks
    if len(blocks) != 1:
        raise ProgramError(
            f"@{function.sym_name.data} has {len(blocks)} blocks; a tasoc program has one"
        )
    return blocks.first  # type: ignore[return-value]


def arg_infos(function: func.FuncOp) -> list[ArgInfo]:
    """Name, type, weight flag and other attributes of each argument of `function`."""
    attrs = function.arg_attrs.data if function.arg_attrs is not None else ()
    infos = []
    for i, arg in enumerate(entry_block(function).args):
        own = dict(attrs[i].data) if i < len(attrs) else {}
        is_param = own.pop(PARAM_ATTR, None) is not None
        try:
            sig = sig_of(arg.type)
        except ValueError as err:
            raise ProgramError(f"argument #{i} of @{function.sym_name.data}: {err}") from None
        infos.append(ArgInfo(value_name(arg, f"arg{i}"), sig, is_param, named(own)))
    return infos


def result_attributes(function: func.FuncOp) -> tuple[NamedAttrs, ...]:
    """Each result's attributes (`-> (tensor<4xf32> {my.res = 1})`), or () when no
    result has any."""
    if function.res_attrs is None or not any(d.data for d in function.res_attrs.data):
        return ()
    return tuple(named(d.data) for d in function.res_attrs.data)


def function_attributes(function: func.FuncOp) -> NamedAttrs:
    """What `function` says beyond its name, arguments and results: properties such as
    `sym_visibility` and discardable attributes, together (their names cannot clash)."""
    own = {k: v for k, v in function.properties.items() if k not in SIGNATURE_PROPERTIES}
    return named({**own, **function.attributes})


def refuse_encodings(function: func.FuncOp, consumer: str) -> None:
    """ProgramError when a tensor of `function` has an encoding (a memory space, a
    sharding): `consumer` (a backend) does not implement them and must not run the
    program as if they were not there."""
    types = [arg.type for arg in entry_block(function).args]
    types += [result.type for op in entry_block(function).ops for result in op.results]
    for type_ in types:
        if isinstance(type_, TensorType) and not isinstance(type_.encoding, NoneAttr):
            raise ProgramError(
                f"{consumer} does not support tensor encodings (memory spaces, shardings): "
                f"@{function.sym_name.data} has {type_}"
            )


def return_values(function: func.FuncOp) -> tuple[SSAValue, ...]:
    last = function.body.block.last_op
    if not isinstance(last, func.ReturnOp):
        raise ProgramError(f"@{function.sym_name.data} does not end with func.return")
    return tuple(last.arguments)


def make_function(
    name: str,
    block: Block,
    params: Sequence[bool],
    outputs: Sequence[SSAValue],
    *,
    arg_attrs: Sequence[NamedAttrs] = (),
    res_attrs: Sequence[NamedAttrs] = (),
    func_attrs: NamedAttrs = (),
) -> func.FuncOp:
    """Wrap `block` (holding its ops, not yet a return) into a `func.func`.

    Arguments whose `params` flag is set are marked `{graph.param}`; `arg_attrs` (per
    argument, or none) and `res_attrs` (per result, or none) add the other argument
    and result attributes, `func_attrs` the function's own (as `function_attributes`
    reads them: properties such as `sym_visibility` go back to the properties). Each
    dictionary is written sorted by name, the order MLIR keeps them in.
    """
    block.add_op(func.ReturnOp(*outputs))
    others = arg_attrs or [()] * len(params)
    marks = (((PARAM_ATTR, UnitAttr()),) if p else () for p in params)
    function = func.FuncOp(
        name,
        FunctionType.from_lists([a.type for a in block.args], [v.type for v in outputs]),
        Region(block),
        arg_attrs=ArrayAttr(
            [
                DictionaryAttr(dict(sorted(own + mark)))
                for own, mark in zip(others, marks, strict=True)
            ]
        ),
        res_attrs=ArrayAttr([DictionaryAttr(dict(own)) for own in res_attrs])
        if res_attrs
        else None,
    )
    declared = func.FuncOp.get_irdl_definition().properties
    for key, value in func_attrs:
        (function.properties if key in declared else function.attributes)[key] = value
    return function
