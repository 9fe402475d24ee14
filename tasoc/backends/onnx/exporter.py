"""Export a `graph` program to ONNX, so any ONNX runtime can run it.

`export_onnx(module, param_values)` writes `@main` as an ONNX graph: activation
arguments are graph inputs, weights (`{graph.param}`) initializers holding their
values (not also inputs, so runtimes may fold and fuse them), results the graph
outputs. Each `graph` op becomes ONNX nodes that compute what the numpy reference
computes; the table is in `docs/onnx.md`.

Where ONNX spells several equal IR forms one way (a Conv's pads for `same` and for
explicit padding, Mul for `mul` and `scale`), the exporter records the form of each
node, and the argument order, in the model's metadata (`conventions.NODE_FORMS_KEY`,
`ARGUMENT_ORDER_KEY`), so that `import_onnx(export_onnx(m))` gives `m` back.

Opset 17 is the first with LayerNormalization; programs with bfloat16 values use
opset 22, where every op written here accepts bfloat16. GELU is written in its erf
form, the one PyTorch writes and runtimes recognize. Writing the model to a file
(atomically, with external data over 2 GiB) is `files.save_onnx`.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import version

import numpy as np
import onnx
from onnx import TensorProto, helper
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tasoc.backends import describe, numpy_dtype
from tasoc.backends.arguments import random_inputs, value_kind
from tasoc.backends.onnx.conventions import (
    ARGUMENT_ORDER_KEY,
    DTYPES_BY_ONNX,
    GELU_SQRT2,
    NODE_FORMS_KEY,
)
from tasoc.backends.onnx.errors import OnnxExportError
from tasoc.backends.onnx.files import check_exported, fits_in_protobuf
from tasoc.ir import graph as G
from tasoc.ir.program import (
    ArgInfo,
    arg_infos,
    entry_function,
    refuse_encodings,
    return_values,
)
from tasoc.ir.shapes import ConstData, DType, window_pads

EXPORT_OPSET = 17
"""The default-domain opset of exported models: the first with LayerNormalization,
and old enough for most runtimes."""

BFLOAT16_OPSET = 22
"""The opset of models with bfloat16 values: the first in which every op the exporter
writes accepts bfloat16 (Conv, the pools and ConstantOfShape gain it in 20-22)."""

_ONNX_DTYPES: Mapping[DType, int] = {kind: onnx_type for onnx_type, kind in DTYPES_BY_ONNX.items()}


def export_onnx(
    module: ModuleOp,
    param_values: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
) -> onnx.ModelProto:
    """The ONNX model of `module`'s `@main`, checked with `onnx.checker` (here, or by
    `save_onnx` for a model over protobuf's 2 GiB, which only a file can hold).

    `param_values` gives every weight by argument name (cast to its element type
    within its kind); values for names the program does not take are ignored, so an
    imported model's weights still fit after a pass dropped one. Without it the
    weights are drawn as `random_inputs(module, seed)` draws them: deterministic,
    and sized so that deep models stay finite.
    """
    function = entry_function(module)
    refuse_encodings(function, "ONNX export")
    infos = arg_infos(function)
    values = _weights(module, infos, param_values, seed)
    model = _Exporter(function, infos, values).model()
    if fits_in_protobuf(model):
        check_exported(model)
    # A larger model cannot be serialized whole, which the in-memory check needs;
    # `save_onnx` checks it once written with external data.
    return model


def _weights(
    module: ModuleOp,
    infos: Sequence[ArgInfo],
    given: Mapping[str, np.ndarray] | None,
    seed: int,
) -> dict[int, np.ndarray]:
    """Weight values by argument index, checked against the signature."""
    params = {index: info for index, info in enumerate(infos) if info.is_param}
    if given is None:
        drawn = random_inputs(module, seed)
        return {index: drawn[index] for index in params}
    repeated = sorted(name for name, n in Counter(i.name for i in params.values()).items() if n > 1)
    if repeated:
        raise OnnxExportError(
            f"several weights are named {', '.join(repeated)}; values cannot be matched by name"
        )
    missing = sorted({info.name for info in params.values()} - given.keys())
    if missing:
        raise OnnxExportError(f"param_values: missing values for {', '.join(missing)}")
    values = {}
    for index, info in params.items():
        array = np.asarray(given[info.name])
        if array.shape != info.sig.shape or value_kind(array.dtype) != value_kind(
            numpy_dtype(info.sig.dtype)
        ):
            raise OnnxExportError(
                f"param_values: '{info.name}' expects {info.sig}, got {describe(array)}"
            )
        try:
            with np.errstate(over="raise", invalid="raise"):
                values[index] = array.astype(numpy_dtype(info.sig.dtype))
        except FloatingPointError:
            raise OnnxExportError(
                f"param_values: '{info.name}' holds values beyond the range of {info.sig.dtype}"
            ) from None
    return values


def _add_tensor(tensor: TensorProto, name: str, array: np.ndarray, dtype: DType) -> None:
    """Fill `tensor`, already in its model, as a raw-data initializer (raw bytes carry
    bfloat16, which NumPy lacks, too).

    Filled in place because protobuf copies a message into a repeated field by
    serializing it, which fails for a tensor over 2 GiB (a Criteo-sized embedding).
    """
    data = np.asarray(array).astype(numpy_dtype(dtype), order="C")
    tensor.name = name
    tensor.data_type = _ONNX_DTYPES[dtype]
    tensor.dims.extend(data.shape)
    tensor.raw_data = data.tobytes()


def _tensor(name: str, array: np.ndarray, dtype: DType) -> TensorProto:
    """A raw-data tensor standing alone (a Constant node's value)."""
    tensor = TensorProto()
    _add_tensor(tensor, name, array, dtype)
    return tensor


def _value_info(name: str, value: SSAValue) -> onnx.ValueInfoProto:
    sig = G.sig_of(value.type)
    return helper.make_tensor_value_info(name, _ONNX_DTYPES[sig.dtype], sig.shape)


OpExporter = Callable[["_Exporter", G.GraphOp, list[str], list[str]], None]
EXPORTERS: dict[str, OpExporter] = {}
"""How each `graph` op (by short name) is written as ONNX nodes."""


def _exports(*names: str) -> Callable[[OpExporter], OpExporter]:
    def register(fn: OpExporter) -> OpExporter:
        for name in names:
            EXPORTERS[name] = fn
        return fn

    return register


class _Exporter:
    """Writes one function's ops, in block order, as ONNX nodes."""

    def __init__(
        self, function: func.FuncOp, infos: Sequence[ArgInfo], weights: Mapping[int, np.ndarray]
    ) -> None:
        self.function = function
        self.infos = infos
        self.weights = weights
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[tuple[str, np.ndarray, DType]] = []
        """Added to the model in place once it exists (see `_add_tensor`)."""
        self.names: dict[SSAValue, str] = {}
        self.taken: set[str] = set()
        self.node_counts: Counter[str] = Counter()
        """Nodes written so far for each op (node names are the op's, numbered)."""
        self.helper_constants: dict[tuple[str, bytes, tuple[int, ...]], str] = {}
        self.current = ""
        self.forms: dict[str, str] = {}
        values = [*function.body.block.args, *(r for op in function.body.ops for r in op.results)]
        uses_bf16 = any(G.sig_of(v.type).dtype == DType.BF16 for v in values)
        self.opset = BFLOAT16_OPSET if uses_bf16 else EXPORT_OPSET

    def fresh(self, base: str) -> str:
        """A value name not used yet: `base`, else `base.1`, `base.2`, ..."""
        name, count = base, 0
        while name in self.taken:
            count += 1
            name = f"{base}.{count}"
        self.taken.add(name)
        return name

    def node(
        self,
        op_type: str,
        inputs: Sequence[str],
        outputs: Sequence[str],
        form: str | None = None,
        **attrs: object,
    ) -> None:
        """Append a node named after the current op; `form` records the IR form the
        node was written from (conventions.NODE_FORMS_KEY)."""
        count = self.node_counts[self.current]
        self.node_counts[self.current] += 1
        label = f"{self.current}/{count}" if count else self.current
        given = {key: value for key, value in attrs.items() if value != []}
        node = helper.make_node(op_type, inputs, outputs, name=label, **given)
        # An empty list (the perm of a rank-0 transpose) has no type to infer.
        node.attribute.extend(
            helper.make_attribute(key, [], attr_type=onnx.AttributeProto.INTS)
            for key in attrs.keys() - given.keys()
        )
        self.nodes.append(node)
        if form is not None:
            self.forms[label] = form

    def temporary(self, suffix: str) -> str:
        return self.fresh(f"{self.current}.{suffix}")

    def constant(self, array: np.ndarray, dtype: DType, what: str) -> str:
        """A helper initializer (a reshape target, GELU's sqrt 2), shared when equal."""
        data = np.asarray(array).astype(numpy_dtype(dtype))
        key = (dtype.value, data.tobytes(), data.shape)
        if key not in self.helper_constants:
            name = self.fresh(what)
            self.initializers.append((name, data, dtype))
            self.helper_constants[key] = name
        return self.helper_constants[key]

    def ints(self, values: Sequence[int], what: str) -> str:
        return self.constant(np.asarray(values, np.int64).reshape(-1), DType.I64, what)

    def model(self) -> onnx.ModelProto:
        block = self.function.body.block
        inputs = []
        for index, (info, arg) in enumerate(zip(self.infos, block.args, strict=True)):
            name = self.fresh(info.name)
            self.names[arg] = name
            if info.is_param:
                self.initializers.append((name, self.weights[index], info.sig.dtype))
            else:
                inputs.append(_value_info(name, arg))
        for index, op in enumerate(block.ops):
            if isinstance(op, func.ReturnOp):
                break
            if not isinstance(op, G.GraphOp):
                raise OnnxExportError(f"cannot export op '{op.name}': not a graph op")
            self.current = f"{op.op_name()}.{index}"
            outs = [
                self.fresh(
                    result.name_hint or self.current + (f".{k}" if len(op.results) > 1 else "")
                )
                for k, result in enumerate(op.results)
            ]
            self.names.update(zip(op.results, outs, strict=True))
            EXPORTERS[op.op_name()](self, op, [self.names[v] for v in op.operands], outs)
        outputs = []
        arguments = set(block.args)
        for index, value in enumerate(return_values(self.function)):
            name = self.names[value]
            if value in arguments or name in {o.name for o in outputs}:
                # ONNX outputs are distinct values produced by nodes.
                self.current = f"output.{index}"
                alias = self.fresh(self.current)
                self.node("Identity", [name], [alias])
                name = alias
            outputs.append(_value_info(name, value))
        graph = helper.make_graph(self.nodes, self.function.sym_name.data, inputs, outputs)
        opset = helper.make_opsetid("", self.opset)
        model = helper.make_model(
            graph,
            opset_imports=[opset],
            # The oldest IR version that can carry the opset, so older runtimes read it.
            ir_version=helper.find_min_ir_version_for([opset]),
            producer_name="tasoc",
            producer_version=version("tasoc"),
        )
        order = [self.names[arg] for arg in block.args]
        helper.set_model_props(
            model, {ARGUMENT_ORDER_KEY: json.dumps(order), NODE_FORMS_KEY: json.dumps(self.forms)}
        )
        for name, array, dtype in self.initializers:
            _add_tensor(model.graph.initializer.add(), name, array, dtype)
        return model


def _dtype(value: SSAValue) -> DType:
    return G.sig_of(value.type).dtype


def _shape(value: SSAValue) -> tuple[int, ...]:
    return G.sig_of(value.type).shape


# ---------------------------------------------------------------------- element-wise

_SAME_NAME = {
    "add": "Add",
    "mul": "Mul",
    "scale": "Mul",
    "relu": "Relu",
    "sigmoid": "Sigmoid",
    "tanh": "Tanh",
    "matmul": "MatMul",
    "neg": "Neg",
    "exp": "Exp",
    "log": "Log",
    "sqrt": "Sqrt",
    "reciprocal": "Reciprocal",
    "erf": "Erf",
    "abs": "Abs",
    "sub": "Sub",
    "div": "Div",
    "pow": "Pow",
    "max": "Max",
    "min": "Min",
    "not": "Not",
    "and": "And",
    "or": "Or",
    "xor": "Xor",
    "where": "Where",
}


_NARROW = frozenset({DType.I8, DType.I16, DType.U8})
_IN_INT32: Mapping[str, frozenset[DType]] = {
    "Neg": frozenset({DType.U8}),
    "Pow": _NARROW,
    "MatMul": _NARROW,
    "ReduceSum": _NARROW,
    "ReduceProd": _NARROW,
    "ReduceMax": frozenset({DType.I16}),
    "ReduceMin": frozenset({DType.I16}),
    "Max": frozenset({DType.I16}),
    "Min": frozenset({DType.I16}),
    "Where": frozenset({DType.I16, DType.BOOL}),
    **dict.fromkeys(("Less", "LessOrEqual", "Greater", "GreaterOrEqual"), frozenset({DType.BOOL})),
}
"""Operand element types that an ONNX operator does not take (Neg no unsigned type, Pow,
MatMul and the reductions no 8- or 16-bit one, the orderings no boolean) or that
onnxruntime has no kernel for (int16 Max, Min and Where, boolean Where): the exporter
computes these in int32 and casts the result back. That is exact: integer arithmetic
wraps alike in every width once cast back, and booleans order as 0 < 1."""


def _typed_node(
    ex: _Exporter,
    op_type: str,
    ins: list[str],
    outs: list[str],
    dtype: DType,
    data: Sequence[int] | None = None,
    form: str | None = None,
    cast_back: bool = True,
    **attrs: object,
) -> None:
    """`ex.node(op_type, ...)` on operands `data` (all by default) of element type
    `dtype`, computed in int32 where `_IN_INT32` says so; the result is cast back to
    `dtype` unless `cast_back` is false (a comparison's is boolean)."""
    if dtype not in _IN_INT32.get(op_type, ()):
        ex.node(op_type, ins, outs, form, **attrs)
        return
    widened = list(ins)
    for index in range(len(ins)) if data is None else data:
        widened[index] = ex.temporary("int32")
        ex.node("Cast", [ins[index]], [widened[index]], to=TensorProto.INT32)
    if not cast_back:
        ex.node(op_type, widened, outs, form, **attrs)
        return
    wide = ex.temporary("int32")
    ex.node(op_type, widened, [wide], form, **attrs)
    ex.node("Cast", [wide], outs, to=_ONNX_DTYPES[dtype])


@_exports(*_SAME_NAME)
def _direct(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    # A Mul with a scalar operand reads back as graph.scale unless recorded as a mul,
    # a Div by a weight as a product with its reciprocal unless recorded as a div.
    data = (1, 2) if op.op_name() == "where" else None  # the condition stays boolean
    form = op.op_name() if op.op_name() in ("mul", "div") else None
    dtype = _dtype(op.results[0])
    _typed_node(ex, _SAME_NAME[op.op_name()], ins, outs, dtype, data, form)


@_exports("gelu")
def _gelu(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    dtype = _dtype(op.results[0])
    scaled, erf, plus_one, times = (ex.temporary(s) for s in ("scaled", "erf", "plus_one", "x"))
    ex.node("Div", [ins[0], ex.constant(np.asarray(GELU_SQRT2), dtype, "gelu.sqrt2")], [scaled])
    ex.node("Erf", [scaled], [erf])
    ex.node("Add", [erf, ex.constant(np.asarray(1.0), dtype, "gelu.one")], [plus_one])
    ex.node("Mul", [ins[0], plus_one], [times])
    ex.node("Mul", [times, ex.constant(np.asarray(0.5), dtype, "gelu.half")], outs)


_COMPARISONS = {
    "eq": "Equal",
    "lt": "Less",
    "le": "LessOrEqual",
    "gt": "Greater",
    "ge": "GreaterOrEqual",
}


@_exports("compare")
def _compare(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    """ONNX has no NotEqual: `ne` is Not(Equal)."""
    predicate = op.py_attrs()["predicate"]
    if predicate != "ne":
        _typed_node(ex, _COMPARISONS[predicate], ins, outs, _dtype(op.operands[0]), cast_back=False)
        return
    equal = ex.temporary("equal")
    ex.node("Equal", ins, [equal])
    ex.node("Not", [equal], outs, form="ne")


@_exports("cast")
def _cast(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    ex.node("Cast", ins, outs, to=_ONNX_DTYPES[op.py_attrs()["to"]])


# ---------------------------------------------------------------------------- linear


@_exports("transpose")
def _transpose(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    ex.node("Transpose", ins, outs, perm=list(op.py_attrs()["perm"]))


def _explicit_pads(op: G.GraphOp, kernel: Sequence[int]) -> list[int]:
    """ONNX pads [top, left, bottom, right] of a window op (`same` made explicit)."""
    attrs = op.py_attrs()
    in_hw = _shape(op.operands[0])[2:]
    return list(window_pads(attrs["padding"], in_hw, tuple(kernel), attrs["strides"]))


def _padding_form(op: G.GraphOp) -> str:
    padding = op.py_attrs()["padding"]
    return padding if isinstance(padding, str) else "explicit"


@_exports("conv2d")
def _conv2d(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    attrs = op.py_attrs()
    kernel = list(_shape(op.operands[1])[2:])
    fused_relu = attrs["activation"] == "relu"
    conv_out = [ex.temporary("conv")] if fused_relu else outs
    ex.node(
        "Conv",
        ins,
        conv_out,
        form=_padding_form(op),
        kernel_shape=kernel,
        strides=list(attrs["strides"]),
        pads=_explicit_pads(op, kernel),
        group=attrs["groups"],
    )
    if fused_relu:
        ex.node("Relu", conv_out, outs, form="fused")


@_exports("enlarge")
def _enlarge(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    _, _, kh, kw = _shape(op.operands[0])
    big_h, big_w = op.py_attrs()["kernel"]
    dh, dw = (big_h - kh) // 2, (big_w - kw) // 2
    padded = ex.temporary("padded")
    ex.node("Pad", [ins[0], ex.ints([0, 0, dh, dw, 0, 0, dh, dw], f"{ex.current}.pads")], [padded])
    # The Identity keeps onnxruntime (1.2x) from fusing this Pad into a Conv that reads
    # it as its *weight*, a fusion meant for Pad -> Conv input that breaks the model.
    ex.node("Identity", [padded], outs)


@_exports("pool2d")
def _pool2d(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    attrs = op.py_attrs()
    kh, kw = attrs["kernel"]
    pads = _explicit_pads(op, (kh, kw))
    top, left, bottom, right = pads
    window = {"kernel_shape": [kh, kw], "strides": list(attrs["strides"]), "pads": pads}
    if max(top, bottom) < kh and max(left, right) < kw:
        if attrs["kind"] == "max":
            ex.node("MaxPool", ins, outs, form=_padding_form(op), **window)
        else:  # graph.pool2d averages over the whole window, padded zeros included
            ex.node("AveragePool", ins, outs, _padding_form(op), count_include_pad=1, **window)
        return
    # onnxruntime rejects pools whose padding is not smaller than the kernel (some
    # windows hold only padding), also after fusing a Pad node into the pool.
    dtype = _dtype(op.operands[0])
    if attrs["kind"] == "avg":  # TASO's identity: a depthwise convolution with C_pool
        channels = _shape(op.operands[0])[1]
        kernel = ex.temporary("c_pool")
        _fill(ex, (channels, 1, kh, kw), 1.0 / (kh * kw), dtype, [kernel])
        form = f"avg_pool {_padding_form(op)}"
        ex.node("Conv", [ins[0], kernel], outs, form, group=channels, **window)
        return
    # Max pooling pads with -inf, which onnxruntime does not fuse into the pool.
    padded = ex.temporary("padded")
    fill = ex.constant(np.asarray(-np.inf), dtype, "max_pool.fill")
    spatial = ex.ints([0, 0, top, left, 0, 0, bottom, right], f"{ex.current}.pads")
    ex.node("Pad", [ins[0], spatial, fill], [padded])
    ex.node("MaxPool", [padded], outs, _padding_form(op), **{**window, "pads": [0, 0, 0, 0]})


# ------------------------------------------------------------------------- structure


@_exports("concat")
def _concat(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    ex.node("Concat", ins, outs, axis=op.py_attrs()["axis"])


@_exports("split")
def _split(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    attrs = op.py_attrs()
    sizes = ex.ints(attrs["sizes"], f"{ex.current}.sizes")
    ex.node("Split", [ins[0], sizes], outs, axis=attrs["axis"])


@_exports("reshape")
def _reshape(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    ex.node("Reshape", [ins[0], ex.ints(op.py_attrs()["shape"], f"{ex.current}.shape")], outs)


# ------------------------------------------------------------------------- constants


def _fill(
    ex: _Exporter,
    shape: Sequence[int],
    value: float,
    dtype: DType,
    outs: list[str],
    form: str | None = None,
) -> None:
    fill = _tensor("value", np.asarray([value]), dtype)
    ex.node("ConstantOfShape", [ex.ints(shape, f"{ex.current}.shape")], outs, form, value=fill)


@_exports("ones", "zeros", "c_pool")
def _filled(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    attrs = op.py_attrs()
    if op.op_name() == "c_pool":
        kh, kw = attrs["kernel"]
        shape, value = (attrs["channels"], 1, kh, kw), 1.0 / (kh * kw)
    else:
        shape, value = attrs["shape"], 1.0 if op.op_name() == "ones" else 0.0
    _fill(ex, shape, value, attrs["dtype"], outs, form=op.op_name())


@_exports("i_matmul")
def _i_matmul(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    attrs = op.py_attrs()
    square = ex.temporary("zeros")
    _fill(ex, (attrs["size"], attrs["size"]), 0.0, attrs["dtype"], [square])
    ex.node("EyeLike", [square], outs)


def _literal(
    ex: _Exporter, op: G.GraphOp, array: np.ndarray, dtype: DType, outs: list[str]
) -> None:
    ex.node("Constant", [], outs, op.op_name(), value=_tensor("value", array, dtype))


@_exports("i_conv")
def _i_conv(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    attrs = op.py_attrs()
    channels, (kh, kw) = attrs["channels"], attrs["kernel"]
    kernel = np.zeros((channels, channels, kh, kw))
    kernel[:, :, kh // 2, kw // 2] = np.eye(channels)
    _literal(ex, op, kernel, attrs["dtype"], outs)


@_exports("constant")
def _constant(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    value: ConstData = op.py_attrs()["value"]
    _literal(ex, op, np.asarray(value.values).reshape(value.shape), value.dtype, outs)


# ------------------------------------------------------------------------- model ops


@_exports("softmax")
def _softmax(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    ex.node("Softmax", ins, outs, axis=op.py_attrs()["axis"])


@_exports("reduce")
def _reduce(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    attrs = op.py_attrs()
    op_type = {
        "sum": "ReduceSum",
        "mean": "ReduceMean",
        "max": "ReduceMax",
        "min": "ReduceMin",
        "prod": "ReduceProd",
    }[attrs["kind"]]
    dtype = _dtype(op.operands[0])
    if op_type == "ReduceMean" and dtype in _NARROW:
        # The reference's integer mean divides the sum wrapped to the type, truncating.
        total, wide = ex.temporary("sum"), ex.temporary("int32")
        _reduce_node(ex, "ReduceSum", ins[0], attrs["axes"], attrs["keepdims"], [total], dtype)
        ex.node("Cast", [total], [wide], to=TensorProto.INT32)
        count = math.prod(_shape(op.operands[0])[axis] for axis in attrs["axes"])
        quotient = ex.temporary("mean")
        ex.node("Div", [wide, ex.constant(np.asarray(count), DType.I32, "mean.count")], [quotient])
        ex.node("Cast", [quotient], outs, to=_ONNX_DTYPES[dtype])
        return
    _reduce_node(ex, op_type, ins[0], attrs["axes"], attrs["keepdims"], outs, dtype)


def _reduce_node(
    ex: _Exporter,
    op_type: str,
    x: str,
    axes: Sequence[int],
    keepdims: bool,
    outs: list[str],
    dtype: DType,
) -> None:
    """A Reduce* node, its axes an input or an attribute as the opset has them."""
    if op_type == "ReduceSum" or ex.opset >= 18:  # axes became an input in 13 and 18
        inputs = [x, ex.ints(axes, f"{ex.current}.axes")]
        _typed_node(ex, op_type, inputs, outs, dtype, (0,), keepdims=int(keepdims))
    else:
        _typed_node(ex, op_type, [x], outs, dtype, axes=list(axes), keepdims=int(keepdims))


@_exports("batchnorm")
def _batchnorm(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    ex.node("BatchNormalization", ins, outs, epsilon=op.py_attrs()["epsilon"])


@_exports("layernorm")
def _layernorm(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    attrs = op.py_attrs()
    ex.node("LayerNormalization", ins, outs, axis=attrs["axis"], epsilon=attrs["epsilon"])


@_exports("broadcast")
def _broadcast(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    ex.node("Expand", [ins[0], ex.ints(op.py_attrs()["shape"], f"{ex.current}.shape")], outs)


@_exports("gather")
def _gather(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    # A Gather along axis 0 of a table reads back as graph.embedding unless recorded.
    ex.node("Gather", ins, outs, form="gather", axis=op.py_attrs()["axis"])


@_exports("embedding")
def _embedding(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    ids, table = ins
    ex.node("Gather", [table, ids], outs, axis=0)


# ------------------------------------------------------- backward ops and losses
# Written one way: the importer does not read these nodes back into backward ops, so a
# program holding them exports and runs but does not round-trip.


@_exports("relu_grad")
def _relu_grad(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    y, dy = ins
    zero = ex.constant(np.asarray(0.0), _dtype(op.results[0]), "grad.zero")
    positive = ex.temporary("positive")
    ex.node("Greater", [y, zero], [positive])
    ex.node("Where", [positive, dy, zero], outs)


@_exports("sigmoid_grad", "tanh_grad")
def _saturating_grad(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    """dy * y * (1 - y) for sigmoid, dy * (1 - y * y) for tanh."""
    y, dy = ins
    one = ex.constant(np.asarray(1.0), _dtype(op.results[0]), "grad.one")
    derivative = ex.temporary("derivative")
    if op.op_name() == "sigmoid_grad":
        rest = ex.temporary("one_minus_y")
        ex.node("Sub", [one, y], [rest])
        ex.node("Mul", [y, rest], [derivative])
    else:
        square = ex.temporary("square")
        ex.node("Mul", [y, y], [square])
        ex.node("Sub", [one, square], [derivative])
    ex.node("Mul", [dy, derivative], outs)


@_exports("gelu_grad")
def _gelu_grad(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    """dy * (Phi(x) + x * phi(x)), Phi through Erf as the gelu export writes it."""
    x, dy = ins
    dtype = _dtype(op.results[0])
    names = ("scaled", "erf", "plus_one", "cdf", "square", "exponent", "exp", "pdf", "x_pdf")
    scaled, erf, plus_one, cdf, square, exponent, exp, pdf, x_pdf = map(ex.temporary, names)
    ex.node("Div", [x, ex.constant(np.asarray(GELU_SQRT2), dtype, "gelu.sqrt2")], [scaled])
    ex.node("Erf", [scaled], [erf])
    ex.node("Add", [erf, ex.constant(np.asarray(1.0), dtype, "gelu.one")], [plus_one])
    ex.node("Mul", [plus_one, ex.constant(np.asarray(0.5), dtype, "gelu.half")], [cdf])
    ex.node("Mul", [x, x], [square])
    ex.node("Mul", [square, ex.constant(np.asarray(-0.5), dtype, "gelu.minus_half")], [exponent])
    ex.node("Exp", [exponent], [exp])
    density = np.asarray(1 / np.sqrt(2 * np.pi))
    ex.node("Mul", [exp, ex.constant(density, dtype, "gelu.inv_sqrt_2pi")], [pdf])
    ex.node("Mul", [x, pdf], [x_pdf])
    derivative = ex.temporary("derivative")
    ex.node("Add", [cdf, x_pdf], [derivative])
    ex.node("Mul", [dy, derivative], outs)


@_exports("conv2d_grad_input")
def _conv2d_grad_input(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    """ConvTranspose with the forward's weight, strides, pads and groups; its output
    padding adds back the trailing rows (columns) no window of the forward reached."""
    attrs = op.py_attrs()
    _, _, height, width = attrs["input_shape"]
    kernel = _shape(op.operands[1])[2:]
    pads = list(window_pads(attrs["padding"], (height, width), kernel, attrs["strides"]))
    top, left, bottom, right = pads
    unreached = [
        (size + before + after - k) % stride
        for size, before, after, k, stride in zip(
            (height, width), (top, left), (bottom, right), kernel, attrs["strides"], strict=True
        )
    ]
    ex.node(
        "ConvTranspose",
        ins,
        outs,
        kernel_shape=list(kernel),
        strides=list(attrs["strides"]),
        pads=pads,
        output_padding=unreached,
        group=attrs["groups"],
    )


@_exports("scatter_add")
def _scatter_add(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    """ScatterND (reduction add) of the updates into a zero table, one id per row."""
    ids, updates = ins
    zeros, ids64, indices = ex.temporary("zeros"), ex.temporary("ids"), ex.temporary("indices")
    _fill(ex, _shape(op.results[0]), 0.0, _dtype(op.results[0]), [zeros])
    ex.node("Cast", [ids], [ids64], to=TensorProto.INT64)
    ex.node("Unsqueeze", [ids64, ex.ints([-1], f"{ex.current}.axes")], [indices])
    ex.node("ScatterND", [zeros, indices, updates], outs, reduction="add")


@_exports("softmax_cross_entropy")
def _softmax_cross_entropy(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    """SoftmaxCrossEntropyLoss (reduction none) on the rows flattened to [rows, classes],
    since ONNX puts the classes on axis 1; the losses reshaped back to the batch shape."""
    logits, labels = ins
    classes = _shape(op.operands[0])[-1]
    rows, flat_labels, losses = (ex.temporary(s) for s in ("rows", "labels", "losses"))
    ex.node("Reshape", [logits, ex.ints([-1, classes], f"{ex.current}.rows")], [rows])
    ex.node("Reshape", [labels, ex.ints([-1], f"{ex.current}.flat")], [flat_labels])
    ex.node("SoftmaxCrossEntropyLoss", [rows, flat_labels], [losses], reduction="none")
    ex.node("Reshape", [losses, ex.ints(_shape(op.results[0]), f"{ex.current}.shape")], outs)


_NO_OPERATOR = {
    "conv2d_grad_weight": "a convolution's weight gradient",
    "pool2d_grad": "a pooling gradient",
    "reduce_grad": "a reduction's gradient",
    "layernorm_grad": "layer normalization's gradient",
    "batchnorm_train": "batch normalization returning the batch statistics",
    "batchnorm_grad": "batch normalization's gradient",
    "softmax_cross_entropy_grad": "the cross-entropy loss's gradient",
    "adam_update": "an Adam update",
    # ScatterND's reductions could compute some of these, but would import back as
    # other ops than the aggregation (docs/decisions.md).
    "aggregate": "a neighbour aggregation over edge blocks",
    "aggregate_grad": "a neighbour aggregation's gradient",
    "aggregate_weight_grad": "a neighbour aggregation's weight gradient",
    "edge_softmax": "a softmax over each target's edges",
    "edge_softmax_grad": "an edge softmax's gradient",
    "edge_scores": "per-edge scores of sources and targets",
}


@_exports(*_NO_OPERATOR)
def _no_operator(ex: _Exporter, op: G.GraphOp, ins: list[str], outs: list[str]) -> None:
    raise OnnxExportError(
        f"cannot export {op.name} to ONNX: ONNX has no operator for {_NO_OPERATOR[op.op_name()]}"
    )
