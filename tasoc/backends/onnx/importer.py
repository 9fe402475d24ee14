"""Import an ONNX model into the `graph` dialect.

`import_onnx(model)` returns a verified `builtin.module { func.func @main }` and the
values of its weights. The model's graph inputs become `@main`'s inputs, its
initializers `{graph.param}` arguments (named after them, their values returned
beside the module, never written into the IR), its outputs `@main`'s results.

ONNX values come in two kinds here. A *known* value is fixed at import time: an
initializer, a `Constant`-like node, or an integer computation on such values
(`Shape -> Gather -> Concat -> Reshape` chains on static shapes fold to constants).
Every other value is an SSA value of the IR. A known value used as the data of a
graph op is materialized once: an initializer as a weight argument, a literal as a
constant op (`graph.constant`, or TASO's `ones`/`zeros`/`c_pool`/`i_conv`/`i_matmul`
when it is one of those), a large literal (more than `CONSTANT_ELEMENTS_LIMIT`
elements) as a weight. Known values that only configure an op (a reshape target,
split sizes, axes) leave nothing behind.

The mapping is exact or it is an error: an op, attribute or operand the dialect
cannot express raises `OnnxImportError` with one line naming the op type, the node
and the opset. `docs/onnx.md` lists what maps to what.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from os import PathLike
from pathlib import Path
from typing import Any, NoReturn

import ml_dtypes
import numpy as np
import onnx
from google.protobuf.message import DecodeError, EncodeError
from onnx import TensorProto, external_data_helper, numpy_helper
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, BlockArgument, SSAValue
from xdsl.utils.exceptions import VerifyException

from tasoc.backends import NUMPY_DTYPES, numpy_dtype
from tasoc.ir import graph as G
from tasoc.ir.program import ENTRY, make_function
from tasoc.ir.shapes import ConstData, DType, ShapeError, TensorSig, window_pads

MIN_OPSET = 11
MAX_OPSET = 25
"""The default-domain opsets whose operator semantics the importer implements."""

CONSTANT_ELEMENTS_LIMIT = 1024
"""Literals up to this many elements become `graph.constant`; larger ones are weights
(DESIGN.md: weights are arguments, never literals in the text)."""

DTYPES_BY_ONNX: Mapping[int, DType] = {
    TensorProto.FLOAT: DType.F32,
    TensorProto.FLOAT16: DType.F16,
    TensorProto.BFLOAT16: DType.BF16,
    TensorProto.INT32: DType.I32,
    TensorProto.INT64: DType.I64,
}
"""ONNX element types the `graph` dialect has, shared with the exporter."""

ARGUMENT_ORDER_KEY = "tasoc.argument_order"
"""Model metadata written by the exporter: the JSON list of `@main`'s argument names
in order. ONNX keeps graph inputs and initializers (weights) in separate lists; this
lets the importer interleave them again as they were."""

NODE_FORMS_KEY = "tasoc.node_forms"
"""Model metadata written by the exporter: a JSON object mapping node names to the
IR form a node was written from, where ONNX has one spelling for several equal IR
forms: a Conv/pool's padding (`same`, `valid`, `explicit`), a Relu `fused` into the
Conv before it, a Mul that was a `mul` (a Mul by a scalar is otherwise a `scale`), a
constant that was `ones`, `zeros`, `c_pool`, `i_conv` or a `constant`, a Conv that was
an average pool (`avg_pool same`; see the exporter). The importer follows a form only where
it means the same as the node (a stale entry is ignored), so the metadata chooses
among equal programs and never changes what one computes."""

GELU_SQRT2 = math.sqrt(2.0)
"""The divisor of the erf-form GELU, x * 0.5 * (1 + erf(x / sqrt 2)), as exported."""

_DTYPES_BY_NUMPY: Mapping[np.dtype, DType] = {dtype: kind for kind, dtype in NUMPY_DTYPES.items()}

_GELU_MATCH_ULPS = 4
"""How many units in the last place of its own type a GELU constant may be off sqrt 2,
1/sqrt 2, 1 or 0.5 (exporters round and compute these differently)."""


class OnnxImportError(ValueError):
    """The model cannot be imported; the message is one line naming what and where."""


def import_onnx(
    model: str | PathLike[str] | bytes | onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> tuple[ModuleOp, dict[str, np.ndarray]]:
    """Import `model` (a path, serialized bytes or a ModelProto) into the graph dialect.

    `input_shapes` fixes the shapes of graph inputs by ONNX name (needed when the
    model declares dynamic dimensions). Returns the module and the weight values by
    `@main` argument name: the ONNX initializer name, made a valid IR name (see
    `ir_name`). Raises OnnxImportError with a one-line message.
    """
    proto = _load(model)
    opset = _default_opset(proto)
    order = _metadata(proto, ARGUMENT_ORDER_KEY)
    if not (isinstance(order, list) and all(isinstance(name, str) for name in order)):
        order = None
    forms = _metadata(proto, NODE_FORMS_KEY)
    if not (isinstance(forms, dict) and all(isinstance(form, str) for form in forms.values())):
        forms = {}
    return _Importer(proto.graph, opset, dict(input_shapes or {}), order, forms).run()


def ir_name(onnx_name: str, taken: set[str]) -> str:
    """The IR argument name of an ONNX value: invalid characters become `_`, a leading
    digit gets a `v` prefix, and a trailing `_<digits>` becomes `.<digits>` because
    xDSL drops such suffixes from name hints (`w_1` would print as `w`). A name in
    `taken` gets `.1`, `.2`, ... appended. The result is added to `taken`."""
    name = re.sub(r"[^\w$.-]", "_", onnx_name, flags=re.ASCII) or "arg"
    if not re.match(r"[A-Za-z_$.-]", name):
        name = f"v{name}"
    name = re.sub(r"_(\d+)$", r".\1", name)
    unique, count = name, 0
    while unique in taken:
        count += 1
        unique = f"{name}.{count}"
    taken.add(unique)
    return unique


def canonical_padding(
    pads: tuple[int, int, int, int],
    in_hw: tuple[int, int],
    kernel: tuple[int, int],
    strides: tuple[int, int],
    form: str | None = None,
) -> str | tuple[int, int, int, int]:
    """Explicit (top, left, bottom, right) pads as the IR writes them: `valid` when all
    zero, `same` when they are what `same` gives for this window, else the four ints.
    `form` (`same`, `valid` or `explicit`) picks among these where they agree.

    TASO's rewrite rules are stated for `same`/`valid`, so imported convolutions use
    those names whenever they mean the same thing.
    """
    meanings = {
        "valid": (0, 0, 0, 0),
        "same": window_pads("same", in_hw, kernel, strides),
        "explicit": pads,
    }
    if form is not None and meanings.get(form) == pads:
        return pads if form == "explicit" else form
    return next((name for name in ("valid", "same") if meanings[name] == pads), pads)


def _f32_decimal(value: float) -> float:
    """The shortest decimal that rounds to the same float32 as `value`.

    ONNX float attributes are float32 while IR attributes are f64: an epsilon of
    1e-5 comes back from ONNX as 9.99999974e-06, and this turns it into 1e-5 again.
    """
    return float(np.format_float_scientific(np.float32(value), unique=True))


# --------------------------------------------------------------------------- loading


PROTOBUF_LIMIT = 2**31
"""Bytes a serialized protobuf may hold; larger ONNX models need external data."""


def fits_in_protobuf(model: onnx.ModelProto) -> bool:
    """Whether `model` serializes as one protobuf (under 2 GiB); larger models are only
    written, read and checked with their tensors in an external data file.

    upb sizes a message by encoding it, so the initializers' raw bytes (known from their
    dims) are added up first: a model over the limit is told so without encoding
    gigabytes only to fail."""
    raw = sum(
        math.prod(tensor.dims) * onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
        for tensor in model.graph.initializer
        if tensor.HasField("raw_data")
    )
    if raw >= PROTOBUF_LIMIT:
        return False
    try:
        return model.ByteSize() < PROTOBUF_LIMIT
    except EncodeError:  # the rest of the model pushed it over
        return False


def _load(source: str | PathLike[str] | bytes | onnx.ModelProto) -> onnx.ModelProto:
    """Parse and check the model, with its external data when read from a path; any
    failure is one OnnxImportError line."""
    if isinstance(source, onnx.ModelProto):
        model, what = source, "the model"
    else:
        what = "the data" if isinstance(source, bytes) else f"'{source}'"
        try:
            if isinstance(source, bytes):
                model = onnx.load_model_from_string(source)
            else:
                model = onnx.load(Path(source), load_external_data=False)
        except OSError as err:
            raise OnnxImportError(f"cannot read {what}: {err.strerror or err}") from None
        except (DecodeError, ValueError, RuntimeError):
            raise OnnxImportError(
                f"{what} is not an ONNX model (it does not parse as one; truncated?)"
            ) from None
    if model.ir_version == 0 or not model.HasField("graph"):
        raise OnnxImportError(f"{what} is not an ONNX model (no IR version or no graph)")
    external = _external_tensors(model)
    if external and isinstance(source, bytes | onnx.ModelProto):
        raise OnnxImportError(
            f"{what} keeps tensors in external data ('{external[0].name}' ...); import the "
            "model from its path so that they can be found beside it"
        )
    try:
        # By path, the checker also checks that the external data files exist; a model
        # over 2 GiB already in memory cannot be serialized for the check, so is trusted.
        if external:
            onnx.checker.check_model(str(source))
        elif fits_in_protobuf(model):
            onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise OnnxImportError(f"{what} is not a valid ONNX model: {first}") from None
    if external:
        _load_external_data(model, external, Path(source).parent, what)
    return model


def _external_tensors(model: onnx.ModelProto) -> list[TensorProto]:
    """The tensors of the main graph (initializers, Constant values) stored outside it."""
    tensors = [*model.graph.initializer]
    for node in model.graph.node:
        tensors += [attr.t for attr in node.attribute if attr.type == onnx.AttributeProto.TENSOR]
    return [tensor for tensor in tensors if external_data_helper.uses_external_data(tensor)]


def _load_external_data(
    model: onnx.ModelProto, external: Sequence[TensorProto], directory: Path, what: str
) -> None:
    """Read the external tensors of `model` (a file at `directory`) into it, checking
    each holds the bytes its shape and type need (a truncated data file reads short)."""
    try:
        external_data_helper.load_external_data_for_model(model, str(directory))
    except OSError as err:
        raise OnnxImportError(
            f"cannot read the external data of {what}: {err.strerror or err}"
        ) from None
    except ValueError as err:  # the data file is shorter than a tensor's offset + length
        raise OnnxImportError(
            f"the external data of {what} is truncated or corrupt: {str(err).splitlines()[0]}"
        ) from None
    for tensor in external:
        itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
        expected = math.prod(tensor.dims) * itemsize
        if len(tensor.raw_data) != expected:
            raise OnnxImportError(
                f"the external data of {what} is truncated or corrupt: tensor '{tensor.name}' "
                f"needs {expected} bytes, read {len(tensor.raw_data)}"
            )


def _metadata(model: onnx.ModelProto, key: str) -> object:
    """The exporter's JSON record under `key`, or None when there is none or it is not
    JSON (a record only ever picks among equal forms, so a bad one is ignored)."""
    text = next((entry.value for entry in model.metadata_props if entry.key == key), None)
    try:
        return json.loads(text) if text is not None else None
    except json.JSONDecodeError:
        return None


def _default_opset(model: onnx.ModelProto) -> int:
    versions = {entry.domain or "ai.onnx": entry.version for entry in model.opset_import}
    opset = versions.get("ai.onnx")
    if opset is None:
        raise OnnxImportError("the model imports no default-domain ('ai.onnx') opset")
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise OnnxImportError(
            f"unsupported ONNX opset {opset} (supported: {MIN_OPSET}-{MAX_OPSET}); "
            "convert the model with onnx.version_converter"
        )
    return opset


# ---------------------------------------------------------------------- known values


class Origin(Enum):
    """Where an import-time value comes from, which decides how it is materialized."""

    INITIALIZER = "initializer"
    """A weight: becomes a `{graph.param}` argument named after the initializer."""
    LITERAL = "literal"
    """A `Constant`-like node: becomes a constant op where the node stands."""
    DERIVED = "derived"
    """Computed by the importer (shape arithmetic, a reciprocal): made where first used."""


@dataclass(frozen=True, eq=False)
class Known:
    """A value fixed at import time."""

    name: str
    """The ONNX value name (or a name derived from one), unique per value."""
    array: np.ndarray
    origin: Origin
    form: str | None = None
    """The TASO constant op (`ones`, `zeros`, `c_pool`, `i_conv`, `i_matmul`) that
    makes this value, when it is one."""


Value = SSAValue | Known


def _is_float(array: np.ndarray) -> bool:
    """Whether `array` holds floats (bfloat16 included, which NumPy does not know)."""
    kind = _DTYPES_BY_NUMPY.get(array.dtype)
    return kind.is_float if kind else np.issubdtype(array.dtype, np.floating)


def _is_integral(array: np.ndarray) -> bool:
    return array.dtype == np.bool_ or np.issubdtype(array.dtype, np.integer)


def _fill_forms(array: np.ndarray) -> list[str]:
    """The constant ops a `ConstantOfShape` fill could be, preferred first: TASO's
    C_pool (so that a 1x1 C_pool, all ones, stays one), ones, zeros."""
    if not array.size:
        return []
    value, shape = array.flat[0], array.shape
    forms = []
    pooling = len(shape) == 4 and shape[1] == 1 and _is_float(array)
    # Compared in the array's own type: 1/3 rounds differently in bf16 and f32.
    if pooling and value == np.asarray(1 / (shape[2] * shape[3])).astype(array.dtype):
        forms.append("c_pool")
    forms += ["ones"] if value == 1 else ["zeros"] if value == 0 else []
    return forms


def _literal_forms(array: np.ndarray) -> list[str]:
    """`["i_conv"]` when `array` is TASO's identity convolution kernel, else none."""
    if array.ndim != 4 or not _is_float(array):
        return []
    out_channels, in_channels, kh, kw = array.shape
    if out_channels != in_channels or kh % 2 == 0 or kw % 2 == 0:
        return []
    expected = np.zeros(array.shape, array.dtype)
    expected[:, :, kh // 2, kw // 2] = np.eye(out_channels, dtype=array.dtype)
    return ["i_conv"] if np.array_equal(array, expected) else []


def _pick_form(forms: Sequence[str], recorded: str | None) -> str | None:
    """The recorded form when it is one of `forms`, `None` when the record says it
    was a plain `constant`, else the preferred form (or None when there is none)."""
    if recorded == "constant":
        return None
    return recorded if recorded in forms else next(iter(forms), None)


# ------------------------------------------------------------------------ the importer

Handler = Callable[["_Importer", onnx.NodeProto, dict[str, Any]], list[Value | None]]
"""Imports a node: its output values (None for one its readers take over)."""
HANDLERS: dict[str, Handler] = {}
"""How each ONNX op type is imported (default domain)."""

Folder = Callable[["_Importer", onnx.NodeProto, dict[str, Any], list[np.ndarray]], np.ndarray]
FOLDERS: dict[str, Folder] = {}
"""Ops evaluated at import time when all their inputs are known integers (shapes)."""

_ERROR_HINTS = {
    "Erf": "Erf is imported only as part of GELU, x * 0.5 * (1 + erf(x / sqrt(2)))",
}


def _handles(*op_types: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for op_type in op_types:
            HANDLERS[op_type] = fn
        return fn

    return register


def _folds(*op_types: str) -> Callable[[Folder], Folder]:
    def register(fn: Folder) -> Folder:
        for op_type in op_types:
            FOLDERS[op_type] = fn
        return fn

    return register


def _attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """Node attributes as Python values (strings decoded)."""
    attrs = {}
    for attr in node.attribute:
        value = onnx.helper.get_attribute_value(attr)
        attrs[attr.name] = value.decode() if isinstance(value, bytes) else value
    return attrs


class _Importer:
    """Walks the ONNX graph once, in its (topological) node order, building `@main`."""

    def __init__(
        self,
        graph: onnx.GraphProto,
        opset: int,
        input_shapes: dict[str, Sequence[int]],
        argument_order: Sequence[str] | None,
        node_forms: Mapping[str, str],
    ) -> None:
        self.graph = graph
        self.opset = opset
        self.input_shapes = input_shapes
        self.argument_order = argument_order
        self.node_forms = node_forms
        self.readers = Counter(name for node in graph.node for name in node.input)
        """How many node inputs read each value."""
        self.block = Block()
        self.is_param: list[bool] = []
        self.param_values: dict[str, np.ndarray] = {}
        self.env: dict[str, Value] = {}
        self.made: dict[str, SSAValue] = {}
        """Materialized known values by `Known.name`."""
        self.eager: list[SSAValue] = []
        """Constant ops made where their Constant-like node stands (dropped if unused)."""
        self.initializer_args: list[BlockArgument] = []
        self.max_pool_pads: dict[str, tuple[str, tuple[int, int, int, int]]] = {}
        """Outputs of -inf Pad nodes read only by MaxPools: the padded input's name and
        the (top, left, bottom, right) padding the pools take over."""
        self.arg_names: set[str] = set()
        self.where = "the graph"

    def form(self, node: onnx.NodeProto) -> str | None:
        """The IR form the exporter recorded for `node` (see NODE_FORMS_KEY)."""
        return self.node_forms.get(node.name) if node.name else None

    # ------------------------------------------------------------- errors
    def fail(self, detail: str) -> NoReturn:
        raise OnnxImportError(f"{self.where}: {detail}")

    # ---------------------------------------------------------- arguments
    def new_arg(self, onnx_name: str, sig: TensorSig, param: bool) -> BlockArgument:
        arg = self.block.insert_arg(G.tensor_type(sig), len(self.block.args))
        arg.name_hint = ir_name(onnx_name, self.arg_names)
        self.is_param.append(param)
        return arg

    def param_arg(self, known: Known) -> BlockArgument:
        arg = self.new_arg(known.name, TensorSig(known.array.shape, self.dtype(known)), True)
        assert arg.name_hint is not None
        self.param_values[arg.name_hint] = np.array(known.array, order="C")
        return arg

    def input_sig(self, info: onnx.ValueInfoProto) -> TensorSig:
        """The static type of a graph input, from its declaration or `input_shapes`."""
        name = info.name
        if not info.type.HasField("tensor_type"):
            raise OnnxImportError(f"input '{name}' is not a tensor")
        tensor = info.type.tensor_type
        if tensor.elem_type not in DTYPES_BY_ONNX:
            element = TensorProto.DataType.Name(tensor.elem_type)
            raise OnnxImportError(f"input '{name}' has unsupported element type {element}")
        # The checker makes inputs declare their rank; a dimension may be symbolic.
        declared = [
            d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
            for d in tensor.shape.dim
        ]
        given = self.input_shapes.get(name)
        if given is not None:
            shape = tuple(int(d) for d in given)
            fits = len(declared) == len(shape) and all(
                isinstance(d, str) or d == s for d, s in zip(declared, shape, strict=True)
            )
            if not fits or min(shape, default=1) < 1:
                raise OnnxImportError(
                    f"input_shapes gives '{name}' the shape {_dims(shape)}, "
                    f"which does not fit its declared shape {_dims(declared)}"
                )
            return TensorSig(shape, DTYPES_BY_ONNX[tensor.elem_type])
        if any(isinstance(d, str) for d in declared):
            raise OnnxImportError(
                f"input '{name}' has a dynamic shape {_dims(declared)}: give it a static one "
                f"(input_shapes, or tasoc's --input-shape {name}=...)"
            )
        return TensorSig(tuple(int(d) for d in declared), DTYPES_BY_ONNX[tensor.elem_type])

    # ------------------------------------------------------------- values
    def dtype(self, known: Known) -> DType:
        kind = _DTYPES_BY_NUMPY.get(known.array.dtype)
        if kind is None:
            self.fail(
                f"value '{known.name}' has element type {known.array.dtype}, "
                "which the graph dialect does not have"
            )
        return kind

    def value(self, name: str) -> Value:
        if name not in self.env:
            self.fail(f"input '{name}' is not defined before this node")
        return self.env[name]

    def known(self, name: str, what: str) -> np.ndarray:
        """The import-time value of input `name`, which configures the op (`what`)."""
        value = self.value(name)
        if not isinstance(value, Known):
            self.fail(f"{what} ('{name}') must be a constant, not computed at run time")
        return value.array

    def data(self, name: str) -> SSAValue:
        """Input `name` as an SSA value, materializing a known value once."""
        value = self.value(name)
        if isinstance(value, SSAValue):
            return value
        return self.materialize(value)

    def materialize(self, known: Known) -> SSAValue:
        if known.name not in self.made:
            if known.origin is Origin.INITIALIZER:
                self.made[known.name] = self.param_arg(known)
            else:
                op_value = self.constant_op(known)
                self.made[known.name] = op_value if op_value else self.param_arg(known)
        return self.made[known.name]

    def constant_op(self, known: Known) -> SSAValue | None:
        """A constant op making `known`, or None when it is too large to be a literal."""
        dtype = self.dtype(known)
        array = known.array
        if known.form in ("ones", "zeros"):
            cls = G.OnesOp if known.form == "ones" else G.ZerosOp
            return self.op(cls, shape=array.shape, dtype=dtype)
        if known.form == "c_pool":
            return self.op(G.CPoolOp, channels=array.shape[0], kernel=array.shape[2:], dtype=dtype)
        if known.form == "i_conv":
            return self.op(G.IConvOp, channels=array.shape[0], kernel=array.shape[2:], dtype=dtype)
        if known.form == "i_matmul":
            return self.op(G.IMatmulOp, size=array.shape[0], dtype=dtype)
        if array.size > CONSTANT_ELEMENTS_LIMIT:
            return None
        cast = float if dtype.is_float else int
        values = tuple(
            cast(v) for v in array.astype(np.float64 if dtype.is_float else np.int64).flat
        )
        return self.op(G.ConstantOp, value=ConstData(array.shape, dtype, values))

    def literal(self, value: float, like: SSAValue) -> SSAValue:
        """A rank-0 constant of `like`'s element type (a Gemm alpha, the -1 of Sub)."""
        dtype = numpy_dtype(G.sig_of(like.type).dtype)
        return self.materialize(
            Known(f"literal {value!r} {dtype}", np.asarray(value, dtype), Origin.DERIVED)
        )

    def scalar(self, name: str, partner_rank: int) -> SSAValue | None:
        """Input `name` as the rank-0 operand of `graph.scale`, or None: a rank-0 value,
        or a known one-element literal that multiplies a rank-`partner_rank` tensor
        without changing its shape. A one-element weight of rank > 0 stays a weight
        (and the product a broadcast `mul`)."""
        value = self.value(name)
        if isinstance(value, SSAValue):
            return value if G.sig_of(value.type).rank == 0 else None
        if value.array.size != 1:
            return None
        if value.array.ndim == 0:
            return self.materialize(value)
        if value.origin is Origin.INITIALIZER or value.array.ndim > partner_rank:
            return None
        return self.materialize(
            Known(f"{value.name}.scalar", value.array.reshape(()), Origin.DERIVED)
        )

    def shape(self, name_or_value: str | SSAValue) -> tuple[int, ...]:
        value = self.value(name_or_value) if isinstance(name_or_value, str) else name_or_value
        if isinstance(value, Known):
            return value.array.shape
        return G.sig_of(value.type).shape

    # ---------------------------------------------------------------- ops
    def ops(self, cls: type[G.GraphOp], *operands: SSAValue, **attrs: Any) -> list[SSAValue]:
        try:
            op = cls.create_typed(operands, **attrs)
        except ShapeError as err:
            self.fail(str(err))
        self.block.add_op(op)
        return list(op.results)

    def op(self, cls: type[G.GraphOp], *operands: SSAValue, **attrs: Any) -> SSAValue:
        return self.ops(cls, *operands, **attrs)[0]

    def reshape(self, x: SSAValue, shape: Sequence[int]) -> SSAValue:
        return self.op(G.ReshapeOp, x, shape=tuple(int(d) for d in shape))

    def reshaped(self, name: str, shape: Sequence[int]) -> Value:
        """Input `name` reshaped: folded when it is a known integer tensor."""
        value = self.value(name)
        if isinstance(value, Known) and _is_integral(value.array):
            return Known(f"{value.name}.reshaped", value.array.reshape(shape), Origin.DERIVED)
        return self.reshape(self.data(name), shape)

    def take(self, x: SSAValue, axis: int, start: int, stop: int) -> SSAValue:
        """x[..., start:stop, ...] along `axis` (as a split: the dialect has no slice)."""
        size = G.sig_of(x.type).shape[axis]
        if start == 0 and stop == size:
            return x
        # The piece before and after are left out when empty; the taken one never is.
        sizes = (start, stop - start, size - stop)
        kept = [i for i, n in enumerate(sizes) if n or i == 1]
        pieces = self.ops(G.SplitOp, x, axis=axis, sizes=tuple(sizes[i] for i in kept))
        return pieces[kept.index(1)]

    # -------------------------------------------------------------- driver
    def run(self) -> tuple[ModuleOp, dict[str, np.ndarray]]:
        graph = self.graph
        if graph.sparse_initializer:
            raise OnnxImportError("sparse initializers are not supported")
        initializers = {}
        for tensor in graph.initializer:
            try:
                array = numpy_helper.to_array(tensor)
            except (OSError, ValueError) as err:
                raise OnnxImportError(f"cannot read initializer '{tensor.name}': {err}") from None
            initializers[tensor.name] = Known(tensor.name, array, Origin.INITIALIZER)
        self.env.update(initializers)
        self.declare_arguments(initializers)
        absorbed, gelus = _find_gelus(graph, self.env)
        for index, node in enumerate(graph.node):
            label = node.name or f"#{index}"
            self.where = f"{node.op_type} node '{label}' (opset {self.opset})"
            if index in gelus:
                self.env[node.output[0]] = self.op(G.GeluOp, self.data(gelus[index]))
            elif index not in absorbed:
                self.import_node(node)
        self.where = "the graph"
        outputs = [self.output(info) for info in graph.output]
        self.drop_unused(set(outputs))
        module = ModuleOp([make_function(ENTRY, self.block, self.is_param, outputs)])
        try:
            module.verify()
        except VerifyException as err:
            raise OnnxImportError(f"the imported program does not verify: {err}") from None
        return module, self.param_values

    def declare_arguments(self, initializers: Mapping[str, Known]) -> None:
        """Arguments for the graph inputs, then a weight for every initializer (those
        no op reads as data are dropped at the end), in the order the exporter
        recorded when it is there, so that the arguments come back in their order."""
        activations = {i.name: i for i in self.graph.input if i.name not in self.env}
        unknown = sorted(set(self.input_shapes) - activations.keys())
        if unknown:
            raise OnnxImportError(
                f"input_shapes names {', '.join(map(repr, unknown))}, which the model does "
                f"not take (its inputs: {', '.join(activations) or 'none'})"
            )
        weights = {name: k for name, k in initializers.items() if k.array.dtype in _DTYPES_BY_NUMPY}
        names = [*activations, *weights]
        order = self.argument_order
        if order is not None and len(set(order)) == len(order) and set(order) <= set(names):
            names = [*order, *(name for name in names if name not in set(order))]
        for name in names:
            if name in activations:
                self.env[name] = self.new_arg(name, self.input_sig(activations[name]), False)
            else:
                arg = self.materialize(weights[name])
                assert isinstance(arg, BlockArgument)
                self.initializer_args.append(arg)

    def import_node(self, node: onnx.NodeProto) -> None:
        if node.domain not in ("", "ai.onnx"):
            self.unsupported(node, f" from domain '{node.domain}'")
        attrs = _attributes(node)
        folder = FOLDERS.get(node.op_type)
        values = [self.value(name) for name in node.input if name] if folder else []
        if (
            folder
            and values
            and all(isinstance(v, Known) and _is_integral(v.array) for v in values)
        ):
            arrays = [v.array for v in values if isinstance(v, Known)]
            folded = np.asarray(folder(self, node, attrs, arrays))
            results: list[Value | None] = [Known(node.output[0], folded, Origin.DERIVED)]
        elif node.op_type in HANDLERS:
            results = HANDLERS[node.op_type](self, node, attrs)
        else:
            self.unsupported(node, "")
        for index, name in enumerate(node.output):
            if index >= len(results):
                if name and self.is_used(name):
                    self.fail(f"output #{index} ('{name}') is not supported")
                continue
            if results[index] is None:  # taken over by the nodes that read it
                continue
            self.env[name] = known = results[index]
            if (
                isinstance(known, Known)
                and known.origin is Origin.LITERAL
                and known.name == name
                and known.array.dtype in _DTYPES_BY_NUMPY
            ):
                # Made where the node stands, so a program exported from the IR comes
                # back with its constants in place; dropped later if unused.
                made = self.constant_op(known)
                if made is not None:
                    self.made[name] = made
                    self.eager.append(made)

    def unsupported(self, node: onnx.NodeProto, domain: str) -> NoReturn:
        hint = _ERROR_HINTS.get(node.op_type)
        self.fail(f"unsupported ONNX op '{node.op_type}'{domain}" + (f"; {hint}" if hint else ""))

    def is_used(self, name: str) -> bool:
        return self.readers[name] > 0 or self.is_output(name)

    def is_output(self, name: str) -> bool:
        return any(name == out.name for out in self.graph.output)

    def output(self, info: onnx.ValueInfoProto) -> SSAValue:
        value = self.data(info.name)
        sig = G.sig_of(value.type)
        tensor = info.type.tensor_type
        declared_dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        shape_fits = len(declared_dims) == sig.rank and all(
            d is None or d == s for d, s in zip(declared_dims, sig.shape, strict=True)
        )
        dtype_fits = tensor.elem_type == 0 or DTYPES_BY_ONNX.get(tensor.elem_type) == sig.dtype
        if not (shape_fits and dtype_fits):
            raise OnnxImportError(
                f"output '{info.name}' is declared {_dims(declared_dims)} of type "
                f"{TensorProto.DataType.Name(tensor.elem_type)}, but computes {sig}"
            )
        return value

    def drop_unused(self, outputs: set[SSAValue]) -> None:
        """Remove the constant ops and weight arguments of known values that only
        configured ops (a reshape target, axes) or that nothing reads at all."""
        for value in self.eager:
            if not value.uses and value not in outputs and isinstance(value.owner, G.GraphOp):
                self.block.erase_op(value.owner)
        for arg in reversed(self.initializer_args):
            if not arg.uses and arg not in outputs:
                del self.is_param[arg.index]
                assert arg.name_hint is not None
                del self.param_values[arg.name_hint]
                self.block.erase_arg(arg)


def _dims(dims: Sequence[int | str | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


# ------------------------------------------------------------------------------ GELU


def _find_gelus(
    graph: onnx.GraphProto, env: Mapping[str, Value]
) -> tuple[set[int], dict[int, str]]:
    """Erf-form GELUs, x * 0.5 * (1 + erf(x / sqrt 2)), as PyTorch exports them.

    Returns the indices of the nodes the GELUs absorb and, for the last node of
    each, the name of x. A chain matches only when its intermediate values have no
    other use, so nothing the rest of the graph reads disappears.
    """
    nodes = list(graph.node)
    producer = {name: i for i, node in enumerate(nodes) for name in node.output}
    consumers: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for name in set(node.input):
            consumers.setdefault(name, []).append(i)
    outputs = {info.name for info in graph.output}
    literals = {
        node.output[0]: numpy_helper.to_array(node.attribute[0].t)
        for node in nodes
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value"
    }

    def scalar_is(name: str, target: float) -> bool:
        value = env.get(name)
        array = value.array if isinstance(value, Known) else literals.get(name)
        return (
            array is not None
            and array.size == 1
            and _is_float(array)
            and abs(float(array.flat[0]) - target)
            <= _GELU_MATCH_ULPS * float(ml_dtypes.finfo(array.dtype).eps) * target
        )

    def only_user(name: str) -> int | None:
        users = consumers.get(name, [])
        return users[0] if len(users) == 1 and name not in outputs else None

    def partner(index: int | None, op_type: str, operand: str) -> str | None:
        """The other operand of binary node `index` of `op_type` that reads `operand`."""
        if index is None or nodes[index].op_type != op_type or len(nodes[index].input) != 2:
            return None
        a, b = nodes[index].input
        return b if a == operand else a if b == operand else None

    def scaled_input(index: int) -> str | None:
        """x when node `index` computes x / sqrt 2 (or x * (1 / sqrt 2))."""
        node = nodes[index]
        if node.op_type == "Div" and scalar_is(node.input[1], GELU_SQRT2):
            return node.input[0]
        if node.op_type == "Mul":
            for a, b in (node.input, reversed(node.input)):
                if scalar_is(b, 1 / GELU_SQRT2):
                    return a
        return None

    absorbed: set[int] = set()
    last_nodes: dict[int, str] = {}
    for erf, node in enumerate(nodes):
        if node.op_type != "Erf" or only_user(node.input[0]) != erf:
            continue
        scaled = producer.get(node.input[0])
        if scaled is None:
            continue
        x = scaled_input(scaled)
        plus_one = only_user(node.output[0])
        one = partner(plus_one, "Add", node.output[0])
        if x is None or plus_one is None or one is None or not scalar_is(one, 1.0):
            continue
        times = only_user(nodes[plus_one].output[0])
        other = partner(times, "Mul", nodes[plus_one].output[0])
        if times is None or other is None:
            continue
        if other == x:  # (x * (1 + erf)) * 0.5
            half = only_user(nodes[times].output[0])
            half_of = nodes[times].output[0]
        else:  # (x * 0.5) * (1 + erf)
            half = producer.get(other) if only_user(other) == times else None
            half_of = x
        constant = partner(half, "Mul", half_of)
        if half is None or constant is None or not scalar_is(constant, 0.5):
            continue
        chain = (scaled, erf, plus_one, times, half)
        absorbed.update(chain)
        last_nodes[max(chain)] = x
    return absorbed, last_nodes


# -------------------------------------------------------------------- operand helpers


def _input(node: onnx.NodeProto, index: int) -> str | None:
    """The name of optional input `index`, or None when it is absent or empty."""
    return node.input[index] if index < len(node.input) and node.input[index] else None


def _ints(
    imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any], attr: str, index: int
) -> list[int] | None:
    """An integer list given as attribute `attr` (older opsets) or as known input
    `index` (newer ones), or None when the node gives neither."""
    if attr in attrs:
        return [int(v) for v in attrs[attr]]
    name = _input(node, index)
    return None if name is None else [int(v) for v in imp.known(name, attr).reshape(-1)]


def _axis(imp: _Importer, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        imp.fail(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


# ------------------------------------------------------------------- shape folding


@_folds("Gather")
def _fold_gather(
    imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    return np.take(arrays[0], arrays[1], axis=attrs.get("axis", 0))


@_folds("Concat")
def _fold_concat(
    imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    return np.concatenate(arrays, axis=attrs["axis"])


@_folds("Cast")
def _fold_cast(
    imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    return arrays[0].astype(onnx.helper.tensor_dtype_to_np_dtype(attrs["to"]))


@_folds("Slice")
def _fold_slice(
    imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    data = arrays[0]
    index = [slice(None)] * data.ndim
    for axis, start, end, step in _slice_specs(imp, node, data.ndim):
        index[axis] = slice(start, end, step)
    return data[tuple(index)]


@_folds("Add", "Sub", "Mul", "Div", "Equal")
def _fold_arithmetic(
    imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    a, b = arrays
    if node.op_type == "Div":  # integer division truncates toward zero, as in C
        return (np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))).astype(a.dtype)
    operation = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Equal": np.equal}
    return operation[node.op_type](a, b)


@_folds("Where")
def _fold_where(
    imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    return np.where(*arrays)


@_folds("Range")
def _fold_range(
    imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    start, limit, delta = (a.reshape(()) for a in arrays)
    return np.arange(start, limit, delta, dtype=arrays[0].dtype)


@_folds("Expand")
def _fold_expand(
    imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    data, shape = arrays
    return np.broadcast_to(data, np.broadcast_shapes(data.shape, tuple(shape))).copy()


@_folds("Neg")
def _fold_neg(
    imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    return np.negative(arrays[0])


def _slice_specs(
    imp: _Importer, node: onnx.NodeProto, rank: int
) -> list[tuple[int, int, int, int]]:
    """(axis, start, end, step) per sliced axis, from the known starts/ends/axes/steps."""
    starts = imp.known(node.input[1], "starts").reshape(-1)
    ends = imp.known(node.input[2], "ends").reshape(-1)
    axes_name, steps_name = _input(node, 3), _input(node, 4)
    axes = imp.known(axes_name, "axes").reshape(-1) if axes_name else np.arange(len(starts))
    steps = imp.known(steps_name, "steps").reshape(-1) if steps_name else np.ones(len(starts))
    # NumPy clamps out-of-range bounds (ONNX uses INT64_MAX for "to the end") the same way.
    return [
        (_axis(imp, int(a), rank), int(s), int(e), int(t))
        for a, s, e, t in zip(axes, starts, ends, steps, strict=True)
    ]


# ---------------------------------------------------------------------- constants


@_handles("Constant")
def _constant(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    if "value" in attrs:
        array = numpy_helper.to_array(attrs["value"])
    elif "value_float" in attrs or "value_floats" in attrs:
        array = np.asarray(attrs.get("value_float", attrs.get("value_floats")), np.float32)
    elif "value_int" in attrs or "value_ints" in attrs:
        array = np.asarray(attrs.get("value_int", attrs.get("value_ints")), np.int64)
    else:
        imp.fail(f"only dense tensor values are supported, got {', '.join(attrs)}")
    form = _pick_form(_literal_forms(array), imp.form(node))
    return [Known(node.output[0], array, Origin.LITERAL, form)]


@_handles("ConstantOfShape")
def _constant_of_shape(
    imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]
) -> list[Value | None]:
    shape = imp.known(node.input[0], "shape").reshape(-1)
    fill = numpy_helper.to_array(attrs["value"]) if "value" in attrs else np.zeros(1, np.float32)
    array = np.full(tuple(int(d) for d in shape), fill.reshape(-1)[0], fill.dtype)
    form = _pick_form(_fill_forms(array), imp.form(node))
    return [Known(node.output[0], array, Origin.LITERAL, form)]


@_handles("EyeLike")
def _eye_like(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    source = imp.value(node.input[0])
    shape = imp.shape(node.input[0])
    if len(shape) != 2:
        imp.fail(f"input must be 2-D, got shape {_dims(shape)}")
    dtype = (
        onnx.helper.tensor_dtype_to_np_dtype(attrs["dtype"])
        if "dtype" in attrs
        else source.array.dtype
        if isinstance(source, Known)
        else numpy_dtype(G.sig_of(source.type).dtype)
    )
    k = attrs.get("k", 0)
    array = np.eye(shape[0], shape[1], k, dtype=dtype)
    form = "i_matmul" if shape[0] == shape[1] and k == 0 else None
    return [Known(node.output[0], array, Origin.LITERAL, form)]


@_handles("Shape")
def _shape(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    shape = imp.shape(node.input[0])
    start, end = attrs.get("start", 0), attrs.get("end", len(shape))
    array = np.asarray(shape[start:end], np.int64)
    return [Known(node.output[0], array, Origin.DERIVED)]


@_handles("Identity")
def _identity(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    return [imp.value(node.input[0])]


@_handles("Dropout")
def _dropout(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    training = _input(node, 2)
    if training is not None and bool(imp.known(training, "training_mode")):
        imp.fail("training mode is not supported (the importer builds inference graphs)")
    return [imp.value(node.input[0])]


@_handles("Cast")
def _cast(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    source = G.sig_of(x.type).dtype
    target = DTYPES_BY_ONNX.get(attrs["to"])
    if target != source:
        name = TensorProto.DataType.Name(attrs["to"])
        imp.fail(f"a cast from {source} to {name} is not expressible (the dialect has no cast)")
    return [x]


# ------------------------------------------------------------------- element-wise

_UNARY = {"Relu": G.ReluOp, "Sigmoid": G.SigmoidOp, "Tanh": G.TanhOp}


@_handles(*_UNARY)
def _unary(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    conv = x.owner
    if (
        node.op_type == "Relu"
        and imp.form(node) == "fused"
        and isinstance(conv, G.Conv2dOp)
        and conv.py_attrs()["activation"] == "none"
        and imp.readers[node.input[0]] == 1
        and not imp.is_output(node.input[0])
    ):
        conv.properties["activation"] = G.to_attr("relu")
        return [x]
    return [imp.op(_UNARY[node.op_type], x)]


@_handles("Gelu")
def _gelu(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    if attrs.get("approximate", "none") == "none":
        return [imp.op(G.GeluOp, x)]
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), spelled in graph ops.
    cube = imp.op(G.MulOp, imp.op(G.MulOp, x, x), x)
    inner = imp.op(G.AddOp, x, imp.op(G.ScaleOp, cube, imp.literal(0.044715, x)))
    tanh = imp.op(G.TanhOp, imp.op(G.ScaleOp, inner, imp.literal(math.sqrt(2 / math.pi), x)))
    half_x = imp.op(G.ScaleOp, x, imp.literal(0.5, x))
    return [imp.op(G.MulOp, half_x, imp.op(G.AddOp, tanh, imp.literal(1.0, x)))]


@_handles("Add")
def _add(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    return [imp.op(G.AddOp, imp.data(node.input[0]), imp.data(node.input[1]))]


@_handles("Mul")
def _mul(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    if imp.form(node) == "mul":
        return [imp.op(G.MulOp, imp.data(node.input[0]), imp.data(node.input[1]))]
    return [_multiply(imp, node.input[0], node.input[1])]


def _multiply(imp: _Importer, a: str, b: str) -> SSAValue:
    """a * b: `graph.scale` when one side is a known scalar, else a broadcast `mul`."""
    for x, s in ((a, b), (b, a)):
        scalar = imp.scalar(s, len(imp.shape(x)))
        if scalar is not None:
            return imp.op(G.ScaleOp, imp.data(x), scalar)
    return imp.op(G.MulOp, imp.data(a), imp.data(b))


@_handles("Sub")
def _sub(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    a, b = node.input[0], node.input[1]
    subtrahend = imp.value(b)
    if isinstance(subtrahend, Known) and subtrahend.origin is not Origin.INITIALIZER:
        negated = Known(f"{subtrahend.name}.negated", -subtrahend.array, Origin.DERIVED)
        return [imp.op(G.AddOp, imp.data(a), imp.materialize(negated))]
    y = imp.data(b)
    return [imp.op(G.AddOp, imp.data(a), imp.op(G.ScaleOp, y, imp.literal(-1.0, y)))]


@_handles("Div")
def _div(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    divisor = imp.value(node.input[1])
    if not isinstance(divisor, Known):
        imp.fail(
            f"division by the computed tensor '{node.input[1]}' is not expressible "
            "(the dialect has no div; only division by a constant imports)"
        )
    if not _is_float(divisor.array):
        imp.fail("integer division of run-time values is not expressible")
    # The reciprocal of a weight is a weight (named `<weight>.reciprocal`), of a literal a literal.
    origin = Origin.INITIALIZER if divisor.origin is Origin.INITIALIZER else Origin.DERIVED
    reciprocal = Known(f"{divisor.name}.reciprocal", np.asarray(1 / divisor.array), origin)
    imp.env[reciprocal.name] = reciprocal
    return [_multiply(imp, node.input[0], reciprocal.name)]


# ----------------------------------------------------------------- linear algebra


@_handles("MatMul")
def _matmul(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    a, b = imp.data(node.input[0]), imp.data(node.input[1])
    a_shape, b_shape = imp.shape(a), imp.shape(b)
    # NumPy semantics: a 1-D operand is a row (left) or column (right) vector that
    # disappears from the result again.
    if len(a_shape) == 1:
        a = imp.reshape(a, (1, *a_shape))
    if len(b_shape) == 1:
        b = imp.reshape(b, (*b_shape, 1))
    y = imp.op(G.MatmulOp, a, b)
    if len(a_shape) == 1 or len(b_shape) == 1:
        shape = list(imp.shape(y))
        if len(b_shape) == 1:
            shape.pop(-1)
        if len(a_shape) == 1:
            shape.pop(-1 if len(b_shape) == 1 else -2)
        y = imp.reshape(y, shape)
    return [y]


@_handles("Gemm")
def _gemm(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    a, b = imp.data(node.input[0]), imp.data(node.input[1])
    if attrs.get("transA", 0):
        a = imp.op(G.TransposeOp, a, perm=(1, 0))
    if attrs.get("transB", 0):
        b = imp.op(G.TransposeOp, b, perm=(1, 0))
    y = imp.op(G.MatmulOp, a, b)
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    if alpha != 1.0:
        y = imp.op(G.ScaleOp, y, imp.literal(alpha, y))
    bias = _input(node, 2)
    if bias is not None and beta != 0.0:
        c = imp.data(bias)
        if beta != 1.0:
            c = imp.op(G.ScaleOp, c, imp.literal(beta, c))
        y = imp.op(G.AddOp, y, c)
    return [y]


def _window(
    imp: _Importer, attrs: dict[str, Any], in_hw: tuple[int, int], kernel: tuple[int, int]
) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """Strides and explicit (top, left, bottom, right) pads of a Conv or pool node."""
    dilations = tuple(attrs.get("dilations", (1, 1)))
    if any(d != 1 for d in dilations):
        imp.fail(f"dilations {list(dilations)} are not supported (only 1)")
    strides = tuple(attrs.get("strides", (1, 1)))
    if len(strides) != 2:
        imp.fail(f"strides {list(strides)} must be two integers")
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        top, left, bottom, right = window_pads("same", in_hw, kernel, (strides[0], strides[1]))
        pads = (
            (top, left, bottom, right) if auto_pad == "SAME_UPPER" else (bottom, right, top, left)
        )
    elif auto_pad == "VALID":
        pads = (0, 0, 0, 0)
    else:
        given = tuple(int(p) for p in attrs.get("pads", (0, 0, 0, 0)))
        if len(given) != 4 or min(given) < 0:
            imp.fail(f"pads {list(given)} must be four non-negative integers")
        pads = (given[0], given[1], given[2], given[3])
    return (strides[0], strides[1]), pads


def _spatial_input(imp: _Importer, name: str) -> tuple[SSAValue, tuple[int, int]]:
    x = imp.data(name)
    shape = imp.shape(x)
    if len(shape) != 4:
        imp.fail(f"only 2-D windows over NCHW inputs are supported, got a rank-{len(shape)} input")
    return x, (shape[2], shape[3])


@_handles("Conv")
def _conv(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x, in_hw = _spatial_input(imp, node.input[0])
    weight = imp.value(node.input[1])
    w_shape = imp.shape(node.input[1])
    if len(w_shape) != 4:
        imp.fail(f"weight must be 4-D (OIHW), got shape {_dims(w_shape)}")
    kernel = (w_shape[2], w_shape[3])
    strides, pads = _window(imp, attrs, in_hw, kernel)
    # The exporter writes an average pool whose padding onnxruntime's pools reject as
    # TASO's equal depthwise convolution with C_pool, and records it ("avg_pool same").
    pool_form, _, padding_form = (imp.form(node) or "").rpartition(" ")
    padding = canonical_padding(pads, in_hw, kernel, strides, padding_form or None)
    groups = int(attrs.get("group", 1))
    bias = _input(node, 2)
    if (
        pool_form == "avg_pool"
        and isinstance(weight, Known)
        and weight.form == "c_pool"
        and groups == w_shape[0] == imp.shape(x)[1]
        and bias is None
    ):
        return [imp.op(G.Pool2dOp, x, kind="avg", kernel=kernel, strides=strides, padding=padding)]
    w = imp.data(node.input[1])
    y = imp.op(G.Conv2dOp, x, w, strides=strides, padding=padding, activation="none", groups=groups)
    if bias is not None:
        y = imp.op(G.AddOp, y, imp.reshape(imp.data(bias), (1, w_shape[0], 1, 1)))
    return [y]


def _pool_window(
    imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]
) -> tuple[SSAValue, tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int, int, int]]:
    """Input, input size, kernel, strides and explicit pads of MaxPool/AveragePool,
    counting a -inf Pad node in front of a MaxPool as the pool's own padding."""
    source, before = imp.max_pool_pads.get(node.input[0], (node.input[0], (0, 0, 0, 0)))
    x, in_hw = _spatial_input(imp, source)
    kernel_attr = tuple(attrs["kernel_shape"])
    if len(kernel_attr) != 2:
        imp.fail(f"kernel_shape {list(kernel_attr)} must be two integers")
    kernel = (int(kernel_attr[0]), int(kernel_attr[1]))
    padded_hw = (in_hw[0] + before[0] + before[2], in_hw[1] + before[1] + before[3])
    strides, own = _window(imp, attrs, padded_hw, kernel)
    if attrs.get("ceil_mode", 0):
        for size, k, s, low, high in zip(padded_hw, kernel, strides, own[:2], own[2:], strict=True):
            if (size + low + high - k) % s:
                imp.fail("ceil_mode=1 changes the output size here; only floor mode imports")
    top, left, bottom, right = (a + b for a, b in zip(before, own, strict=True))
    return x, in_hw, kernel, strides, (top, left, bottom, right)


@_handles("MaxPool")
def _max_pool(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x, in_hw, kernel, strides, pads = _pool_window(imp, node, attrs)
    padding = canonical_padding(pads, in_hw, kernel, strides, imp.form(node))
    return [imp.op(G.Pool2dOp, x, kind="max", kernel=kernel, strides=strides, padding=padding)]


@_handles("AveragePool")
def _average_pool(
    imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]
) -> list[Value | None]:
    x, in_hw, kernel, strides, pads = _pool_window(imp, node, attrs)
    padding = canonical_padding(pads, in_hw, kernel, strides, imp.form(node))
    y = imp.op(G.Pool2dOp, x, kind="avg", kernel=kernel, strides=strides, padding=padding)
    if attrs.get("count_include_pad", 0) or not any(pads):
        return [y]
    # graph.pool2d divides by kh*kw; ONNX divides by the window's unpadded elements.
    # That count is a product of a row and a column count, so two small constant
    # factors (kh / rows_in_window, kw / cols_in_window) correct it exactly.
    out_hw = imp.shape(y)[2:]
    for axis, (size, k, s, low) in enumerate(zip(in_hw, kernel, strides, pads[:2], strict=True)):
        starts = np.arange(out_hw[axis]) * s - low
        inside = np.minimum(starts + k, size) - np.maximum(starts, 0)
        if np.all(inside == k):
            continue
        factor = (k / inside).astype(numpy_dtype(G.sig_of(y.type).dtype))
        shape = (1, 1, -1, 1) if axis == 0 else (1, 1, 1, -1)
        correction = Known(f"{node.output[0]}.count{axis}", factor.reshape(shape), Origin.DERIVED)
        y = imp.op(G.MulOp, y, imp.materialize(correction))
    return [y]


def _global_pool(kind: str) -> Handler:
    def handler(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
        x = imp.data(node.input[0])
        shape = imp.shape(x)
        if len(shape) == 4:
            return [
                imp.op(G.Pool2dOp, x, kind=kind, kernel=shape[2:], strides=(1, 1), padding="valid")
            ]
        axes = tuple(range(2, len(shape)))
        reduction = "mean" if kind == "avg" else "max"
        return [imp.op(G.ReduceOp, x, kind=reduction, axes=axes, keepdims=True)]

    return handler


HANDLERS["GlobalAveragePool"] = _global_pool("avg")
HANDLERS["GlobalMaxPool"] = _global_pool("max")


@_handles("Pad")
def _pad(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    """A symmetric zero padding of the last two dims of a 4-D tensor is TASO's enlarge
    (which is how the exporter writes it); other paddings have no graph op."""
    x = imp.data(node.input[0])
    rank = len(imp.shape(x))
    pads = _ints(imp, node, attrs, "pads", 1) or []
    axes = _ints(imp, node, attrs, "axes", 3)
    if axes is not None:
        full = [0] * (2 * rank)
        for i, axis in enumerate(axes):
            full[_axis(imp, axis, rank)] = pads[i]
            full[rank + _axis(imp, axis, rank)] = pads[len(axes) + i]
        pads = full
    fill_name = _input(node, 2)
    fill = imp.known(fill_name, "constant_value").reshape(-1) if fill_name else np.zeros(1)
    spatial = (
        attrs.get("mode", "constant") == "constant"
        and rank == 4
        and pads[:2] == pads[4:6] == [0, 0]
        and min(pads) >= 0
    )
    if spatial and pads[2:4] == pads[6:8] and fill[0] == 0:
        _, _, h, w = imp.shape(x)
        return [imp.op(G.EnlargeOp, x, kernel=(h + 2 * pads[2], w + 2 * pads[3]))]
    readers = {n.op_type for n in imp.graph.node if node.output[0] in n.input}
    feeds_max_pools = readers == {"MaxPool"} and not imp.is_output(node.output[0])
    if spatial and fill[0] == -np.inf and feeds_max_pools:
        # -inf is what max pooling pads with: the MaxPools take the padding over.
        imp.max_pool_pads[node.output[0]] = (node.input[0], (pads[2], pads[3], pads[6], pads[7]))
        return [None]
    imp.fail(
        "only symmetric zero padding of the last two dims of a 4-D tensor (graph.enlarge) "
        f"or -inf padding before MaxPool imports; got mode {attrs.get('mode', 'constant')}, "
        f"pads {pads}, value {fill[0]}"
    )


# -------------------------------------------------------------------------- structure


@_handles("Concat")
def _concat(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    return [imp.op(G.ConcatOp, *[imp.data(n) for n in node.input if n], axis=attrs["axis"])]


@_handles("Split")
def _split(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    shape = imp.shape(x)
    axis = int(attrs.get("axis", 0))
    size = shape[_axis(imp, axis, len(shape))]
    sizes = _ints(imp, node, attrs, "split", 1)
    if sizes is None:
        count = int(attrs.get("num_outputs", len(node.output)))
        if "num_outputs" in attrs:  # opset 18: the last piece may be smaller
            chunk = -(-size // count)
            sizes = [chunk] * (count - 1) + [size - chunk * (count - 1)]
        elif size % count:
            imp.fail(f"dimension {axis} of size {size} does not split into {count} equal parts")
        else:
            sizes = [size // count] * count
    return list(imp.ops(G.SplitOp, x, axis=axis, sizes=tuple(sizes)))


def _reshape_target(
    imp: _Importer, in_shape: Sequence[int], spec: Sequence[int], allow_zero: bool
) -> tuple[int, ...]:
    """ONNX Reshape's target: 0 copies the input dimension (unless allowzero), one -1
    takes what is left."""
    dims = [
        in_shape[i] if d == 0 and not allow_zero and i < len(in_shape) else int(d)
        for i, d in enumerate(spec)
    ]
    total = math.prod(in_shape)
    if dims.count(-1) == 1:
        rest = math.prod(d for d in dims if d != -1)
        if rest and total % rest == 0:
            dims[dims.index(-1)] = total // rest
    if min(dims, default=0) < 0 or math.prod(dims) != total:
        imp.fail(f"cannot reshape {_dims(in_shape)} to {list(spec)}")
    return tuple(dims)


@_handles("Reshape")
def _reshape(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    spec = [int(d) for d in imp.known(node.input[1], "shape").reshape(-1)]
    target = _reshape_target(imp, imp.shape(node.input[0]), spec, bool(attrs.get("allowzero", 0)))
    return [imp.reshaped(node.input[0], target)]


@_handles("Flatten")
def _flatten(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    shape = imp.shape(node.input[0])
    axis = int(attrs.get("axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        imp.fail(f"axis {attrs.get('axis')} is out of range for rank {len(shape)}")
    target = (math.prod(shape[:axis]), math.prod(shape[axis:]))
    return [imp.reshaped(node.input[0], target)]


@_handles("Squeeze")
def _squeeze(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    shape = imp.shape(node.input[0])
    axes = _ints(imp, node, attrs, "axes", 1)
    if axes is None:
        drop = {i for i, d in enumerate(shape) if d == 1}
    else:
        drop = {_axis(imp, a, len(shape)) for a in axes}
    if any(shape[a] != 1 for a in drop):
        imp.fail(f"cannot squeeze axes {sorted(drop)} of shape {_dims(shape)}")
    return [imp.reshaped(node.input[0], [d for i, d in enumerate(shape) if i not in drop])]


@_handles("Unsqueeze")
def _unsqueeze(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    shape = list(imp.shape(node.input[0]))
    axes = _ints(imp, node, attrs, "axes", 1) or []
    rank = len(shape) + len(axes)
    for axis in sorted(_axis(imp, a, rank) for a in axes):
        shape.insert(axis, 1)
    return [imp.reshaped(node.input[0], shape)]


@_handles("Transpose")
def _transpose(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    perm = attrs.get("perm", list(reversed(range(len(imp.shape(x))))))
    return [imp.op(G.TransposeOp, x, perm=tuple(int(p) for p in perm))]


@_handles("Slice")
def _slice(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    for axis, start, end, step in _slice_specs(imp, node, len(imp.shape(x))):
        if step != 1:
            imp.fail(f"step {step} on axis {axis} is not supported (only 1)")
        bounds = range(imp.shape(x)[axis])[start:end]
        x = imp.take(x, axis, bounds.start, max(bounds.start, bounds.stop))
    return [x]


@_handles("Gather")
def _gather(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    data, indices = node.input[0], node.input[1]
    axis = int(attrs.get("axis", 0))
    rank = len(imp.shape(data))
    if rank == 2 and _axis(imp, axis, rank) == 0:
        return [imp.op(G.EmbeddingOp, imp.data(indices), imp.data(data))]
    index = imp.value(indices)
    if isinstance(index, Known) and index.array.ndim == 0:
        axis = _axis(imp, axis, rank)
        x = imp.data(data)
        size = imp.shape(x)[axis]
        position = int(imp.known(indices, "indices"))
        if not -size <= position < size:
            imp.fail(f"index {position} is out of range for axis {axis} of size {size}")
        piece = imp.take(x, axis, position % size, position % size + 1)
        shape = [d for i, d in enumerate(imp.shape(piece)) if i != axis]
        return [imp.reshape(piece, shape)]
    imp.fail(
        "only row lookups in a 2-D table (axis 0, as graph.embedding) and constant "
        "scalar indices import"
    )


def _reduction(kind: str) -> Handler:
    def handler(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
        x = imp.data(node.input[0])
        axes = _ints(imp, node, attrs, "axes", 1) or []
        if not axes and attrs.get("noop_with_empty_axes", 0):
            return [x]
        axes = axes or list(range(len(imp.shape(x))))
        keepdims = bool(attrs.get("keepdims", 1))
        return [imp.op(G.ReduceOp, x, kind=kind, axes=tuple(axes), keepdims=keepdims)]

    return handler


HANDLERS["ReduceSum"] = _reduction("sum")
HANDLERS["ReduceMean"] = _reduction("mean")
HANDLERS["ReduceMax"] = _reduction("max")


# -------------------------------------------------------------------------- model ops


@_handles("Softmax")
def _softmax(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    shape = imp.shape(x)
    axis = int(attrs.get("axis", -1 if imp.opset >= 13 else 1))
    if imp.opset >= 13 or _axis(imp, axis, len(shape)) == len(shape) - 1:
        return [imp.op(G.SoftmaxOp, x, axis=axis)]
    # Before opset 13 softmax normalizes over all dims from `axis` on, as one row.
    axis = _axis(imp, axis, len(shape))
    rows = imp.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
    return [imp.reshape(imp.op(G.SoftmaxOp, rows, axis=1), shape)]


@_handles("BatchNormalization")
def _batch_norm(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    if attrs.get("training_mode", 0):
        imp.fail("training mode is not supported (the importer builds inference graphs)")
    x, scale, bias, mean, var = (imp.data(name) for name in node.input[:5])
    epsilon = _f32_decimal(attrs.get("epsilon", 1e-5))
    return [imp.op(G.BatchnormOp, x, scale, bias, mean, var, epsilon=epsilon)]


@_handles("LayerNormalization")
def _layer_norm(imp: _Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    shape = imp.shape(x)
    axis = int(attrs.get("axis", -1))
    normalized = shape[_axis(imp, axis, len(shape)) :]
    gamma = imp.data(node.input[1])
    if imp.shape(gamma) != normalized:
        gamma = imp.reshape(gamma, normalized)
    bias = _input(node, 2)
    if bias is None:
        beta = imp.op(G.ZerosOp, shape=normalized, dtype=G.sig_of(x.type).dtype)
    else:
        beta = imp.data(bias)
        if imp.shape(beta) != normalized:
            beta = imp.reshape(beta, normalized)
    epsilon = _f32_decimal(attrs.get("epsilon", 1e-5))
    return [imp.op(G.LayernormOp, x, gamma, beta, axis=axis, epsilon=epsilon)]
