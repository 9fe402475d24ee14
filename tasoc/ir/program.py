"""What a tasoc program is: a `builtin.module` holding a `func.func @main`.

Inputs and weights are the function's arguments (weights carry `{graph.param}`);
outputs are the operands of its `func.return`. These helpers read that shape of
program so that backends, the driver and `dag` agree on it, and refuse, with a
one-line `ProgramError`, what is not one: no `@main` (another function is never taken
for it), a declaration, a body of several blocks, no outputs, or calls that can reach
the function making them (recursion), which no backend could ever finish.

`verify_ir` checks what xDSL's verifier does not: that values are defined before
they are used (MLIR's dominance rule) and that tensor types are within the resource
limits (`limits.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FixedBitwidthType,
    FunctionType,
    ModuleOp,
    NoneAttr,
    TensorType,
    UnitAttr,
)
from xdsl.ir import Attribute, Block, Operation, OpResult, Region, SSAValue
from xdsl.rewriter import Rewriter
from xdsl.utils.exceptions import VerifyException

from tasoc.ir.encodings import check_op
from tasoc.ir.graph import PARAM_ATTR, sig_of
from tasoc.ir.limits import LimitError, check_shape
from tasoc.ir.shapes import ShapeError, TensorSig

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
    """The `func.func @main` of a program, defined by one block, that does not call
    itself; ProgramError otherwise.

    A module without `@main` is refused even when it holds one function: taking that
    one instead would run or rewrite a function the user never named as the entry.
    """
    functions = {op.sym_name.data: op for op in module.ops if isinstance(op, func.FuncOp)}
    function = functions.get(ENTRY)
    if function is None:
        found = ", ".join(f"@{name}" for name in functions) or "none"
        raise ProgramError(
            f"module has no 'func.func @{ENTRY}' (functions found: {found}); "
            f"a tasoc program's entry is @{ENTRY}"
        )
    entry_block(function)
    _refuse_recursion(function, functions)
    return function


def _refuse_recursion(entry: func.FuncOp, functions: Mapping[str, func.FuncOp]) -> None:
    """ProgramError when a function reachable from `entry` can call itself, directly or
    through others: no backend could finish such a program (the reference interpreter
    would recurse until Python gives up). A depth-first walk of the call graph that
    keeps its own stack, so a long chain of calls cannot exhaust Python's."""
    on_path = {entry.sym_name.data}
    finished: set[str] = set()
    stack = [(entry.sym_name.data, _callees(entry))]
    while stack:
        caller, callees = stack[-1]
        callee = next(callees, None)
        if callee is None:
            stack.pop()
            on_path.discard(caller)
            finished.add(caller)
        elif callee in on_path:
            via = "" if callee == ENTRY else f" (called from @{ENTRY})"
            raise ProgramError(f"@{callee} calls itself{via}; recursion is not supported")
        elif callee not in finished and callee in functions:
            on_path.add(callee)
            stack.append((callee, _callees(functions[callee])))


def _callees(function: func.FuncOp) -> Iterator[str]:
    for op in function.walk():
        if isinstance(op, func.CallOp):
            yield op.callee.root_reference.data


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


def argument_bytes(infos: Sequence[ArgInfo]) -> int:
    """Bytes of all of a program's arguments (inputs and weights) together: what a run
    allocates before its first op, checked against `limits.check_argument_bytes`."""
    return sum(info.sig.size * info.sig.dtype.itemsize for info in infos)


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
    """The values `function` returns, its outputs; ProgramError for none: a program
    computes something (a pass has nothing to optimize, a run nothing to show)."""
    last = entry_block(function).last_op
    if not isinstance(last, func.ReturnOp):
        raise ProgramError(f"@{function.sym_name.data} does not end with func.return")
    if not last.arguments:
        raise ProgramError(
            f"@{function.sym_name.data} returns no values; a program has at least one output"
        )
    return tuple(last.arguments)


class IRRuleError(VerifyException):
    """IR breaks a rule xDSL's verifier does not check (`verify_ir`); `op` is where, so
    the driver can point at its line."""

    def __init__(self, op: Operation, message: str) -> None:
        super().__init__(f"'{op.name}' {message}")
        self.op = op


PROGRAM_CHECKS: list[Callable[[ModuleOp], None]] = []
"""Module-level rules of the dialects that extend a program (a placed program's replay
against its capacity), registered when the dialect is imported, like `encodings.CHECK`;
`verify_ir` runs each on every module. Each raises IRRuleError."""


