"""The `graph` dialect: TASO's operator set plus what real models need, and the
backward ops, losses and optimizer update that training them needs (docs/autodiff.md).

Every op is an xDSL `IRDLOperation` whose attributes are properties printed in the
attribute dictionary, so the text form is uniform and easy to diff:

    %y = graph.conv2d %x, %w {activation = "relu", groups = 1 : i64,
                              padding = "same", strides = array<i64: 1, 1>}
         : tensor<1x4x8x8xf32>

Only the result types are written (comma-separated for `split` and the other
multi-result ops): operand types are those of the operands' definitions, which come
first in a graph body. Repeating them made up half of the text and of the parse time
of a large program. The older form
with a functional type, `: (tensor<...>, tensor<...>) -> tensor<...>`, still parses;
the generic form prints and parses as for every xDSL op.

Typing rules are not written here: each op's verifier asks `shapes.infer`, which runs
the rule in the op's definition (`tasoc/ir/ops/`, the one place they live), and
compares the answer with the op's result types. Attributes are converted to plain
Python values (`py_attrs`) by one type-directed codec, which is what the builder, the
light `dag` and the backends see.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Self, TypeVar

from xdsl.dialects.builtin import (
    I64,
    BFloat16Type,
    BoolAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    NoneAttr,
    Signedness,
    StringAttr,
    TensorType,
    f64,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    AttrConstraint,
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.irdl.attributes import irdl_to_attr_constraint
from xdsl.irdl.constraints import VerificationContext
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import Commutative, ConstantLike, Pure
from xdsl.utils.exceptions import VerifyException

from tasoc.ir.encodings import check_op
from tasoc.ir.shapes import ConstData, DType, ShapeError, TensorSig, check_size, infer
from tasoc.ir.traits import (
    Broadcasting,
    Contraction,
    DataMovement,
    Elementwise,
    Fusible,
    Training,
)

PARAM_ATTR = "graph.param"
"""Argument attribute marking a `func.func` argument as a weight."""

# --------------------------------------------------------------------------- types

_XDSL_DTYPES: dict[DType, Attribute] = {
    DType.F32: Float32Type(),
    DType.F16: Float16Type(),
    DType.BF16: BFloat16Type(),
    DType.F64: Float64Type(),
    DType.I32: i32,
    DType.I64: i64,
    DType.I8: IntegerType(8),
    DType.I16: IntegerType(16),
    DType.U8: IntegerType(8, Signedness.UNSIGNED),
    DType.BOOL: i1,
}
_DTYPES_BY_ATTR: dict[Attribute, DType] = {attr: dtype for dtype, attr in _XDSL_DTYPES.items()}


def dtype_to_xdsl(dtype: DType | str) -> Attribute:
    return _XDSL_DTYPES[DType(dtype)]


def dtype_of(element_type: Attribute) -> DType:
    """The DType of an xDSL element type; raises ShapeError for unsupported ones."""
    try:
        return _DTYPES_BY_ATTR[element_type]
    except KeyError:
        raise ShapeError(f"unsupported element type {element_type}") from None


@functools.cache
def tensor_type(sig: TensorSig) -> TensorType:
    """The xDSL type of `sig`; cached because building an xDSL type verifies it."""
    if sig.encoding is None:
        return TensorType(dtype_to_xdsl(sig.dtype), sig.shape)
    return TensorType(dtype_to_xdsl(sig.dtype), sig.shape, sig.encoding)  # type: ignore[arg-type]


@functools.cache
def sig_of(type_: Attribute) -> TensorSig:
    """The TensorSig of a static ranked tensor type, its encoding included (None when
    it has none); raises ShapeError otherwise, SizeLimitError for a type over the
    resource limits (`limits.py`).

    Cached: xDSL attributes are immutable and hashable, and this runs for every
    operand of every op the verifier visits. So a type read once is not checked again
    if a limit is lowered later in the same process.
    """
    if not isinstance(type_, TensorType):
        raise ShapeError(f"expected a ranked tensor type, got {type_}")
    shape = tuple(type_.get_shape())
    if any(d < 0 for d in shape):
        raise ShapeError(f"dynamic shapes are not supported: {type_}")
    encoding = None if isinstance(type_.encoding, NoneAttr) else type_.encoding
    sig = TensorSig(shape, dtype_of(type_.element_type), encoding)
    check_size(sig)
    return sig


# --------------------------------------------------------------------- attribute codec


_SHARED_KINDS = (DType, bool, int, str, tuple)
"""Attribute values that builders repeat on op after op (dtypes, flags, axes, modes,
strides): `to_attr` makes one xDSL attribute per distinct value of these kinds."""


def to_attr(value: Any) -> Attribute:
    """Encode a Python attribute value as an xDSL attribute (inverse of `from_attr`).

    Values of `_SHARED_KINDS` share one attribute each: building an xDSL attribute
    verifies it, which was a quarter of building a 10k-op graph, and attributes are
    immutable, so sharing is safe. Floats and constants are encoded each time, since
    a cache would give -0.0 the attribute of 0.0 (they are equal keys).
    """
    if isinstance(value, _SHARED_KINDS):
        return _shared_attr(type(value), value)
    return _encode_attr(value)


@functools.cache
def _shared_attr(kind: type, value: Any) -> Attribute:
    """`_encode_attr` by kind and value: the kind keeps `True` apart from `1` and
    `DType.F32` apart from `"f32"`, which are equal keys."""
    return _encode_attr(value)


def _encode_attr(value: Any) -> Attribute:
    if isinstance(value, DType):
        return dtype_to_xdsl(value)
    if isinstance(value, bool):
        return IntegerAttr(int(value), i1)
    if isinstance(value, int):
        return IntegerAttr(value, i64)
    if isinstance(value, float):
        return FloatAttr(value, f64)
    if isinstance(value, str):
        return StringAttr(value)
    if isinstance(value, tuple | list):
        return DenseArrayBase.from_list(i64, [int(v) for v in value])
    if isinstance(value, ConstData):
        return DenseIntOrFPElementsAttr.from_list(
            TensorType(dtype_to_xdsl(value.dtype), value.shape), list(value.values)
        )
    raise TypeError(f"cannot encode attribute value {value!r}")


def from_attr(attr: Attribute) -> Any:
    """Decode an xDSL attribute into the Python value the backends and `dag` use.

    Strict about widths: only the attributes `to_attr` makes decode (`i64` integers,
    `i1` flags, `f64` numbers, `array<i64: ...>`), so that text IR cannot pass
    `groups = 1 : i32` or `array<i8: 1, 1>` for what prints back differently; the shape
    rules then check each value's kind (`groups = 1.5` is a float, not an integer).
    Raises TypeError naming what it got.
    """
    if isinstance(attr, IntegerAttr):
        if attr.type == i1:
            return bool(attr.value.data)
        if attr.type == i64:
            return attr.value.data
        raise TypeError(f"expected an i64 integer or a boolean, got {attr}")
    if isinstance(attr, FloatAttr):
        if attr.type != f64:
            raise TypeError(f"expected an f64 number, got {attr}")
        return float(attr.value.data)
    if isinstance(attr, StringAttr):
        return attr.data
    if isinstance(attr, DenseArrayBase):
        if attr.elt_type != i64:
            raise TypeError(f"expected array<i64: ...>, got {attr}")
        return tuple(int(v) for v in attr.iter_values())
    if isinstance(attr, DenseIntOrFPElementsAttr):
        sig = sig_of(attr.type)
        return ConstData(sig.shape, sig.dtype, tuple(attr.get_values()))
    if attr in _DTYPES_BY_ATTR:
        return _DTYPES_BY_ATTR[attr]
    raise TypeError(f"cannot decode attribute {attr}")


# ------------------------------------------------------------------------ base op


def defined_value(parser: Parser, operand: UnresolvedOperand) -> SSAValue:
    """The value `operand` names, which must be defined already: the short text form
    has no operand types, so it cannot make a typed forward reference."""
    values = parser.ssa_values.get(operand.operand_name)
    if values is None or operand.index >= len(values):
        suffix = f"#{operand.index}" if operand.index else ""
        parser.raise_error(
            f"use of undefined value {operand.span.text}{suffix} (graph ops take operand "
            "types from their definitions, which must come first)",
            operand.span,
        )
    return values[operand.index]


class GraphOp(IRDLOperation):
    """Common behaviour of `graph` ops: typed construction, verification and text form."""

    irdl_options = (ParsePropInAttrDict(),)
    traits = traits_def(Pure())

    # Hand-written because xDSL's declarative `assembly_format` must find every operand
    # type in the text or infer it from a type constraint; it cannot take it from the
    # operand's definition, which is what makes this form short.
    @classmethod
    def parse(cls, parser: Parser) -> Self:
        """`operands attr-dict : result-types`, or the older
        `operands attr-dict : (operand-types) -> result-types`."""
        operands = (
            parser.parse_optional_undelimited_comma_separated_list(
                parser.parse_optional_unresolved_operand, parser.parse_unresolved_operand
            )
            or []
        )
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        types_start = parser.pos
        function_type = parser.parse_optional_function_type()
        if function_type is None:
            values = [defined_value(parser, operand) for operand in operands]
            result_types = parser.parse_comma_separated_list(
                parser.Delimiter.NONE, parser.parse_type, " in result types"
            )
        else:
            operand_types = function_type.inputs.data
            if len(operand_types) != len(operands):
                parser.raise_error(
                    f"'{cls.name}' has {len(operands)} operand(s) but its functional type "
                    f"lists {len(operand_types)}",
                    types_start,
                )
            values = [
                parser.resolve_operand(operand, type_)
                for operand, type_ in zip(operands, operand_types, strict=True)
            ]
            result_types = function_type.outputs.data
        declared = cls.get_irdl_definition().properties
        properties = {name: attributes.pop(name) for name in declared if name in attributes}
        return cls.create(
            operands=values,
            result_types=result_types,
            properties=properties,
            attributes=attributes,
        )

    def print(self, printer: Printer) -> None:
        if self.operands:
            printer.print_string(" ")
            printer.print_list(self.operands, printer.print_operand)
        printer.print_op_attributes(self.properties | self.attributes)
        printer.print_string(" : ")
        printer.print_list(self.result_types, printer.print_attribute)

    @classmethod
    def op_name(cls) -> str:
        """The op's name without the dialect prefix, as `shapes.infer` knows it."""
        return cls.name.removeprefix("graph.")

    def py_attrs(self) -> dict[str, Any]:
        """The op's attributes as Python values (`from_attr`); TypeError naming the
        attribute whose kind the codec does not take."""
        values = {}
        for name, attr in self.properties.items():
            try:
                values[name] = from_attr(attr)
            except TypeError as err:
                raise TypeError(f"attribute '{name}': {err}") from None
        return values

    @classmethod
    def create_typed(cls, operands: Sequence[SSAValue], **attrs: Any) -> GraphOp:
        """Build the op with result types inferred from operands and attributes.

        Raises ShapeError (naming the op) when the operands do not type-check.
        """
        declared = cls.get_irdl_definition().properties
        unknown = sorted(set(attrs) - set(declared))
        if unknown:
            raise ShapeError(f"{cls.name}: unknown attribute(s) {', '.join(unknown)}")
        sigs = [sig_of(v.type) for v in operands]
        try:
            results = infer(cls.op_name(), sigs, attrs)
        except ShapeError as err:
            raise ShapeError(f"{cls.name}: {err}") from None
        # Properties in declaration order, whatever the keyword order, so that equal
        # programs always print equal text.
        return cls.create(
            operands=list(operands),
            result_types=[tensor_type(r) for r in results],
            properties={name: to_attr(attrs[name]) for name in declared if name in attrs},
        )

    def verify(self, verify_nested_ops: bool = True) -> None:
        """xDSL's checks, with a property of the wrong kind named as the typing rules
        name a wrong value (`'graph.conv2d': attribute 'groups': ...`): xDSL's own
        message names neither the op nor the property."""
        for name, definition in self.get_irdl_definition().properties.items():
            if name in self.properties:
                try:
                    definition.constr.verify(self.properties[name], VerificationContext())
                except VerifyException:
                    raise VerifyException(
                        f"'{self.name}': attribute '{name}' must be "
                        f"{_KIND_NAMES[definition.constr]}, got {self.properties[name]}"
                    ) from None
        super().verify(verify_nested_ops)

    def verify_(self) -> None:
        try:
            sigs = [sig_of(v.type) for v in self.operands]
            expected = infer(self.op_name(), sigs, self.py_attrs())
            actual = [sig_of(r.type) for r in self.results]
            if not sigs:
                # An op without operands (a constant) is made in the layout, memory
                # space, ... its results declare; the encoding's own check judges it.
                expected = [
                    replace(e, encoding=a.encoding) for e, a in zip(expected, actual, strict=False)
                ]
        except (ShapeError, KeyError, TypeError) as err:
            missing = f"missing attribute {err}" if isinstance(err, KeyError) else str(err)
            raise VerifyException(f"'{self.name}': {missing}") from None
        check_op(self, (*sigs, *actual))
        if expected != actual:
            raise VerifyException(
                f"'{self.name}': result types {', '.join(map(str, actual))} do not match "
                f"the inferred {', '.join(map(str, expected))}"
            )


