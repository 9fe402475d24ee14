"""Placed programs shared by the tests of the memory dialect, its lowering and the driver;
`placed_by_hand`, which places a copy of any program (a sharded one too) by rule; and
`training_step`, the small MLP's training step the placement tests plan."""

from __future__ import annotations

from soap_helpers import parse as parse_text
from soap_programs import MLP
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import Rewriter

from tasoc.driver.sources import make_context
from tasoc.ir.graph import sig_of, tensor_type
from tasoc.ir.memory import FreeOp, SwapInOp, SwapOutOp, in_space
from tasoc.ir.program import entry_block, entry_function, return_values, verify_ir
from tasoc.ir.training import training_signature
from tasoc.passes.autodiff import AutodiffPass

# The example of the memory dialect: a host weight swapped in, an activation swapped out
# and back, an argument freed, a host result.
SWAPS = """\
module attributes {memory.capacity = 200000 : i64, memory.pool = #memory.pool<[16384 x 8]>} {
  func.func @main(%x: tensor<64x64xf32>, %w: tensor<64x64xf32, #memory.space<host>> {graph.param}) -> (tensor<64x64xf32>, tensor<64x64xf32, #memory.space<host>>) {
    %wd = memory.swap_in %w : tensor<64x64xf32>
    %y = graph.matmul %x, %wd : tensor<64x64xf32>
    %yh = memory.swap_out %y : tensor<64x64xf32, #memory.space<host>>
    %z = graph.relu %y : tensor<64x64xf32>
    memory.free %x
    %yd = memory.swap_in %yh : tensor<64x64xf32>
    %o = graph.add %z, %yd : tensor<64x64xf32>
    func.return %o, %yh : tensor<64x64xf32>, tensor<64x64xf32, #memory.space<host>>
  }
}
"""  # noqa: E501

SWAPS_IN_PLACE = SWAPS.replace(
    "%z = graph.relu %y :", "%z = graph.relu %y {memory.in_place = 0 : i64} :"
).replace("graph.add %z, %yd :", "graph.add %z, %yd {memory.in_place = 0 : i64} :")
"""SWAPS with buffer reuse: the relu's result takes %y's buffer (%y dies at it, its
swap-out before), the add's takes %z's."""

# A training step (autodiff's mse/sgd step of relu(x @ w), placed by hand): the weight
# lives in host memory between steps, an activation goes to host and back, the batch
# is freed after its last reader.
STEP = """\
module attributes {memory.capacity = 100000 : i64} {
  func.func @main(%x: tensor<4x8xf32>, %labels: tensor<4x8xf32> {graph.labels}, %w: tensor<8x8xf32, #memory.space<host>> {graph.param}) -> (tensor<f32> {graph.loss}, tensor<8x8xf32, #memory.space<host>> {graph.replaces = 2 : i64}) {
    %wd = memory.swap_in %w : tensor<8x8xf32>
    %0 = graph.matmul %x, %wd : tensor<4x8xf32>
    %1 = graph.relu %0 : tensor<4x8xf32>
    %h1 = memory.swap_out %1 : tensor<4x8xf32, #memory.space<host>>
    %2 = graph.constant {value = dense<-1.000000e+00> : tensor<f32>} : tensor<f32>
    %3 = graph.scale %labels, %2 : tensor<4x8xf32>
    memory.free %labels
    %4 = graph.add %1, %3 : tensor<4x8xf32>
    %5 = graph.mul %4, %4 : tensor<4x8xf32>
    %6 = graph.reduce %5 {kind = "mean", axes = array<i64: 0, 1>, keepdims = false} : tensor<f32>
    %7 = graph.ones {shape = array<i64>, dtype = f32} : tensor<f32>
    %8 = graph.reduce_grad %5, %7 {kind = "mean", axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32>
    %9 = graph.mul %8, %4 : tensor<4x8xf32>
    %10 = graph.add %9, %9 : tensor<4x8xf32>
    %d1 = memory.swap_in %h1 : tensor<4x8xf32>
    %11 = graph.relu_grad %d1, %10 : tensor<4x8xf32>
    %12 = graph.transpose %x {perm = array<i64: 1, 0>} : tensor<8x4xf32>
    memory.free %x
    %13 = graph.matmul %12, %11 : tensor<8x8xf32>
    %14 = graph.constant {value = dense<-1.000000e-01> : tensor<f32>} : tensor<f32>
    %15 = graph.scale %13, %14 : tensor<8x8xf32>
    %16 = graph.add %wd, %15 : tensor<8x8xf32>
    %w2 = memory.swap_out %16 : tensor<8x8xf32, #memory.space<host>>
    func.return %6, %w2 : tensor<f32>, tensor<8x8xf32, #memory.space<host>>
  }
}
"""  # noqa: E501


