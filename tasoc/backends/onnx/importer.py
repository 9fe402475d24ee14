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

import functools
import hashlib
import re
import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from os import PathLike
from typing import Any, NoReturn

import numpy as np
import onnx
import onnx.defs
import onnx.version_converter
from onnx import TensorProto
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, BlockArgument, SSAValue
from xdsl.utils.exceptions import VerifyException

from tasoc.backends import numpy_dtype
from tasoc.backends.onnx.conventions import (
    ARGUMENT_ORDER_KEY,
    DTYPES_BY_NUMPY,
    DTYPES_BY_ONNX,
    NODE_FORMS_KEY,
)
from tasoc.backends.onnx.errors import (
    SHOWN_NAME_LENGTH,
    OnnxImportError,
    first_line,
    format_dims,
    shown,
)
from tasoc.backends.onnx.files import load_model, read_metadata
from tasoc.backends.onnx.fold_dispatch import Folding, node_label
from tasoc.backends.onnx.gelu import find_gelus
from tasoc.backends.onnx.handlers import HANDLERS
from tasoc.backends.onnx.known_values import (
    Known,
    Origin,
    Value,
    broadcast_base,
    is_integral,
    is_program_data,
)
from tasoc.backends.onnx.tensors import check_size, element_type_name, tensor_array
from tasoc.ir import graph as G
from tasoc.ir.program import ENTRY, make_function
from tasoc.ir.shapes import ConstData, DType, ShapeError, TensorSig

MIN_OPSET = 11
MAX_OPSET = 28
"""The default-domain opsets whose operator semantics the importer implements. A model
of an older opset is first upgraded to MIN_OPSET with `onnx.version_converter`; one of a
newer opset than the installed `onnx` knows (`onnx.defs.onnx_opset_version()`) is
refused, as its operators have no schema to check them against."""