# ---------------------------------------------------------------------- properties
# Properties are typed by kind, as the codec writes them (`to_attr`): xDSL's verifier
# refuses `groups = 1.5` or `strides = "x"` before any rule runs. Their values (a
# stride is positive, a pool kind is `max` or `avg`) are checked by the op's typing
# rule in its definition (`tasoc/ir/ops/`), so that message names the rule.
# Kinds and modes stay strings rather than `EnumAttribute`s: docs/decisions.md.

IntProp = IntegerAttr[I64]
"""An integer: `groups = 1 : i64` (the codec's `int`)."""
FlagProp = BoolAttr
"""A flag: `keepdims = true` (the codec's `bool`)."""
FloatProp = FloatAttr[Float64Type]
"""A number: `epsilon = 1.0e-05 : f64` (the codec's `float`)."""
IntsProp = DenseArrayBase[I64]
"""Integers: `strides = array<i64: 1, 1>` (the codec's tuples)."""
TextProp = StringAttr
"""A kind or mode: `kind = "max"`."""
PaddingProp = StringAttr | DenseArrayBase[I64]
"""A padding mode (`"same"`, `"valid"`) or four integers."""


@dataclass(frozen=True)
class _ElementType(AttrConstraint[Attribute]):
    """One of the element types tasoc computes with (`DType`). xDSL's `AnyOf` takes
    one constraint per attribute class, and `i32` and `i64` share one."""

    def verify(self, attr: Attribute, constraint_context: VerificationContext) -> None:
        if attr not in _DTYPES_BY_ATTR:
            raise VerifyException(f"{attr} is not an element type tasoc computes with")

    def mapping_type_vars(self, type_var_mapping: Mapping[TypeVar, Any]) -> _ElementType:
        return self