def placed_by_hand(module: ModuleOp, every: int = 2) -> ModuleOp:
    """A copy of `module` (sharded or not) placed by rule, for tests of programs the
    placement pass does not write (a sharded step):

    - every `every`-th value read more than two ops after the op that makes it is
      swapped out right after it is made and swapped back in right before the first
      such reader, which reads the new copy, as every reader after it does;
    - a training step's first param lives in host memory: it is swapped in before its
      first reader, and the result that replaces it is swapped out and returned there;
    - the first argument that is neither a param nor replaced is freed after its last
      reader.

    Moves keep a value's sharding (`memory.in_space`), so the copy of a sharded program
    is both sharded and placed, and `unplaced` of it is `module` again."""
    placed = module.clone()
    function = entry_function(placed)
    block = entry_block(function)
    signature = training_signature(function)
    ops = [op for op in block.ops if not isinstance(op, func.ReturnOp)]
    at = {op: index for index, op in enumerate(ops)}
    gapped = []
    for op in ops:
        for value in op.results:
            far = [at[u.operation] for u in value.uses if at.get(u.operation, -1) > at[op] + 2]
            if far:
                gapped.append((value, op, ops[min(far)]))
    for value, maker, reader in gapped[::every]:
        out = SwapOutOp.build_on(value)
        block.insert_op_after(out, maker)
        _swap_in_before(out.output, reader, value)
    replaced_by = signature.replaced_by if signature else {}
    if signature is not None and signature.params:
        _host_param(function, signature.params[0], replaced_by)
    others = [
        argument
        for index, argument in enumerate(block.args)
        if (signature is None or index not in signature.params) and index not in replaced_by
    ]
    if others and others[0].uses and others[0] not in return_values(function):
        last = max((use.operation for use in others[0].uses), key=block.get_operation_index)
        block.insert_op_after(FreeOp.create(operands=[others[0]]), last)
    placed.verify()
    return placed


def _swap_in_before(host: SSAValue, reader: Operation, device: SSAValue) -> None:
    """Swap `host` in right before `reader`, which reads the new copy instead of
    `device`, as every op after it does."""
    block = reader.parent_block()
    assert block is not None
    back = SwapInOp.build_on(host)
    block.insert_op_before(back, reader)
    start = block.get_operation_index(reader)
    device.replace_uses_with_if(
        back.output, lambda use: block.get_operation_index(use.operation) >= start
    )


def _host_param(function: func.FuncOp, index: int, replaced_by: dict[int, int]) -> None:
    """Argument `index` of `function` in host memory, swapped in before its first
    reader; the result replacing it (if any) swapped out and returned on the host."""
    block = entry_block(function)
    argument = block.args[index]
    first = min((use.operation for use in argument.uses), key=block.get_operation_index)
    host = Rewriter.replace_value_with_new_type(
        argument, tensor_type(in_space(sig_of(argument.type), "host"))
    )
    _swap_in_before(host, first, host)
    if index in replaced_by:
        returned = block.last_op
        assert isinstance(returned, func.ReturnOp)
        result = returned.operands[replaced_by[index]]
        out = SwapOutOp.build_on(result)
        block.insert_op_before(out, returned)
        returned.operands[replaced_by[index]] = out.output
    function.update_function_type()


def parse(text: str) -> ModuleOp:
    module = parse_text(text)
    module.verify()
    verify_ir(module)
    return module


def training_step(optimizer: str = "adam") -> ModuleOp:
    module = parse(MLP)
    AutodiffPass(loss="mse", optimizer=optimizer, lr=0.01).apply(make_context(), module)
    return module