OP_VERSIONS: dict[str, tuple[int, ...]] = {
    "Abs": (6, 13),
    "Add": (7, 13, 14),
    "And": (7,),
    "AveragePool": (11, 19, 22),
    "BatchNormalization": (9, 14, 15),
    "Cast": (9, 13, 19, 21, 23, 24, 25, 28),
    "Ceil": (6, 13),
    "CastLike": (15, 19, 21, 23, 24, 25),
    "Clip": (11, 12, 13),
    "Concat": (11, 13),
    "Constant": (11, 12, 13, 19, 21, 23, 24, 25),
    "ConstantOfShape": (9, 20, 21, 23, 24, 25),
    "Conv": (11, 22),
    "ConvTranspose": (11, 22),
    "Div": (7, 13, 14),
    "Dropout": (10, 12, 13, 22),
    "Einsum": (12, 28),
    "Elu": (6, 22),
    "Equal": (11, 13, 19),
    "Erf": (9, 13),
    "Exp": (6, 13),
    "Expand": (8, 13),
    "EyeLike": (9, 22),
    "Flatten": (11, 13, 21, 23, 24, 25),
    "Floor": (6, 13),
    "GRU": (7, 14, 22),
    "Gather": (11, 13),
    "Gelu": (20,),
    "Gemm": (11, 13),
    "GlobalAveragePool": (1, 22),
    "GlobalMaxPool": (1, 22),
    "Greater": (9, 13),
    "GreaterOrEqual": (12, 16),
    "HardSigmoid": (6, 22),
    "HardSwish": (14, 22),
    "Identity": (1, 13, 14, 16, 19, 21, 23, 24, 25),
    "InstanceNormalization": (6, 22),
    "LRN": (1, 13),
    "LSTM": (7, 14, 22),
    "LayerNormalization": (17,),
    "LeakyRelu": (6, 16),
    "Less": (9, 13),
    "LessOrEqual": (12, 16),
    "Log": (6, 13),
    "LogSoftmax": (11, 13),
    "MatMul": (9, 13),
    "Max": (8, 12, 13),
    "MaxPool": (11, 12, 22),
    "Mean": (8, 13),
    "Min": (8, 12, 13),
    "Mod": (10, 13, 28),
    "Mul": (7, 13, 14),
    "Neg": (6, 13),
    "Not": (1,),
    "Or": (7,),
    "PRelu": (9, 16),
    "Pad": (11, 13, 18, 19, 21, 23, 24, 25),
    "Pow": (7, 12, 13, 15),
    "RNN": (7, 14, 22),
    "Range": (11, 27),
    "Reciprocal": (6, 13),
    "ReduceL1": (11, 13, 18),
    "ReduceL2": (11, 13, 18),
    "ReduceLogSum": (11, 13, 18, 28),
    "ReduceLogSumExp": (11, 13, 18, 28),
    "ReduceMax": (11, 12, 13, 18, 20),
    "ReduceMean": (11, 13, 18),
    "ReduceMin": (11, 12, 13, 18, 20),
    "ReduceProd": (11, 13, 18),
    "ReduceSum": (11, 13),
    "ReduceSumSquare": (11, 13, 18),
    "Relu": (6, 13, 14),
    "Reshape": (5, 13, 14, 19, 21, 23, 24, 25),
    "Resize": (11, 13, 18, 19),
    "Selu": (6, 22),
    "Shape": (1, 13, 15, 19, 21, 23, 24, 25),
    "Sigmoid": (6, 13),
    "Size": (1, 13, 19, 21, 23, 24, 25),
    "Slice": (11, 13),
    "Softmax": (11, 13),
    "Softplus": (1, 22),
    "Softsign": (1, 22),
    "Split": (11, 13, 18),
    "Sqrt": (6, 13),
    "Squeeze": (11, 13, 21, 23, 24, 25),
    "Sub": (7, 13, 14),
    "Sum": (8, 13),
    "Tanh": (6, 13),
    "Tile": (6, 13),
    "Transpose": (1, 13, 21, 23, 24, 25),
    "Trilu": (14,),
    "Unsqueeze": (11, 13, 21, 23, 24, 25),
    "Where": (9, 16),
    "Xor": (7,),
}
"""The versions of each op's ONNX schema (`since_version`) whose semantics the handler
(and folder) of the op implements: every version in force at some opset in
MIN_OPSET..MAX_OPSET. A node whose op is listed but whose schema at the model's opset is
another version is refused, naming the version, rather than imported with the semantics
of a version it is not. `tests/test_onnx_opsets.py` checks this table against the
schemas of the installed `onnx`, so that an onnx release adding a version of a handled
op fails there until the handler is checked against it (`docs/onnx.md` lists the
per-version differences the handlers take care of)."""

CONSTANT_ELEMENTS_LIMIT = 1024
"""Literals up to this many elements become `graph.constant`; larger ones are weights
(DESIGN.md: weights are arguments, never literals in the text)."""

MAX_NAME_LENGTH = 128
"""The longest IR argument name `ir_name` makes. ONNX names have no limit, but a weight's
name is also its member name in the `.npz` beside text IR, which a zip file caps at
64 KiB, and a name of thousands of characters helps no reader."""


def import_onnx(
    model: str | PathLike[str] | bytes | onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    notes: list[str] | None = None,
) -> tuple[ModuleOp, dict[str, np.ndarray]]:
    """Import `model` (a path, serialized bytes or a ModelProto) into the graph dialect.

    `input_shapes` fixes the shapes of graph inputs by ONNX name (needed when the
    model declares dynamic dimensions). Returns the module and the weight values by
    `@main` argument name: the ONNX initializer name, made a valid IR name (see
    `ir_name`). Raises OnnxImportError with a one-line message. What the user should
    know about an import that succeeded (a model of an opset below MIN_OPSET upgraded
    with `onnx.version_converter`) is appended to `notes`, one line each.
    """
    proto = load_model(model)
    opset = _default_opset(proto)
    if opset < MIN_OPSET:
        proto = _upgraded(proto, opset)
        if notes is not None:
            notes.append(
                f"the model's opset {opset} was upgraded to opset {MIN_OPSET} with "
                "onnx.version_converter"
            )
        opset = MIN_OPSET
    order = read_metadata(proto, ARGUMENT_ORDER_KEY)
    if not (isinstance(order, list) and all(isinstance(name, str) for name in order)):
        order = None
    forms = read_metadata(proto, NODE_FORMS_KEY)
    if not (isinstance(forms, dict) and all(isinstance(form, str) for form in forms.values())):
        forms = {}
    try:
        return Importer(proto.graph, opset, dict(input_shapes or {}), order, forms).run()
    except UnicodeDecodeError as err:
        # ONNX's schema and checker leave names and string attributes unchecked, and
        # protobuf decodes a string field only when it is read: any read may raise.
        byte = err.object[err.start]
        raise OnnxImportError(
            f"the model holds a name or string that is not UTF-8 (byte {byte:#04x})"
        ) from None