DTypeProp = _ElementType()
"""An element type tasoc computes with: `dtype = f32`."""
ConstProp = DenseIntOrFPElementsAttr
"""A dense constant: `value = dense<[1.0, 2.0]> : tensor<2xf32>`."""

_KIND_NAMES: dict[AttrConstraint, str] = {
    irdl_to_attr_constraint(kind): description
    for kind, description in (
        (IntProp, "an i64 integer"),
        (FlagProp, "a boolean (true or false)"),
        (FloatProp, "an f64 number"),
        (IntsProp, "array<i64: ...>"),
        (TextProp, "a string"),
        (PaddingProp, 'a string ("same", "valid") or array<i64: ...>'),
        (DTypeProp, "an element type (" + ", ".join(map(str, _DTYPES_BY_ATTR)) + ")"),
        (ConstProp, "a dense constant"),
    )
}
"""How a refusal names each kind of property."""

# ---------------------------------------------------------------------------- ops


@irdl_op_definition
class AddOp(GraphOp):
    """Element-wise sum with NumPy broadcasting."""

    name = "graph.add"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Commutative(), Elementwise(), Broadcasting(), Fusible())


@irdl_op_definition
class MulOp(GraphOp):
    """Element-wise product with NumPy broadcasting."""

    name = "graph.mul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Commutative(), Elementwise(), Broadcasting(), Fusible())