def verify_ir(root: Operation) -> None:
    """IRRuleError for the first break, under `root`, of two rules xDSL does not check.

    - Dominance, which MLIR's verifier checks: in a block, a value is used after the op
      that defines it; an interpreter or a lowering reading the block in order would
      meet a value it has not computed. Checked in every block except a module's body
      (a graph region in MLIR, where order is free). Values from other blocks of a
      region would need block dominance, which no tasoc program has (one block per
      function), so those are left alone.
    - Encodings of a function's signature pass their dialect's check (a sharding names a
      mesh of the module), which no op does for an argument returned untouched.
    - Sizes: every static tensor type, of a result or a block argument, is within the
      resource limits (`limits.py`), so `tensor<9223372036854775807xf32>` is refused
      where it is written, not when a backend allocates it.

    - The module-level rules of `PROGRAM_CHECKS` (a placed program's replay).

    Linear in the ops; each distinct type is checked once.
    """
    checked: set[Attribute] = set()
    for op in root.walk():
        if isinstance(op, func.FuncOp):
            _check_signature_encodings(op)
        if not isinstance(op, ModuleOp):
            for region in op.regions:
                for block in region.blocks:
                    _check_defined_before_use(block)
        block_args = (arg for region in op.regions for block in region.blocks for arg in block.args)
        for value in (*op.results, *block_args):
            if value.type not in checked:
                _check_type_size(op, value.type)
                checked.add(value.type)
    for module in [op for op in root.walk() if isinstance(op, ModuleOp)]:
        for check in PROGRAM_CHECKS:
            check(module)


def _check_signature_encodings(function: func.FuncOp) -> None:
    """IRRuleError when an encoding of `function`'s signature breaks its dialect's
    module-level check (`encodings.CHECK`: a sharding naming no mesh). The ops check
    the values they touch; an argument returned untouched is checked here."""
    kind = function.function_type
    types = [t for t in (*kind.inputs.data, *kind.outputs.data) if isinstance(t, TensorType)]
    try:
        check_op(function, [sig_of(t) for t in types if not isinstance(t.encoding, NoneAttr)])
    except (VerifyException, ShapeError) as err:
        raise IRRuleError(function, str(err).removeprefix(f"'{function.name}': ")) from None


def _check_defined_before_use(block: Block) -> None:
    """IRRuleError where an op of `block`, or an op nested in one, reads a value that
    an op of `block` defines at or after it: one pass in order, remembering what is
    defined so far (a set lookup per operand)."""
    defined: set[Operation] = set()
    for op in block.ops:
        for user in op.walk():
            for index, operand in enumerate(user.operands):
                if (
                    isinstance(operand, OpResult)
                    and operand.op.parent is block
                    and operand.op not in defined
                ):
                    name = f"%{operand.name_hint}" if operand.name_hint else f"#{operand.index}"
                    raise IRRuleError(user, f"uses {name} (operand #{index}) before it is defined")
        defined.add(op)


def _check_type_size(op: Operation, type_: Attribute) -> None:
    if not isinstance(type_, TensorType) or any(d < 0 for d in type_.get_shape()):
        return
    element = type_.element_type
    itemsize = -(-element.bitwidth // 8) if isinstance(element, FixedBitwidthType) else 1
    try:
        check_shape(type_.get_shape(), itemsize)
    except LimitError as err:
        raise IRRuleError(op, f"has a type over a resource limit: {err}") from None


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


def map_types(module: ModuleOp, change: Callable[[Attribute], Attribute]) -> None:
    """Give every value of `module` (results and block arguments) and every function
    signature the type `change` makes of its own, in place: how a dialect's program is
    turned into the plain one it equals (`parallel.unsharded`, `memory.unplaced`).
    `change` returns its argument itself for a type it keeps."""
    for op in list(module.walk()):
        for value in (*op.results, *(a for r in op.regions for b in r.blocks for a in b.args)):
            new = change(value.type)
            if new is not value.type:
                Rewriter.replace_value_with_new_type(value, new)
        if isinstance(op, func.FuncOp):
            kind = op.function_type
            op.function_type = FunctionType.from_lists(
                [change(t) for t in kind.inputs.data], [change(t) for t in kind.outputs.data]
            )