def ir_name(onnx_name: str, taken: set[str]) -> str:
    """The IR argument name of an ONNX value: invalid characters become `_`, a leading
    digit gets a `v` prefix, and a trailing `_<digits>` becomes `.<digits>` because
    xDSL drops such suffixes from name hints (`w_1` would print as `w`). A name longer
    than MAX_NAME_LENGTH keeps its start and ends in `.` and 8 hex digits of its
    digest, so that long names sharing a start stay apart. A name in `taken` gets `.1`,
    `.2`, ... appended. The result is added to `taken`."""
    name = re.sub(r"[^\w$.-]", "_", onnx_name, flags=re.ASCII) or "arg"
    if not re.match(r"[A-Za-z_$.-]", name):
        name = f"v{name}"
    name = re.sub(r"_(\d+)$", r".\1", name)
    if len(name) > MAX_NAME_LENGTH:
        digest = hashlib.sha256(onnx_name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        name = f"{name[: MAX_NAME_LENGTH - 9]}.{digest}"
    unique, count = name, 0
    while unique in taken:
        count += 1
        unique = f"{name}.{count}"
    taken.add(unique)
    return unique


def highest_opset() -> int:
    """The newest default-domain opset the importer takes: MAX_OPSET, or the newest the
    installed `onnx` knows when that is older."""
    return min(MAX_OPSET, onnx.defs.onnx_opset_version())


def _default_opset(model: onnx.ModelProto) -> int:
    versions = {entry.domain or "ai.onnx": entry.version for entry in model.opset_import}
    opset = versions.get("ai.onnx")
    if opset is None:
        raise OnnxImportError("the model imports no default-domain ('ai.onnx') opset")
    highest = highest_opset()
    if not 1 <= opset <= highest:
        known = onnx.defs.onnx_opset_version()
        why = (
            "opsets start at 1"
            if opset < 1
            else f"the installed onnx {onnx.__version__} knows opsets up to {known}"
            if opset > known
            else f"tasoc implements opsets up to {MAX_OPSET}"
        )
        raise OnnxImportError(
            f"unsupported ONNX opset {opset} (supported: 1-{highest}, those below "
            f"{MIN_OPSET} upgraded with onnx.version_converter); {why}"
        )
    return opset


def _upgraded(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """`model` (default-domain opset `opset` < MIN_OPSET) converted to MIN_OPSET by
    `onnx.version_converter`; its failure is one line naming the opsets and its reason."""
    try:
        return onnx.version_converter.convert_version(model, MIN_OPSET)
    except Exception as err:  # its C++ binding raises RuntimeError and ConvertError
        reason = re.sub(r"^.*?Assertion `.*?` failed: ", "", first_line(err))
        if re.search(r"%l*[ds]", reason):  # an assertion whose message is not formatted
            unknown = [
                n.op_type for n in model.graph.node if _since_version(n.op_type, opset) is None
            ]
            reason = (
                f"op {shown(unknown[0])} has no schema in onnx {onnx.__version__}"
                if unknown and all(n.domain in ("", "ai.onnx") for n in model.graph.node)
                else reason
            )
        raise OnnxImportError(
            f"cannot upgrade the model from ONNX opset {opset} to opset {MIN_OPSET} with "
            f"onnx.version_converter: {reason}"
        ) from None


@functools.cache
def _since_version(op_type: str, opset: int) -> int | None:
    """The version of default-domain op `op_type`'s schema in force at `opset`, or None
    when the installed `onnx` has no such op at that opset."""
    try:
        return onnx.defs.get_schema(op_type, opset, "").since_version
    except onnx.defs.SchemaError:
        return None


def _static_shape_option(name: str, declared: Sequence[int | str]) -> str:
    """How to fix input `name`'s dynamic dims (named, or negative) on the command line
    and in Python, each as 1: a concrete spelling the user can adjust. A name the shell
    would split is quoted; one a message must escape is shown as messages show it."""
    dims = tuple(1 if isinstance(d, str) or d < 0 else d for d in declared)
    option = f"{name}={'x'.join(map(str, dims))}"
    if name.isprintable() and len(name) <= SHOWN_NAME_LENGTH:
        option = shlex.quote(option)
    else:
        option = shown(option, quote=False)
    return f"--input-shape {option} (input_shapes={{{shown(name)}: {dims}}} in Python)"


def _attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """Node attributes as Python values (strings decoded; bytes that are not UTF-8 are
    kept as escapes, which match no choice and show in the message)."""
    attrs = {}
    for attr in node.attribute:
        value = onnx.helper.get_attribute_value(attr)
        is_text = isinstance(value, bytes)
        attrs[attr.name] = value.decode("utf-8", "backslashreplace") if is_text else value
    return attrs


class Importer:
    """Walks the ONNX graph once, in its (topological) node order, building `@main`.

    Each node goes to its handler (`handlers.HANDLERS`), or to a folder when all its
    inputs are known integers; handlers read operands and make ops through the methods
    here, and fail through `fail`, which names the node."""

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
        self.outputs = frozenset(out.name for out in graph.output)
        """The graph's output names (`is_output` asks for every node's outputs)."""
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
        self.folding = Folding(self)

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
        """The static type of a graph input (`declared_sig`), within the size limits."""
        sig = self.declared_sig(info)
        check_size(sig.shape, numpy_dtype(sig.dtype), f"input {shown(info.name)}")
        return sig

    def declared_sig(self, info: onnx.ValueInfoProto) -> TensorSig:
        """The static type of a graph input, from its declaration or `input_shapes`."""
        name = info.name
        if not info.type.HasField("tensor_type"):
            raise OnnxImportError(f"input {shown(name)} is not a tensor")
        tensor = info.type.tensor_type
        if tensor.elem_type not in DTYPES_BY_ONNX:
            element = element_type_name(tensor.elem_type)
            raise OnnxImportError(f"input {shown(name)} has unsupported element type {element}")
        # The checker makes inputs declare their rank; a dimension may be symbolic.
        declared = [
            d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
            for d in tensor.shape.dim
        ]
        given = self.input_shapes.get(name)
        if given is not None:
            shape = tuple(int(d) for d in given)
            fits = len(declared) == len(shape) and all(
                isinstance(d, str) or d < 0 or d == s for d, s in zip(declared, shape, strict=True)
            )
            if not fits or min(shape, default=1) < 1:
                raise OnnxImportError(
                    f"input_shapes gives {shown(name)} the shape {format_dims(shape)}, "
                    f"which does not fit its declared shape {format_dims(declared)}"
                )
            return TensorSig(shape, DTYPES_BY_ONNX[tensor.elem_type])
        if any(isinstance(d, str) for d in declared):
            raise OnnxImportError(
                f"input {shown(name)} has a dynamic shape {format_dims(declared)}: give it a "
                f"static one, e.g. {_static_shape_option(name, declared)}"
            )
        if min(declared, default=0) < 0:
            raise OnnxImportError(
                f"input {shown(name)} has negative dims {format_dims(declared)} (how some "
                f"exporters mark dynamic ones): give it a static shape, e.g. "
                f"{_static_shape_option(name, declared)}"
            )
        return TensorSig(tuple(int(d) for d in declared), DTYPES_BY_ONNX[tensor.elem_type])

    # ------------------------------------------------------------- values
    def dtype(self, known: Known) -> DType:
        kind = DTYPES_BY_NUMPY.get(known.array.dtype)
        if kind is None:
            self.fail(
                f"value {shown(known.name)} has element type {known.array.dtype}, "
                "which the graph dialect does not have"
            )
        return kind

    def value(self, name: str) -> Value:
        if name not in self.env:
            self.fail(f"input {shown(name)} is not defined before this node")
        return self.env[name]

    def known(self, name: str, what: str) -> np.ndarray:
        """The import-time value of input `name`, which configures the op (`what`)."""
        value = self.value(name)
        if isinstance(value, Known):
            return value.array
        late = self.folding.late_value(name)
        if late is None:
            origin = self.folding.runtime_origin(name)
            self.fail(f"{what} ({shown(name)}) must be known at import time, but {origin}")
        return late

    def known_ints(self, name: str, what: str) -> np.ndarray:
        """The import-time value of input `name`, which ONNX types as integers (a shape,
        axes, pads, indices); a float or bool tensor there is refused, not rounded."""
        array = self.known(name, what)
        if array.dtype == np.bool_ or not is_integral(array):
            self.fail(f"{what} ({shown(name)}) must be integers, got {array.dtype}")
        return array

    def tensor_value(self, tensor: TensorProto, what: str) -> np.ndarray:
        """A tensor the node holds (a `Constant`'s value), checked (`tensors.tensor_array`)."""
        try:
            return tensor_array(tensor, what)
        except OnnxImportError as err:
            self.fail(str(err))

    def check_size(self, shape: Sequence[int], dtype: np.dtype | type, what: str) -> None:
        """Refuse an array the node would make, before making it, when it is over the
        size limit (`tensors.check_size`); the message names the node and `what`."""
        try:
            check_size(shape, np.dtype(dtype), what)
        except OnnxImportError as err:
            self.fail(str(err))

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
                op_value = self.constant_op(known) or self.broadcast_op(known)
                if op_value is None:
                    op_value = self.param_arg(known)
                    self.initializer_args.append(op_value)  # dropped at the end if unused
                self.made[known.name] = op_value
        return self.made[known.name]

    def broadcast_op(self, known: Known) -> SSAValue | None:
        """`known` as `graph.broadcast` of its smallest base, when it is a broadcast too
        large for a literal (an `Expand` or `ConstantOfShape` result): the program holds
        the base, not every element of the view."""
        base = broadcast_base(known.array)
        if base is None:
            return None
        compact = self.materialize(Known(f"{known.name}.base", base, known.origin))
        return self.op(G.BroadcastOp, compact, shape=known.array.shape)

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
        """Input `name` reshaped: folded when it is known and not program data (whose
        new shape, same size, may still be of a rank over the limit)."""
        value = self.value(name)
        if isinstance(value, Known) and not is_program_data(value):
            self.check_size(shape, value.array.dtype, "the result")
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
            array = tensor_array(tensor, f"initializer {shown(tensor.name)}")
            initializers[tensor.name] = Known(tensor.name, array, Origin.INITIALIZER)
        self.env.update(initializers)
        self.declare_arguments(initializers)
        absorbed, gelus = find_gelus(graph, self.env)
        for index, node in enumerate(graph.node):
            self.where = f"{node_label(node, index)} (opset {self.opset})"
            if index in gelus:
                self.env[node.output[0]] = self.op(G.GeluOp, self.data(gelus[index]))
            elif index not in absorbed:
                self.import_node_strictly(node)
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
        weights = {name: k for name, k in initializers.items() if k.array.dtype in DTYPES_BY_NUMPY}
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

    def import_node_strictly(self, node: onnx.NodeProto) -> None:
        """`import_node` with NumPy's floating-point warnings raised, so an overflow or
        a division by zero in a value computed at import time is this node's error
        line, never a warning printed beside it. Underflow stays allowed, as NumPy
        allows it by default: a result that rounds to a subnormal or to 0 is IEEE
        arithmetic's gradual underflow (dividing by 1e38), not an error."""
        try:
            with np.errstate(all="raise", under="ignore"):
                self.import_node(node)
        except FloatingPointError as err:
            self.fail(f"computing a constant at import time fails: {err}")
        except MemoryError:
            self.fail("a constant computed at import time does not fit in memory")

    def import_node(self, node: onnx.NodeProto) -> None:
        if node.domain not in ("", "ai.onnx"):
            self.unsupported(node, f" from domain {shown(node.domain)}")
        self.check_version(node)
        attrs = _attributes(node)
        handler = HANDLERS.get(node.op_type)
        results = self.folding.import_node(node, attrs, handler)
        if results is None:
            if handler is None:
                self.unsupported(node, "")
            results = handler(self, node, attrs)
        for index, name in enumerate(node.output):
            if index >= len(results):
                if name and self.is_used(name):
                    self.fail(f"output #{index} ({shown(name)}) is not supported")
                continue
            if results[index] is None:  # taken over by the nodes that read it
                continue
            self.env[name] = known = results[index]
            if (
                isinstance(known, Known)
                and known.origin is Origin.LITERAL
                and known.name == name
                and known.array.dtype in DTYPES_BY_NUMPY
            ):
                # Made where the node stands, so a program exported from the IR comes
                # back with its constants in place; dropped later if unused.
                made = self.constant_op(known)
                if made is not None:
                    self.made[name] = made
                    self.eager.append(made)

    def check_version(self, node: onnx.NodeProto) -> None:
        """Refuse a node whose op's schema at the model's opset is a version the
        importer does not implement (`OP_VERSIONS`)."""
        versions = OP_VERSIONS.get(node.op_type)
        if versions is None:
            return
        since = _since_version(node.op_type, self.opset)
        if since is None:
            self.fail(f"ONNX has no op {shown(node.op_type)} at opset {self.opset}")
        if since not in versions:
            listed = ", ".join(map(str, versions))
            self.fail(
                f"version {since} of {shown(node.op_type)} is not implemented "
                f"(tasoc implements its versions {listed})"
            )

    def unsupported(self, node: onnx.NodeProto, domain: str) -> NoReturn:
        self.fail(f"unsupported ONNX op {shown(node.op_type)}{domain}")

    def is_used(self, name: str) -> bool:
        return self.readers[name] > 0 or self.is_output(name)

    def is_output(self, name: str) -> bool:
        return name in self.outputs

    def output(self, info: onnx.ValueInfoProto) -> SSAValue:
        """Graph output `info` as `@main` returns it, after checking what the model
        declares of it against what the import infers: its element type and its static
        dims (no type, no shape or a named dim declares nothing)."""
        value = self.data(info.name)
        sig = G.sig_of(value.type)
        tensor = info.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        shape_fits = not tensor.HasField("shape") or (
            len(dims) == sig.rank
            and all(d is None or d == s for d, s in zip(dims, sig.shape, strict=True))
        )
        dtype_fits = tensor.elem_type == 0 or DTYPES_BY_ONNX.get(tensor.elem_type) == sig.dtype
        if not (shape_fits and dtype_fits):
            declared = element_type_name(tensor.elem_type) if tensor.elem_type else "any type"
            inferred = next(code for code, kind in DTYPES_BY_ONNX.items() if kind == sig.dtype)
            raise OnnxImportError(
                f"output {shown(info.name)} is declared {declared} "
                f"{format_dims(dims) if tensor.HasField('shape') else 'of any shape'}, but "
                f"the import infers {element_type_name(inferred)} {format_dims(sig.shape)}"
            )
        return value

    def drop_unused(self, outputs: set[SSAValue]) -> None:
        """Remove the constant ops and weight arguments of known values that only
        configured ops (a reshape target, axes) or that nothing reads at all."""
        self.folding.drop_unused(outputs)
        for value in self.eager:
            if not value.uses and value not in outputs and isinstance(value.owner, G.GraphOp):
                self.block.erase_op(value.owner)
        for arg in reversed(self.initializer_args):
            if not arg.uses and arg not in outputs:
                del self.is_param[arg.index]
                assert arg.name_hint is not None
                del self.param_values[arg.name_hint]
                self.block.erase_arg(arg)