@irdl_op_definition
class ScaleOp(GraphOp):
    """Tensor times a rank-0 scalar tensor (TASO's scalar multiplication)."""

    name = "graph.scale"
    input = operand_def(TensorType)
    scalar = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Elementwise(), Fusible())


class _UnaryOp(GraphOp):
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Elementwise(), Fusible())


@irdl_op_definition
class ReluOp(_UnaryOp):
    """max(x, 0)."""

    name = "graph.relu"


@irdl_op_definition
class SigmoidOp(_UnaryOp):
    """1 / (1 + exp(-x))."""

    name = "graph.sigmoid"


@irdl_op_definition
class TanhOp(_UnaryOp):
    """Hyperbolic tangent."""

    name = "graph.tanh"


@irdl_op_definition
class GeluOp(_UnaryOp):
    """x * Phi(x), with the exact (erf) form of Phi."""

    name = "graph.gelu"


@irdl_op_definition
class TransposeOp(GraphOp):
    """Permute dimensions: result dim i is input dim perm[i]."""

    name = "graph.transpose"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    perm = prop_def(IntsProp)
    traits = traits_def(DataMovement(), Fusible())


@irdl_op_definition
class MatmulOp(GraphOp):
    """Batched matrix product [..., M, K] x [..., K, N], batch dims broadcast."""

    name = "graph.matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Broadcasting(), Contraction())


@irdl_op_definition
class Conv2dOp(GraphOp):
    """Grouped 2-D convolution, NCHW input, OIHW weight, optional fused relu."""

    name = "graph.conv2d"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    result = result_def(TensorType)
    strides = prop_def(IntsProp)
    padding = prop_def(PaddingProp)
    activation = prop_def(TextProp)
    groups = prop_def(IntProp)
    traits = traits_def(Contraction())


@irdl_op_definition
class EnlargeOp(GraphOp):
    """Zero-pad a convolution weight symmetrically to a larger kernel."""

    name = "graph.enlarge"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    kernel = prop_def(IntsProp)
    traits = traits_def(DataMovement(), Fusible())


@irdl_op_definition
class Pool2dOp(GraphOp):
    """Average or max pooling over NCHW; average counts padded zeros."""

    name = "graph.pool2d"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    kind = prop_def(TextProp)
    kernel = prop_def(IntsProp)
    strides = prop_def(IntsProp)
    padding = prop_def(PaddingProp)


@irdl_op_definition
class ConcatOp(GraphOp):
    """Concatenate along `axis`."""

    name = "graph.concat"
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntProp)
    traits = traits_def(DataMovement(), Fusible())


@irdl_op_definition
class SplitOp(GraphOp):
    """Split along `axis` into pieces of the given `sizes` (a piece may be empty)."""

    name = "graph.split"
    input = operand_def(TensorType)
    outputs = var_result_def(TensorType)
    axis = prop_def(IntProp)
    sizes = prop_def(IntsProp)
    traits = traits_def(DataMovement(), Fusible())


class _ConstantOp(GraphOp):
    result = result_def(TensorType)
    traits = traits_def(Pure(), ConstantLike())


@irdl_op_definition
class OnesOp(_ConstantOp):
    """A tensor of ones."""

    name = "graph.ones"
    shape = prop_def(IntsProp)
    dtype = prop_def(DTypeProp)


@irdl_op_definition
class ZerosOp(_ConstantOp):
    """A tensor of zeros."""

    name = "graph.zeros"
    shape = prop_def(IntsProp)
    dtype = prop_def(DTypeProp)


