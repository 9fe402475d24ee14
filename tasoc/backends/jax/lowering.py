"""Lower a `graph` program to one jitted JAX function.

`lower(module)` reads `@main` once into a flat list of steps (kernel, attributes,
operand slots, result slots), so the returned program no longer depends on the
xDSL module: a pass may rewrite the module afterwards without changing what the
program computes. `jax.jit` traces that list on the first call, and XLA compiles
the whole graph as one computation, fusing what it can.

Semantics follow the reference kernels (`tasoc.backends.numpy.kernels`); the
differences a user can observe are:

- Precision. Float16/bfloat16 operands of element-wise and normalizing ops are
  widened to float32 and the result rounded back once, as the reference does
  (XLA fuses the conversions, so memory traffic stays half precision). Matmul and
  convolution keep half-precision operands and accumulate in float32
  (`preferred_element_type`), which is how GPUs run them fast. Float32 matmuls and
  convolutions request `Precision.HIGHEST`, so GPUs do not silently use TF32.
- 64-bit types. A program with a float64 tensor anywhere (an argument, a result or
  any op's) runs with JAX's 64-bit types on (`jax.enable_x64`), scoped to that program:
  `JaxProgram.fn` and `device_args` enter the scope on every call, so the process's
  setting, and every float32 program, stay as they are. There f64 is float64 (1e300 +
  1e300 is 2e300, 1 + 1e-12 is not 1) and i64 is int64, and the program is compared
  with the reference at float64 tolerances (`tasoc.verify.equivalence`). Other programs
  run with x64 off, as JAX's default is: their i64 tensors are int32 inside the
  program: `JaxProgram` casts i64 arguments to int32, refusing values that do not fit,
  and casts i64 results back to int64. So the max of no i64 values (a reduction over
  an empty axis) is int32's least value there, int64's in the reference. Only a float64
  tensor turns x64 on because only float64 needs it to be right: an i64 tensor in a
  float32 program holds ids and shapes that fit int32 (and are refused when they do
  not), while x64 would change how JAX promotes that program's Python scalars.
- Embedding ids outside the table yield NaN rows (`jnp.take(mode="fill")`), and so do
  `gather` indices outside [-n, n) (an integer type's extreme value where there is no
  NaN); the reference raises instead. A jitted function cannot raise on data. For the
  same reason an integer `div` by zero yields -1 here (XLA's value) and an integer
  raised to a negative integer `pow` yields XLA's value, where the reference raises.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import wraps
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue

from tasoc.backends import ArrayModule, numpy_dtype
from tasoc.backends.arguments import check_arguments
from tasoc.backends.numpy.interpreter import KernelTypeError
from tasoc.backends.numpy.kernels import AnyKernel, in_float32
from tasoc.ir.graph import GraphOp, sig_of
from tasoc.ir.opdef import op_def, op_defs
from tasoc.ir.program import (
    ArgInfo,
    arg_infos,
    entry_function,
    refuse_encodings,
    return_values,
)
from tasoc.ir.shapes import DType, TensorSig, window_pads

JaxKernel = Callable[[Mapping[str, Any], Sequence[jax.Array]], list[jax.Array]]

_HIGHEST = lax.Precision.HIGHEST


def jax_dtype(dtype: DType | str) -> np.dtype:
    """The dtype JAX uses for an IR element type (i64 is int32 unless x64 is on)."""
    return jax.dtypes.canonicalize_dtype(numpy_dtype(dtype))


JAX = ArrayModule(
    jnp,
    erf=lax.erf,
    erfc=lax.erfc,
    dtype_of=jax_dtype,
    segment_sum=lambda data, ids, segments: jax.ops.segment_sum(data, ids, segments),
    segment_max=lambda data, ids, segments: jax.ops.segment_max(data, ids, segments),
)
"""The array namespace the ops' own kernels (`OpDef.kernel`) are lowered on."""


def own_kernel(name: str) -> JaxKernel:
    """Op `name`'s own kernel (`OpDef.kernel`) on JAX arrays, without the float32
    policy: for lowerings that differentiate it (`backward.py`)."""
    kernel = op_def(name).kernel
    if kernel is None:
        raise ValueError(f"op '{name}' has no kernel of its own")
    return lambda attrs, inputs: kernel(JAX, attrs, inputs)


