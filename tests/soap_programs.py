"""Small programs soap-shard's tests and benchmarks shard: a two-layer MLP and a
convolution, pooling and dense layer CNN, whose training steps have cost graphs and
strategy spaces small enough to search exhaustively or by brute force."""

MLP = """
func.func @main(%x: tensor<16x8xf32>, %w1: tensor<8x32xf32> {graph.param},
                %w2: tensor<32x4xf32> {graph.param}) -> tensor<16x4xf32> {
  %h = graph.matmul %x, %w1 : tensor<16x32xf32>
  %r = graph.relu %h : tensor<16x32xf32>
  %y = graph.matmul %r, %w2 : tensor<16x4xf32>
  func.return %y : tensor<16x4xf32>
}
"""

CNN = """
func.func @main(%x: tensor<8x3x8x8xf32>, %w: tensor<4x3x3x3xf32> {graph.param},
                %v: tensor<64x16xf32> {graph.param}) -> tensor<8x16xf32> {
  %c = graph.conv2d %x, %w {strides = array<i64: 1, 1>, padding = "same",
                            activation = "relu", groups = 1 : i64} : tensor<8x4x8x8xf32>
  %p = graph.pool2d %c {kind = "max", kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>,
                        padding = "valid"} : tensor<8x4x4x4xf32>
  %f = graph.reshape %p {shape = array<i64: 8, 64>} : tensor<8x64xf32>
  %y = graph.matmul %f, %v : tensor<8x16xf32>
  func.return %y : tensor<8x16xf32>
}
"""