@irdl_op_definition
class CPoolOp(_ConstantOp):
    """TASO's C_pool: a depthwise [C,1,kh,kw] kernel of 1/(kh*kw), so that
    conv2d(x, C_pool, groups=C) equals average pooling."""

    name = "graph.c_pool"
    channels = prop_def(IntProp)
    kernel = prop_def(IntsProp)
    dtype = prop_def(DTypeProp)


@irdl_op_definition
class IConvOp(_ConstantOp):
    """TASO's I_conv: the [C,C,kh,kw] kernel whose convolution is the identity."""

    name = "graph.i_conv"
    channels = prop_def(IntProp)
    kernel = prop_def(IntsProp)
    dtype = prop_def(DTypeProp)


@irdl_op_definition
class IMatmulOp(_ConstantOp):
    """TASO's I_matmul: the identity matrix of the given size."""

    name = "graph.i_matmul"
    size = prop_def(IntProp)
    dtype = prop_def(DTypeProp)


@irdl_op_definition
class ConstantOp(_ConstantOp):
    """A small dense constant written in the IR (weights live outside the text)."""

    name = "graph.constant"
    value = prop_def(ConstProp)


@irdl_op_definition
class ReshapeOp(GraphOp):
    """Reinterpret the row-major elements with a new static `shape`."""

    name = "graph.reshape"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    shape = prop_def(IntsProp)
    traits = traits_def(DataMovement(), Fusible())


@irdl_op_definition
class SoftmaxOp(GraphOp):
    """exp(x) / sum(exp(x)) along `axis`."""

    name = "graph.softmax"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntProp)


@irdl_op_definition
class ReduceOp(GraphOp):
    """Sum, mean, max, min or product over `axes`, keeping them as size 1 when
    `keepdims`. Over a size-0 axis a sum is 0, a product 1, a max -inf and a min +inf
    (an integer type's least and largest value); a mean there is undefined and does
    not type-check. NaN propagates through max and min."""

    name = "graph.reduce"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    kind = prop_def(TextProp)
    axes = prop_def(IntsProp)
    keepdims = prop_def(FlagProp)


@irdl_op_definition
class BatchnormOp(GraphOp):
    """Inference batch normalization over channel axis 1:
    (x - mean) / sqrt(var + epsilon) * scale + bias."""

    name = "graph.batchnorm"
    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    bias = operand_def(TensorType)
    mean = operand_def(TensorType)
    var = operand_def(TensorType)
    result = result_def(TensorType)
    epsilon = prop_def(FloatProp)
    traits = traits_def(Fusible())


@irdl_op_definition
class LayernormOp(GraphOp):
    """Normalize over dims [axis, rank) then apply gamma and beta of that shape."""

    name = "graph.layernorm"
    input = operand_def(TensorType)
    gamma = operand_def(TensorType)
    beta = operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntProp)
    epsilon = prop_def(FloatProp)


@irdl_op_definition
class EmbeddingOp(GraphOp):
    """Row lookup: table[ids], result shape ids.shape + [features]."""

    name = "graph.embedding"
    ids = operand_def(TensorType)
    table = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(DataMovement())


# ------------------------------------------------------ graph neural networks
# Edge arrays are [blocks, edges] (`tasoc/ir/ops/gnn.py`, docs/ir.md).


@irdl_op_definition
class AggregateOp(GraphOp):
    """Neighbour aggregation: every target row the sum, mean or max over its in-edges
    of weight[e] * x[src[e]]; operands x, src, dst and an optional weight."""

    name = "graph.aggregate"
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    reduce = prop_def(TextProp)
    block_rows = prop_def(IntProp)


@irdl_op_definition
class EdgeSoftmaxOp(GraphOp):
    """Softmax of per-edge scores over each target's in-edges (GAT)."""

    name = "graph.edge_softmax"
    scores = operand_def(TensorType)
    dst = operand_def(TensorType)
    result = result_def(TensorType)
    block_rows = prop_def(IntProp)


@irdl_op_definition
class EdgeScoresOp(GraphOp):
    """Every edge's a[source] + b[target] (GAT's attention logits)."""

    name = "graph.edge_scores"
    a = operand_def(TensorType)
    b = operand_def(TensorType)
    src = operand_def(TensorType)
    dst = operand_def(TensorType)
    result = result_def(TensorType)
    block_rows = prop_def(IntProp)


# ------------------------------------------ arithmetic, comparison, logic, indexing
# What imported models (ONNX) compute beyond TASO's set. The binary ops broadcast
# NumPy-style and take operands of one element type, as ONNX's do.


@irdl_op_definition
class NegOp(_UnaryOp):
    """-x (floats and integers; integers wrap at their least value)."""

    name = "graph.neg"


@irdl_op_definition
class ExpOp(_UnaryOp):
    """e**x."""

    name = "graph.exp"


@irdl_op_definition
class LogOp(_UnaryOp):
    """The natural logarithm: -inf at 0, NaN below."""

    name = "graph.log"


@irdl_op_definition
class SqrtOp(_UnaryOp):
    """The square root: NaN below 0."""

    name = "graph.sqrt"


