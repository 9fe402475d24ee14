// A `graph` op whose operand shardings are not one configuration of its SOAP rule,
// or whose result shardings are not the ones its rule infers: communication that is
// not written as a `parallel` op is a type error, with the verifier's message.
// RUN: %tasoc opt %s --split-input-file --verify-diagnostics | filecheck %s

// A convolution's window dims cannot be split without a halo exchange.
// CHECK: {{^}}'graph.conv2d': operand #0 dim 2 is split by ["x"] but the op cannot split it
parallel.mesh @m ["x" = 2]
func.func @split_window(%x: tensor<2x4x8x8xf32, #parallel.sharding<@m, [[], [], ["x"], []]>>, %w: tensor<4x4x3x3xf32, #parallel.sharding<@m, [[], [], [], []]>>) -> tensor<2x4x8x8xf32, #parallel.sharding<@m, [[], [], [], []]>> {
  %y = graph.conv2d %x, %w {strides = array<i64: 1, 1>, padding = "same", activation = "none", groups = 1 : i64} : tensor<2x4x8x8xf32, #parallel.sharding<@m, [[], [], [], []]>>
  func.return %y : tensor<2x4x8x8xf32, #parallel.sharding<@m, [[], [], [], []]>>
}

// -----

// CHECK: {{^}}'graph.add': operand #1 dim 0 is split by ["y"] but operand #0 dim 0 is split by ["x"]: they index the same 'd0' dim; make them equal with a parallel op first
parallel.mesh @m ["x" = 2, "y" = 2]
func.func @two_ways(%a: tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>, %b: tensor<8x4xf32, #parallel.sharding<@m, [["y"], []]>>) -> tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>> {
  %y = graph.add %a, %b : tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>
  func.return %y : tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>
}

// -----

// CHECK: {{^}}'graph.matmul': operand #1 dim 0 is split by ["y"] but operand #0 dim 1 is split by ["x"]: they index the same 'k' dim
parallel.mesh @m ["x" = 2, "y" = 2]
func.func @contracting_two_ways(%a: tensor<8x4xf32, #parallel.sharding<@m, [[], ["x"]]>>, %b: tensor<4x2xf32, #parallel.sharding<@m, [["y"], []]>>) -> tensor<8x2xf32, #parallel.sharding<@m, [[], []], unreduced = ["x"]>> {
  %y = graph.matmul %a, %b : tensor<8x2xf32, #parallel.sharding<@m, [[], []], unreduced = ["x"]>>
  func.return %y : tensor<8x2xf32, #parallel.sharding<@m, [[], []], unreduced = ["x"]>>
}

// -----

// CHECK: {{^}}'graph.matmul': mesh axis 'x' splits both the 'm' and the 'n' dims
parallel.mesh @m ["x" = 2]
func.func @axis_on_two_factors(%a: tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>, %b: tensor<4x2xf32, #parallel.sharding<@m, [[], ["x"]]>>) -> tensor<8x2xf32, #parallel.sharding<@m, [["x"], []]>> {
  %y = graph.matmul %a, %b : tensor<8x2xf32, #parallel.sharding<@m, [["x"], []]>>
  func.return %y : tensor<8x2xf32, #parallel.sharding<@m, [["x"], []]>>
}

// -----

// CHECK: {{^}}'graph.relu': result types 8x4xf32, #parallel.sharding<@m, [[], []]> do not match the inferred 8x4xf32, #parallel.sharding<@m, [["x"], []]>
parallel.mesh @m ["x" = 2, "y" = 2]
func.func @not_inferred(%x: tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>) -> tensor<8x4xf32, #parallel.sharding<@m, [[], []]>> {
  %y = graph.relu %x : tensor<8x4xf32, #parallel.sharding<@m, [[], []]>>
  func.return %y : tensor<8x4xf32, #parallel.sharding<@m, [[], []]>>
}

// -----