JAX_KERNELS: dict[str, JaxKernel] = {
    op.name: in_float32(own_kernel(op.name)) for op in op_defs().values() if op.kernel is not None
}
"""JAX lowering by op short name: each op's own kernel, replaced by the lowering's
where it registers one (`_kernel`); the same keys as the reference `KERNELS`."""


def _kernel(*names: str, widen: bool = True) -> Callable[[JaxKernel], JaxKernel]:
    """Register a lowering; `widen` applies the reference's float32 policy to it."""

    def register(fn: JaxKernel) -> JaxKernel:
        wrapped: AnyKernel = in_float32(fn) if widen else fn
        for name in names:
            JAX_KERNELS[name] = wrapped
        return fn

    return register


# ------------------------------------------------------------------ element-wise


@_kernel("relu")
def _relu(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    """`jax.nn.relu`, not the op's own `maximum(x, 0)`: the same values, but a named
    function in the HLO (`call @relu`), which the placed lowering's tests find it by."""
    return [jax.nn.relu(inputs[0])]


@_kernel("sigmoid")
def _sigmoid(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    return [jax.nn.sigmoid(inputs[0])]


@_kernel("gelu")
def _gelu(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    return [jax.nn.gelu(inputs[0], approximate=False)]


# ------------------------------------------------------- contractions and windows


def _accumulator(dtype: np.dtype) -> np.dtype | None:
    """float32 accumulation for every float contraction narrower than float64 (which
    accumulates in float64); integers keep their type."""
    if not jnp.issubdtype(dtype, jnp.floating):
        return None
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


@_kernel("matmul", widen=False)
def _matmul(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    lhs, rhs = inputs
    out = jnp.matmul(lhs, rhs, precision=_HIGHEST, preferred_element_type=_accumulator(lhs.dtype))
    return [out.astype(lhs.dtype)]


def _explicit_pads(
    attrs: Mapping[str, Any], in_hw: Sequence[int], kernel: tuple[int, int]
) -> list[tuple[int, int]]:
    """[(top, bottom), (left, right)]: the reference's padding, in lax's layout."""
    top, left, bottom, right = window_pads(
        attrs["padding"], (in_hw[0], in_hw[1]), kernel, attrs["strides"]
    )
    return [(top, bottom), (left, right)]


@_kernel("conv2d", widen=False)
def _conv2d(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    x, w = inputs
    out = lax.conv_general_dilated(
        x,
        w,
        window_strides=attrs["strides"],
        padding=_explicit_pads(attrs, x.shape[2:], (w.shape[2], w.shape[3])),
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
        feature_group_count=attrs["groups"],
        precision=_HIGHEST,
        preferred_element_type=_accumulator(x.dtype),
    )
    if attrs["activation"] == "relu":
        out = jax.nn.relu(out)
    return [out.astype(x.dtype)]


@_kernel("pool2d")
def _pool2d(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    (x,) = inputs
    kh, kw = attrs["kernel"]
    window, strides = (1, 1, kh, kw), (1, 1, *attrs["strides"])
    padding = [(0, 0), (0, 0), *_explicit_pads(attrs, x.shape[2:], (kh, kw))]
    if attrs["kind"] == "max":
        init = np.array(-np.inf, x.dtype)
        return [lax.reduce_window(x, init, lax.max, window, strides, padding)]
    total = lax.reduce_window(x, np.array(0, x.dtype), lax.add, window, strides, padding)
    return [total / (kh * kw)]


@_kernel("softmax")
def _softmax(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    """`exp(x - max x) / sum`, on a materialized `x`.

    Subtracting the maximum keeps every exponent <= 0 and the maximum's own term 1,
    but only if `x` in `x - max x` is the same number the maximum was taken of. XLA
    fuses a cheap producer (an average pool's `sum * (1/k)`) into each consumer and
    contracts `sum * c - max` into one fused multiply-add, whose unrounded product
    can sit hundreds below the rounded maximum once |x| is large (1e10): every term
    underflows and the row is 0/0 = NaN. The barrier makes XLA compute `x` once,
    rounded, and read that value in both places.
    """
    materialized = lax.optimization_barrier(inputs[0])
    return [jax.nn.softmax(materialized, axis=attrs["axis"])]


@_kernel("embedding")
def _embedding(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    ids, table = inputs
    return [jnp.take(table, ids, axis=0, mode="fill", fill_value=jnp.nan)]


# ------------------------------------------ arithmetic, casts and indexing


@_kernel("div")
def _div(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    """Integers truncate toward zero (`lax.div`, as the reference), not floor as `//`."""
    lhs, rhs = inputs
    if jnp.issubdtype(lhs.dtype, jnp.integer):
        return [lax.div(*jnp.broadcast_arrays(lhs, rhs))]
    return [jnp.divide(lhs, rhs)]


@_kernel("cast", widen=False)
def _cast(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    """XLA's conversion: floats to integers truncate and saturate, NaN 0, as the
    reference defines it."""
    return [inputs[0].astype(jax_dtype(attrs["to"]))]


@_kernel("broadcast")
def _broadcast(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    return [jnp.broadcast_to(inputs[0], attrs["shape"])]


@_kernel("gather")
def _gather(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    """Indices outside [-n, n) yield NaN (an integer type's extreme value), where the
    reference raises."""
    data, indices = inputs
    return [jnp.take(data, indices, axis=attrs["axis"], mode="fill")]


# ------------------------------------------------------------------ the program


@dataclass(frozen=True, slots=True)
class Step:
    """One `graph` op of `@main`, detached from xDSL: values are slots in a flat list.
    Detached so that a lowered program no longer depends on the module (a pass may
    rewrite it afterwards), and shared by every lowering that runs `graph` ops on one
    device (`lower`, and `placed.lower_placed`, which interleaves them with moves)."""

    name: str
    attrs: Mapping[str, Any]
    operands: tuple[int, ...]
    results: tuple[int, ...]
    result_sigs: tuple[TensorSig, ...]

    def run(self, inputs: Sequence[jax.Array]) -> list[jax.Array]:
        """The op's JAX kernel on (traced) `inputs`; each result's type is checked at
        trace time (`check_results`)."""
        results = JAX_KERNELS[self.name](self.attrs, inputs)
        check_results(f"graph.{self.name}", self.result_sigs, results)
        return results


def graph_step(op: Operation, slots: dict[SSAValue, int]) -> Step:
    """`op` as a `Step` reading the slots `slots` gives its operands; its results take
    the next free slots, which are added to `slots`. ValueError for an op that is not a
    `graph` op with a JAX lowering."""
    if not isinstance(op, GraphOp) or op.op_name() not in JAX_KERNELS:
        raise ValueError(f"no JAX lowering for op '{op.name}'")
    results = tuple(range(len(slots), len(slots) + len(op.results)))
    step = Step(
        name=op.op_name(),
        attrs=op.py_attrs(),
        operands=tuple(slots[v] for v in op.operands),
        results=results,
        result_sigs=tuple(sig_of(r.type) for r in op.results),
    )
    slots.update(zip(op.results, results, strict=True))
    return step


def _evaluate(
    steps: Sequence[Step], outputs: Sequence[int], args: Sequence[jax.Array]
) -> tuple[jax.Array, ...]:
    """Run the steps on (traced) arrays; checks each result's type at trace time."""
    values: dict[int, jax.Array] = dict(enumerate(args))
    for step in steps:
        values.update(zip(step.results, step.run([values[i] for i in step.operands]), strict=True))
    return tuple(values[i] for i in outputs)


def check_results(what: str, sigs: Sequence[TensorSig], results: Sequence[jax.Array]) -> None:
    """KernelTypeError unless each traced result has its type's shape and JAX dtype:
    a lowering bug is named at trace time, not found as wrong numbers later."""
    for index, (sig, array) in enumerate(zip(sigs, results, strict=True)):
        if tuple(array.shape) != sig.shape or array.dtype != jax_dtype(sig.dtype):
            raise KernelTypeError(
                f"{what} JAX lowering returned {array.dtype}{list(array.shape)} "
                f"for result #{index}, typed {sig}"
            )


def host_argument(info: ArgInfo, arg: np.ndarray) -> np.ndarray:
    """`arg` in the dtype JAX uses for `info`'s type (without x64 mode, i64 -> int32
    and f64 -> float32, rounded; with it, as it is); ValueError for integers that do
    not fit it."""
    target = jax_dtype(info.sig.dtype)
    array = np.asarray(arg)
    if array.dtype == target:
        return array
    if info.sig.dtype.is_float:
        with np.errstate(over="ignore"):  # beyond float32's range is inf, as documented
            return array.astype(target)
    limits = np.iinfo(target)
    if array.size and (array.min() < limits.min or array.max() > limits.max):
        raise ValueError(
            f"argument '{info.name}' holds values outside {target}, which JAX "
            f"uses for {info.sig.dtype} without x64 mode"
        )
    return array.astype(target)


def host_results(results: Sequence[jax.Array], sigs: Sequence[TensorSig]) -> list[np.ndarray]:
    """Results as NumPy arrays of the IR's dtypes (int32 back to int64, float32
    back to float64)."""
    return [
        np.asarray(r).astype(numpy_dtype(sig.dtype), copy=False)
        for r, sig in zip(results, sigs, strict=True)
    ]


def has_float64(function: func.FuncOp) -> bool:
    """Whether any tensor of `function` (an argument or an op's result) is f64: the
    programs that run with JAX's 64-bit types (module docstring)."""
    block = function.body.block
    values = [*block.args, *(result for op in block.ops for result in op.results)]
    return any(isinstance(v.type, TensorType) and sig_of(v.type).dtype is DType.F64 for v in values)


def in_x64(fn: Callable[..., tuple[jax.Array, ...]]) -> Callable[..., tuple[jax.Array, ...]]:
    """`fn` called with JAX's 64-bit types on, and only for that call: JAX traces,
    compiles and caches a jitted function under the setting in force at each call, so
    the scope must be entered at every call, not once at lowering."""

    @wraps(fn)
    def call(*args: jax.Array) -> tuple[jax.Array, ...]:
        with jax.enable_x64(True):
            return fn(*args)

    return call


@dataclass(frozen=True)
class JaxProgram:
    """A lowered program: `fn` is the jitted function (JAX arrays in and out, in
    `@main` order); calling the program itself takes and returns NumPy arrays of the
    IR's dtypes, handling the i64 <-> int32 conversion. A program with `x64` (a float64
    tensor: `has_float64`) runs with JAX's 64-bit types, `fn` entering the scope itself
    (`in_x64`); whoever runs its ops another way enters `precision()`."""

    fn: Callable[..., tuple[jax.Array, ...]]
    arg_infos: tuple[ArgInfo, ...]
    result_sigs: tuple[TensorSig, ...]
    x64: bool = False

    def precision(self) -> contextlib.AbstractContextManager[Any]:
        """The scope the program's JAX values live in: x64 on for a 64-bit program,
        the process's setting otherwise."""
        return jax.enable_x64(True) if self.x64 else contextlib.nullcontext()

    def device_args(self, args: Sequence[np.ndarray]) -> tuple[jax.Array, ...]:
        """Check `args` against `@main` and put them on the default device."""
        check_arguments(self.arg_infos, args)
        with self.precision():
            return tuple(
                jax.device_put(host_argument(info, arg))
                for info, arg in zip(self.arg_infos, args, strict=True)
            )

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        return host_results(self.fn(*self.device_args(arrays)), self.result_sigs)


def lower(module: ModuleOp, donate: Sequence[int] = ()) -> JaxProgram:
    """Lower `@main` of `module` to a jitted JAX function (compiled on first call).

    `donate` are argument indices whose device buffers the call may reuse for its
    results (`jax.jit(donate_argnums=...)`): a training loop donates the params and
    optimizer state a step replaces, so they are updated in place rather than copied.
    A donated `jax.Array` cannot be used after the call. A program with a float64
    tensor runs with JAX's 64-bit types (`JaxProgram.x64`, module docstring).

    Raises ValueError for an op that has no JAX lowering, ProgramError (a ValueError)
    for a tensor with an encoding (a memory space or sharding, not lowered yet).
    """
    function = entry_function(module)
    refuse_encodings(function, "the JAX lowering")
    block = function.body.block
    slots: dict[SSAValue, int] = {value: index for index, value in enumerate(block.args)}
    steps = [graph_step(op, slots) for op in block.ops if not isinstance(op, func.ReturnOp)]
    returned = return_values(function)
    outputs = tuple(slots[v] for v in returned)

    def program(*args: jax.Array) -> tuple[jax.Array, ...]:
        return _evaluate(steps, outputs, args)

    jitted = jax.jit(program, donate_argnums=tuple(donate))
    x64 = has_float64(function)
    return JaxProgram(
        fn=in_x64(jitted) if x64 else jitted,
        arg_infos=tuple(arg_infos(function)),
        result_sigs=tuple(sig_of(v.type) for v in returned),
        x64=x64,
    )


@dataclass(frozen=True)
class ShardedArguments:
    """A lowered program whose every argument and result has a JAX sharding of its own
    (a mesh layout, a memory kind): `fn` takes `jax.Array`s placed as `in_shardings`
    and returns them as `out_shardings`, in `@main` order; calling the program itself
    takes and returns NumPy arrays of the IR's dtypes, as `JaxProgram` does. The sharded
    and the placed lowerings build on it."""

    fn: Callable[..., tuple[jax.Array, ...]]
    arg_infos: tuple[ArgInfo, ...]
    result_sigs: tuple[TensorSig, ...]
    in_shardings: tuple[jax.sharding.Sharding, ...]
    out_shardings: tuple[jax.sharding.Sharding, ...]

    def device_args(self, args: Sequence[np.ndarray]) -> tuple[jax.Array, ...]:
        """Check `args` against `@main` and put each where its sharding says."""
        check_arguments(self.arg_infos, args)
        return tuple(
            jax.device_put(host_argument(info, arg), sharding)
            for info, arg, sharding in zip(self.arg_infos, args, self.in_shardings, strict=True)
        )

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        return host_results(self.fn(*self.device_args(arrays)), self.result_sigs)

    def abstract_args(self) -> tuple[jax.ShapeDtypeStruct, ...]:
        """The arguments' global shapes, JAX dtypes and shardings (no data)."""
        return tuple(
            jax.ShapeDtypeStruct(info.sig.shape, jax_dtype(info.sig.dtype), sharding=sharding)
            for info, sharding in zip(self.arg_infos, self.in_shardings, strict=True)
        )

    def lowered(self, platform: str | None = None) -> jax.stages.Lowered:
        """The StableHLO of `fn` (a jitted function) for this machine, or cross-lowered
        for `platform` ("cuda": what a GPU would be given, without a GPU)."""
        traced = self.fn.trace(*self.abstract_args())  # type: ignore[attr-defined]
        if platform is None:
            return traced.lower()
        return traced.lower(lowering_platforms=(platform,))


class Runnable(Protocol):
    """What `bench` times: a jitted `fn` and the arguments it takes, placed on devices
    (a `JaxProgram`, or a sharded program on a mesh)."""

    @property
    def fn(self) -> Callable[..., tuple[jax.Array, ...]]: ...

    def device_args(self, args: Sequence[np.ndarray]) -> tuple[jax.Array, ...]: ...


def bench(program: Runnable, args: Sequence[np.ndarray], repeats: int = 10) -> list[float]:
    """Seconds per call of `program.fn` on `args`, `repeats` times.

    The arguments are moved to the device once and one untimed call compiles and
    warms up first; each timed call waits for its results (`block_until_ready`),
    since JAX dispatches asynchronously.
    """
    device_args = program.device_args(args)
    jax.block_until_ready(program.fn(*device_args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(program.fn(*device_args))
        times.append(time.perf_counter() - start)
    return times