@irdl_op_definition
class ReciprocalOp(_UnaryOp):
    """1 / x."""

    name = "graph.reciprocal"


@irdl_op_definition
class ErfOp(_UnaryOp):
    """The error function."""

    name = "graph.erf"


@irdl_op_definition
class AbsOp(_UnaryOp):
    """|x| (floats and integers; an integer's least value stays itself, as it wraps)."""

    name = "graph.abs"


class _BinaryOp(GraphOp):
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise(), Broadcasting(), Fusible())


class _SymmetricOp(_BinaryOp):
    traits = traits_def(Pure(), Commutative(), Elementwise(), Broadcasting(), Fusible())


@irdl_op_definition
class SubOp(_BinaryOp):
    """lhs - rhs."""

    name = "graph.sub"


@irdl_op_definition
class DivOp(_BinaryOp):
    """lhs / rhs; integers truncate toward zero (as C and onnxruntime do, not as
    Python's floor division), and dividing an integer by zero is an error of the
    reference."""

    name = "graph.div"


@irdl_op_definition
class PowOp(_BinaryOp):
    """lhs ** rhs; an integer raised to a negative integer is an error of the reference."""

    name = "graph.pow"


@irdl_op_definition
class MaxOp(_SymmetricOp):
    """The element-wise maximum; NaN if either is NaN (ONNX's Max)."""

    name = "graph.max"


@irdl_op_definition
class MinOp(_SymmetricOp):
    """The element-wise minimum; NaN if either is NaN (ONNX's Min)."""

    name = "graph.min"


@irdl_op_definition
class CompareOp(_BinaryOp):
    """lhs `predicate` rhs as i1, `predicate` one of eq, ne, lt, le, gt, ge (NaN is
    unequal to everything, itself included: only `ne` holds for it)."""

    name = "graph.compare"
    predicate = prop_def(TextProp)


@irdl_op_definition
class NotOp(_UnaryOp):
    """Logical not of an i1 tensor."""

    name = "graph.not"


@irdl_op_definition
class AndOp(_SymmetricOp):
    """Logical and of i1 tensors."""

    name = "graph.and"


@irdl_op_definition
class OrOp(_SymmetricOp):
    """Logical or of i1 tensors."""

    name = "graph.or"


@irdl_op_definition
class XorOp(_SymmetricOp):
    """Logical exclusive or of i1 tensors."""

    name = "graph.xor"


@irdl_op_definition
class WhereOp(GraphOp):
    """lhs where the i1 condition holds, else rhs; all three broadcast."""

    name = "graph.where"
    condition = operand_def(TensorType)
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise(), Broadcasting(), Fusible())


@irdl_op_definition
class CastOp(GraphOp):
    """Convert to element type `to`: floats to integers truncate toward zero and
    saturate at the integer type's range (NaN gives 0), any number to i1 is x != 0,
    i1 to a number is 0 or 1, and a narrower float rounds to nearest even."""

    name = "graph.cast"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    to = prop_def(DTypeProp)
    traits = traits_def(Pure(), Elementwise(), Fusible())


@irdl_op_definition
class BroadcastOp(GraphOp):
    """Stretch to the full result `shape`, NumPy's broadcast_to (ONNX's Expand once
    its target shape is known)."""

    name = "graph.broadcast"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    shape = prop_def(IntsProp)
    traits = traits_def(Pure(), DataMovement(), Fusible())


@irdl_op_definition
class GatherOp(GraphOp):
    """Take entries of `data` along `axis` at integer `indices` (NumPy's take; a
    negative index counts from the end): the result's shape is data's before `axis`,
    then indices', then data's after `axis`."""

    name = "graph.gather"
    data = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntProp)
    traits = traits_def(Pure(), DataMovement())


# ------------------------------------- backward ops, losses and optimizer updates
# What the autodiff pass (docs/autodiff.md) emits. Each backward op's value is the
# gradient of sum(F(...) * dy) for its forward op F, which is what `jax.vjp(F, ...)(dy)`
# returns; its attributes are F's, so the pass copies them from the forward op.


class _ActivationGradOp(GraphOp):
    y = operand_def(TensorType)
    dy = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Elementwise(), Fusible(), Training())


@irdl_op_definition
class ReluGradOp(_ActivationGradOp):
    """relu's gradient from its output y: dy where y > 0 (that is, where x > 0), else 0."""

    name = "graph.relu_grad"


@irdl_op_definition
class SigmoidGradOp(_ActivationGradOp):
    """sigmoid's gradient from its output y: dy * y * (1 - y)."""

    name = "graph.sigmoid_grad"


@irdl_op_definition
class TanhGradOp(_ActivationGradOp):
    """tanh's gradient from its output y: dy * (1 - y * y)."""

    name = "graph.tanh_grad"


@irdl_op_definition
class GeluGradOp(GraphOp):
    """Exact (erf) gelu's gradient from its INPUT x, since gelu cannot be inverted:
    dy * (Phi(x) + x * phi(x))."""

    name = "graph.gelu_grad"
    input = operand_def(TensorType)
    dy = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Elementwise(), Fusible(), Training())