// A matmul split along its contracting dim leaves partial sums; declaring them complete is wrong.
// CHECK: {{^}}'graph.matmul': result types 8x2xf32, #parallel.sharding<@m, [[], []]> do not match the inferred 8x2xf32, #parallel.sharding<@m, [[], []], unreduced = ["x"]>
parallel.mesh @m ["x" = 2]
func.func @partial_sums_hidden(%a: tensor<8x4xf32, #parallel.sharding<@m, [[], ["x"]]>>, %b: tensor<4x2xf32, #parallel.sharding<@m, [["x"], []]>>) -> tensor<8x2xf32, #parallel.sharding<@m, [[], []]>> {
  %y = graph.matmul %a, %b : tensor<8x2xf32, #parallel.sharding<@m, [[], []]>>
  func.return %y : tensor<8x2xf32, #parallel.sharding<@m, [[], []]>>
}

// -----

// CHECK: {{^}}'graph.relu': operands [0] hold partial sums but the op is not linear in any operand; all-reduce first
parallel.mesh @m ["x" = 2, "y" = 2]
func.func @partial_sums_into_relu(%x: tensor<8x4xf32, #parallel.sharding<@m, [[], []], unreduced = ["x"]>>) -> tensor<8x4xf32, #parallel.sharding<@m, [[], []], unreduced = ["x"]>> {
  %y = graph.relu %x : tensor<8x4xf32, #parallel.sharding<@m, [[], []], unreduced = ["x"]>>
  func.return %y : tensor<8x4xf32, #parallel.sharding<@m, [[], []], unreduced = ["x"]>>
}

// -----

// A sum of a partial sum and a complete value would count the complete one twice.
// CHECK: {{^}}'graph.add': operands [0] hold partial sums but the op takes them only in operand group [0, 1], all unreduced along the same axes; all-reduce first
parallel.mesh @m ["x" = 2]
func.func @partial_plus_complete(%a: tensor<8xf32, #parallel.sharding<@m, [[]], unreduced = ["x"]>>, %b: tensor<8xf32, #parallel.sharding<@m, [[]]>>) -> tensor<8xf32, #parallel.sharding<@m, [[]], unreduced = ["x"]>> {
  %y = graph.add %a, %b : tensor<8xf32, #parallel.sharding<@m, [[]], unreduced = ["x"]>>
  func.return %y : tensor<8xf32, #parallel.sharding<@m, [[]], unreduced = ["x"]>>
}

// -----

// A product of two partial sums is not the partial sum of a product.
// CHECK: {{^}}'graph.mul': operands [0, 1] hold partial sums but the op takes them only in operand group [0] or [1], all unreduced along the same axes; all-reduce first
parallel.mesh @m ["x" = 2]
func.func @partial_times_partial(%a: tensor<8xf32, #parallel.sharding<@m, [[]], unreduced = ["x"]>>, %b: tensor<8xf32, #parallel.sharding<@m, [[]], unreduced = ["x"]>>) -> tensor<8xf32, #parallel.sharding<@m, [[]], unreduced = ["x"]>> {
  %y = graph.mul %a, %b : tensor<8xf32, #parallel.sharding<@m, [[]], unreduced = ["x"]>>
  func.return %y : tensor<8xf32, #parallel.sharding<@m, [[]], unreduced = ["x"]>>
}

// -----

// CHECK: {{^}}'graph.add': operand #1 has no sharding beside sharded operands
parallel.mesh @m ["x" = 2, "y" = 2]
func.func @plain_operand(%a: tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>, %b: tensor<8x4xf32>) -> tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>> {
  %y = graph.add %a, %b : tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>
  func.return %y : tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>
}

// -----

// CHECK: {{^}}'graph.relu': value of type 8x4xf32 has no sharding beside sharded ones
parallel.mesh @m ["x" = 2, "y" = 2]
func.func @plain_result(%a: tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>) -> tensor<8x4xf32> {
  %y = graph.relu %a : tensor<8x4xf32>
  func.return %y : tensor<8x4xf32>
}

// -----

// CHECK: {{^}}'graph.add': operands are on different meshes @m, @n: move them with parallel.replicate first
parallel.mesh @m ["x" = 2, "y" = 2]
parallel.mesh @n ["x" = 2, "y" = 2]
func.func @two_meshes(%a: tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>, %b: tensor<8x4xf32, #parallel.sharding<@n, [["x"], []]>>) -> tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>> {
  %y = graph.add %a, %b : tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>
  func.return %y : tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>
}
