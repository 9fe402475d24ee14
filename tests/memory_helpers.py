"""Placed programs shared by the tests of the memory dialect, its lowering and the driver."""

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