@irdl_op_definition
class Conv2dGradInputOp(GraphOp):
    """Gradient w.r.t. the input x (of shape `input_shape`, NCHW) of
    sum(conv2d(x, weight) * dy), conv2d without activation: a transposed convolution."""

    name = "graph.conv2d_grad_input"
    dy = operand_def(TensorType)
    weight = operand_def(TensorType)
    dx = result_def(TensorType)
    strides = prop_def(IntsProp)
    padding = prop_def(PaddingProp)
    groups = prop_def(IntProp)
    input_shape = prop_def(IntsProp)
    traits = traits_def(Contraction(), Training())


@irdl_op_definition
class Conv2dGradWeightOp(GraphOp):
    """Gradient w.r.t. the weight w (OIHW, `kernel` high and wide) of
    sum(conv2d(input, w) * dy), conv2d without activation."""

    name = "graph.conv2d_grad_weight"
    input = operand_def(TensorType)
    dy = operand_def(TensorType)
    dw = result_def(TensorType)
    strides = prop_def(IntsProp)
    padding = prop_def(PaddingProp)
    groups = prop_def(IntProp)
    kernel = prop_def(IntsProp)
    traits = traits_def(Contraction(), Training())


@irdl_op_definition
class Pool2dGradOp(GraphOp):
    """Gradient w.r.t. x of sum(pool2d(x) * dy). Average: each window spreads
    dy / (kh * kw) over its positions (padded ones dropped). Max: each window's dy goes
    to one position of its maximum, on ties the first in row-major order within the
    window, which is the choice XLA's select-and-scatter makes for JAX's max pooling."""

    name = "graph.pool2d_grad"
    input = operand_def(TensorType)
    dy = operand_def(TensorType)
    dx = result_def(TensorType)
    kind = prop_def(TextProp)
    kernel = prop_def(IntsProp)
    strides = prop_def(IntsProp)
    padding = prop_def(PaddingProp)
    traits = traits_def(Pure(), Training())


@irdl_op_definition
class ReduceGradOp(GraphOp):
    """Gradient w.r.t. x of sum(reduce(x) * dy): dy broadcast back over `axes` (sum),
    divided by the count reduced (mean), or split equally among the positions equal to
    the maximum (max, JAX's rule)."""

    name = "graph.reduce_grad"
    input = operand_def(TensorType)
    dy = operand_def(TensorType)
    dx = result_def(TensorType)
    kind = prop_def(TextProp)
    axes = prop_def(IntsProp)
    keepdims = prop_def(FlagProp)
    traits = traits_def(Pure(), Training())


@irdl_op_definition
class ScatterAddOp(GraphOp):
    """An embedding table's gradient: zeros of shape [rows, features], then
    out[ids[i...], :] += updates[i..., :], repeated ids accumulating."""

    name = "graph.scatter_add"
    ids = operand_def(TensorType)
    updates = operand_def(TensorType)
    result = result_def(TensorType)
    rows = prop_def(IntProp)
    traits = traits_def(Pure(), Training())


@irdl_op_definition
class AggregateGradOp(GraphOp):
    """The gradient of an aggregation w.r.t. x: operands x, src, dst, the optional
    weight and dy; each edge's share of dy added into its source's row."""

    name = "graph.aggregate_grad"
    inputs = var_operand_def(TensorType)
    dx = result_def(TensorType)
    reduce = prop_def(TextProp)
    block_rows = prop_def(IntProp)
    traits = traits_def(Pure(), Training())


@irdl_op_definition
class AggregateWeightGradOp(GraphOp):
    """The gradient of a sum or mean aggregation w.r.t. its per-edge weights."""

    name = "graph.aggregate_weight_grad"
    input = operand_def(TensorType)
    src = operand_def(TensorType)
    dst = operand_def(TensorType)
    dy = operand_def(TensorType)
    dweight = result_def(TensorType)
    reduce = prop_def(TextProp)
    block_rows = prop_def(IntProp)
    traits = traits_def(Pure(), Training())


@irdl_op_definition
class EdgeSoftmaxGradOp(GraphOp):
    """The gradient of an edge softmax w.r.t. its scores, from its result y and dy."""

    name = "graph.edge_softmax_grad"
    y = operand_def(TensorType)
    dst = operand_def(TensorType)
    dy = operand_def(TensorType)
    dscores = result_def(TensorType)
    block_rows = prop_def(IntProp)
    traits = traits_def(Pure(), Training())


@irdl_op_definition
class LayernormGradOp(GraphOp):
    """Gradients of sum(layernorm(x, gamma, beta) * dy) w.r.t. x, gamma and beta
    (beta's value does not enter them, so it is no operand)."""

    name = "graph.layernorm_grad"
    input = operand_def(TensorType)
    gamma = operand_def(TensorType)
    dy = operand_def(TensorType)
    dx = result_def(TensorType)
    dgamma = result_def(TensorType)
    dbeta = result_def(TensorType)
    axis = prop_def(IntProp)
    epsilon = prop_def(FloatProp)
    traits = traits_def(Pure(), Training())


@irdl_op_definition
class BatchnormTrainOp(GraphOp):
    """Training batch normalization over channel axis 1: the batch mean and biased
    variance over every other axis, and y = (x - mean) / sqrt(var + epsilon) * scale + bias."""

    name = "graph.batchnorm_train"
    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    bias = operand_def(TensorType)
    y = result_def(TensorType)
    mean = result_def(TensorType)
    var = result_def(TensorType)
    epsilon = prop_def(FloatProp)
    traits = traits_def(Pure(), Training())


@irdl_op_definition
class BatchnormGradOp(GraphOp):
    """Gradients of sum(y * dy), y batchnorm_train's normalized output, w.r.t. x
    (through the batch statistics), scale and bias."""

    name = "graph.batchnorm_grad"
    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    dy = operand_def(TensorType)
    dx = result_def(TensorType)
    dscale = result_def(TensorType)
    dbias = result_def(TensorType)
    epsilon = prop_def(FloatProp)
    traits = traits_def(Pure(), Training())


@irdl_op_definition
class SoftmaxCrossEntropyOp(GraphOp):
    """Per-row loss logsumexp(logits) - logits[label], classes on the last axis and
    integer labels of the other axes' shape."""

    name = "graph.softmax_cross_entropy"
    logits = operand_def(TensorType)
    labels = operand_def(TensorType)
    losses = result_def(TensorType)
    traits = traits_def(Pure(), Training())


@irdl_op_definition
class SoftmaxCrossEntropyGradOp(GraphOp):
    """Gradient w.r.t. the logits of sum(softmax_cross_entropy(logits, labels) * dloss):
    (softmax(logits) - one_hot(labels)) * dloss[..., None]."""

    name = "graph.softmax_cross_entropy_grad"
    logits = operand_def(TensorType)
    labels = operand_def(TensorType)
    dloss = operand_def(TensorType)
    dlogits = result_def(TensorType)
    traits = traits_def(Pure(), Training())


@irdl_op_definition
class AdamUpdateOp(GraphOp):
    """One Adam step (PyTorch's and optax's, epsilon outside the square root), `step`
    the 1-based number of this update (a rank-0 f32, whatever the weights' type):
    m' = b1 m + (1 - b1) g, v' = b2 v + (1 - b2) g^2,
    param' = param - lr (m' / (1 - b1^step)) / (sqrt(v' / (1 - b2^step)) + epsilon)."""

    name = "graph.adam_update"
    param = operand_def(TensorType)
    grad = operand_def(TensorType)
    m = operand_def(TensorType)
    v = operand_def(TensorType)
    step = operand_def(TensorType)
    new_param = result_def(TensorType)
    new_m = result_def(TensorType)
    new_v = result_def(TensorType)
    lr = prop_def(FloatProp)
    beta1 = prop_def(FloatProp)
    beta2 = prop_def(FloatProp)
    epsilon = prop_def(FloatProp)
    traits = traits_def(Pure(), Training())


GRAPH_OPS: tuple[type[GraphOp], ...] = (
    AddOp,
    MulOp,
    ScaleOp,
    ReluOp,
    SigmoidOp,
    TanhOp,
    GeluOp,
    TransposeOp,
    MatmulOp,
    Conv2dOp,
    EnlargeOp,
    Pool2dOp,
    ConcatOp,
    SplitOp,
    OnesOp,
    ZerosOp,
    CPoolOp,
    IConvOp,
    IMatmulOp,
    ConstantOp,
    ReshapeOp,
    SoftmaxOp,
    ReduceOp,
    BatchnormOp,
    LayernormOp,
    EmbeddingOp,
    NegOp,
    ExpOp,
    LogOp,
    SqrtOp,
    ReciprocalOp,
    ErfOp,
    AbsOp,
    SubOp,
    DivOp,
    PowOp,
    MaxOp,
    MinOp,
    CompareOp,
    NotOp,
    AndOp,
    OrOp,
    XorOp,
    WhereOp,
    CastOp,
    BroadcastOp,
    GatherOp,
    AggregateOp,
    EdgeSoftmaxOp,
    EdgeScoresOp,
    # backward ops, losses and optimizer updates (autodiff, docs/autodiff.md)
    ReluGradOp,
    SigmoidGradOp,
    TanhGradOp,
    GeluGradOp,
    Conv2dGradInputOp,
    Conv2dGradWeightOp,
    Pool2dGradOp,
    ReduceGradOp,
    ScatterAddOp,
    AggregateGradOp,
    AggregateWeightGradOp,
    EdgeSoftmaxGradOp,
    LayernormGradOp,
    BatchnormTrainOp,
    BatchnormGradOp,
    SoftmaxCrossEntropyOp,
    SoftmaxCrossEntropyGradOp,
    AdamUpdateOp,
)

OPS_BY_NAME: Mapping[str, type[GraphOp]] = {op.op_name(): op for op in GRAPH_OPS}
"""Op classes by short name (`"conv2d"`), the key the backends and `dag` use."""

Graph = Dialect("graph", list(GRAPH_OPS), [])
