// One invalid use of each `graph` op kind, with the verifier's message (the rule that
// `tasoc.ir.shapes` states for the op). xdsl-opt's `--verify-diagnostics` prints the
// message and exits 0, so each case can be checked here.
// RUN: %tasoc opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: {{^}}'graph.add': shapes 2x3 and 4 are not broadcastable
func.func @add(%a: tensor<2x3xf32>, %b: tensor<4xf32>) -> tensor<2x3xf32> {
  %0 = graph.add %a, %b : tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

// CHECK: {{^}}'graph.mul': element types differ: f16, f32
func.func @mul(%a: tensor<2x3xf32>, %b: tensor<2x3xf16>) -> tensor<2x3xf32> {
  %0 = graph.mul %a, %b : tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

// CHECK: {{^}}'graph.scale': scalar operand must have rank 0, got 1
func.func @scale(%a: tensor<2x3xf32>, %s: tensor<1xf32>) -> tensor<2x3xf32> {
  %0 = graph.scale %a, %s : tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

// CHECK: {{^}}'graph.relu': result types 3x2xf32 do not match the inferred 2x3xf32
func.func @relu(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %0 = graph.relu %a : tensor<3x2xf32>
  func.return %0 : tensor<3x2xf32>
}

// -----

// CHECK: {{^}}'graph.sigmoid': operand must have a float element type, got i32
func.func @sigmoid(%a: tensor<2x3xi32>) -> tensor<2x3xi32> {
  %0 = graph.sigmoid %a : tensor<2x3xi32>
  func.return %0 : tensor<2x3xi32>
}

// -----

// CHECK: {{^}}'graph.transpose': perm [0, 0] is not a permutation of 2 dimensions
func.func @transpose(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %0 = graph.transpose %a {perm = array<i64: 0, 0>} : tensor<3x2xf32>
  func.return %0 : tensor<3x2xf32>
}

// -----

// CHECK: {{^}}property 'perm' expected in operation 'graph.transpose'
func.func @transpose_missing(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %0 = graph.transpose %a : tensor<3x2xf32>
  func.return %0 : tensor<3x2xf32>
}

// -----

// CHECK: {{^}}'graph.matmul': contraction sizes differ: 2x3 @ 4x5 (3 != 4)
func.func @matmul(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) -> tensor<2x5xf32> {
  %0 = graph.matmul %a, %b : tensor<2x5xf32>
  func.return %0 : tensor<2x5xf32>
}

// -----

// CHECK: {{^}}'graph.conv2d': weight expects 2 input channels (2 x 1 groups), input has 3
func.func @conv2d(%x: tensor<1x3x8x8xf32>, %w: tensor<4x2x3x3xf32>) -> tensor<1x4x8x8xf32> {
  %0 = graph.conv2d %x, %w {strides = array<i64: 1, 1>, padding = "same", activation = "none", groups = 1 : i64} : tensor<1x4x8x8xf32>
  func.return %0 : tensor<1x4x8x8xf32>
}

// -----

// CHECK: {{^}}'graph.conv2d': activation must be 'none' or 'relu', got 'swish'
func.func @conv2d_act(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32> {
  %0 = graph.conv2d %x, %w {strides = array<i64: 1, 1>, padding = "same", activation = "swish", groups = 1 : i64} : tensor<1x4x8x8xf32>
  func.return %0 : tensor<1x4x8x8xf32>
}

// -----

// CHECK: {{^}}'graph.enlarge': cannot enlarge kernel 3x3 to 1x1 symmetrically
func.func @enlarge(%w: tensor<4x3x3x3xf32>) -> tensor<4x3x1x1xf32> {
  %0 = graph.enlarge %w {kernel = array<i64: 1, 1>} : tensor<4x3x1x1xf32>
  func.return %0 : tensor<4x3x1x1xf32>
}

// -----

// CHECK: {{^}}'graph.pool2d': kind must be 'avg' or 'max', got 'min'
func.func @pool2d(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32> {
  %0 = graph.pool2d %x {kind = "min", kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = "valid"} : tensor<1x3x4x4xf32>
  func.return %0 : tensor<1x3x4x4xf32>
}

// -----

// CHECK: {{^}}'graph.concat': operand 2x4 does not match 2x3 off axis 0
func.func @concat(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) -> tensor<4x3xf32> {
  %0 = graph.concat %a, %b {axis = 0 : i64} : tensor<4x3xf32>
  func.return %0 : tensor<4x3xf32>
}

// -----

// CHECK: {{^}}'graph.split': sizes [1, 1] do not sum to dimension 1 of size 3
func.func @split(%a: tensor<2x3xf32>) -> tensor<2x1xf32> {
  %0, %1 = graph.split %a {axis = 1 : i64, sizes = array<i64: 1, 1>} : tensor<2x1xf32>, tensor<2x1xf32>
  func.return %0 : tensor<2x1xf32>
}

// -----

// CHECK: {{^}}'graph.ones': result types 2x3xf32 do not match the inferred 3x2xf32
func.func @ones() -> tensor<2x3xf32> {
  %0 = graph.ones {shape = array<i64: 3, 2>, dtype = f32} : tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

// CHECK: {{^}}'graph.zeros': result types 2x3xf32 do not match the inferred 2x3xf16
func.func @zeros() -> tensor<2x3xf32> {
  %0 = graph.zeros {shape = array<i64: 2, 3>, dtype = f16} : tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

// CHECK: {{^}}'graph.c_pool': channels must be positive, got 0
func.func @c_pool() -> tensor<4x1x3x3xf32> {
  %0 = graph.c_pool {channels = 0 : i64, kernel = array<i64: 3, 3>, dtype = f32} : tensor<4x1x3x3xf32>
  func.return %0 : tensor<4x1x3x3xf32>
}

// -----

// CHECK: {{^}}'graph.i_conv': identity kernel needs positive channels and odd sizes, got 2x2
func.func @i_conv() -> tensor<4x4x2x2xf32> {
  %0 = graph.i_conv {channels = 4 : i64, kernel = array<i64: 2, 2>, dtype = f32} : tensor<4x4x2x2xf32>
  func.return %0 : tensor<4x4x2x2xf32>
}

// -----

// CHECK: {{^}}'graph.i_matmul': result types 3x4xf32 do not match the inferred 3x3xf32
func.func @i_matmul() -> tensor<3x4xf32> {
  %0 = graph.i_matmul {size = 3 : i64, dtype = f32} : tensor<3x4xf32>
  func.return %0 : tensor<3x4xf32>
}

// -----

// CHECK: {{^}}'graph.constant': result types 3xf32 do not match the inferred 2xf32
func.func @constant() -> tensor<3xf32> {
  %0 = graph.constant {value = dense<[1.0, 2.0]> : tensor<2xf32>} : tensor<3xf32>
  func.return %0 : tensor<3xf32>
}

// -----

// CHECK: {{^}}'graph.reshape': cannot reshape 2x3 (6 elements) to 4x2
func.func @reshape(%a: tensor<2x3xf32>) -> tensor<4x2xf32> {
  %0 = graph.reshape %a {shape = array<i64: 4, 2>} : tensor<4x2xf32>
  func.return %0 : tensor<4x2xf32>
}

// -----

// CHECK: {{^}}'graph.softmax': axis 2 out of range for rank 2
func.func @softmax(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = graph.softmax %a {axis = 2 : i64} : tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

// CHECK: {{^}}'graph.reduce': kind must be 'sum', 'mean', 'max', 'min' or 'prod', got 'median'
func.func @reduce(%a: tensor<2x3xf32>) -> tensor<2xf32> {
  %0 = graph.reduce %a {kind = "median", axes = array<i64: 1>, keepdims = false} : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

// CHECK: {{^}}'graph.batchnorm': scale must have shape 4, got 3
func.func @batchnorm(%x: tensor<1x4x2x2xf32>, %c: tensor<3xf32>) -> tensor<1x4x2x2xf32> {
  %0 = graph.batchnorm %x, %c, %c, %c, %c {epsilon = 1.0e-05 : f64} : tensor<1x4x2x2xf32>
  func.return %0 : tensor<1x4x2x2xf32>
}

// -----

// CHECK: {{^}}'graph.layernorm': gamma must have shape 3, got 2
func.func @layernorm(%x: tensor<2x3xf32>, %g: tensor<2xf32>) -> tensor<2x3xf32> {
  %0 = graph.layernorm %x, %g, %g {axis = -1 : i64, epsilon = 1.0e-05 : f64} : tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

// CHECK: {{^}}'graph.embedding': indices must be i32 or i64, got f32
func.func @embedding(%ids: tensor<2xf32>, %t: tensor<10x4xf32>) -> tensor<2x4xf32> {
  %0 = graph.embedding %ids, %t : tensor<2x4xf32>
  func.return %0 : tensor<2x4xf32>
}

// -----

// Attributes are checked for their kind, not converted: 1.5 is not a group count.
// CHECK: {{^}}'graph.conv2d': attribute 'groups' must be an i64 integer, got 1.500000e+00 : f64
func.func @conv2d_groups_float(%x: tensor<1x2x4x4xf32>, %w: tensor<2x2x3x3xf32>) -> tensor<1x2x4x4xf32> {
  %0 = graph.conv2d %x, %w {strides = array<i64: 1, 1>, padding = "same", activation = "none", groups = 1.5 : f64} : tensor<1x2x4x4xf32>
  func.return %0 : tensor<1x2x4x4xf32>
}

// -----

// Only the widths the codec writes decode: i64 integers, f64 numbers, array<i64: ...>.
// CHECK: {{^}}'graph.conv2d': attribute 'groups' must be an i64 integer, got 1.500000e+00 : f32
func.func @conv2d_groups_f32(%x: tensor<1x2x4x4xf32>, %w: tensor<2x2x3x3xf32>) -> tensor<1x2x4x4xf32> {
  %0 = graph.conv2d %x, %w {strides = array<i64: 1, 1>, padding = "same", activation = "none", groups = 1.5 : f32} : tensor<1x2x4x4xf32>
  func.return %0 : tensor<1x2x4x4xf32>
}

// -----

// CHECK: {{^}}'graph.conv2d': attribute 'groups' must be an i64 integer, got "a"
func.func @conv2d_groups_string(%x: tensor<1x2x4x4xf32>, %w: tensor<2x2x3x3xf32>) -> tensor<1x2x4x4xf32> {
  %0 = graph.conv2d %x, %w {strides = array<i64: 1, 1>, padding = "same", activation = "none", groups = "a"} : tensor<1x2x4x4xf32>
  func.return %0 : tensor<1x2x4x4xf32>
}

// -----

// CHECK: {{^}}'graph.conv2d': strides must be two positive integers, got [1]
func.func @conv2d_strides_length(%x: tensor<1x2x4x4xf32>, %w: tensor<2x2x3x3xf32>) -> tensor<1x2x4x4xf32> {
  %0 = graph.conv2d %x, %w {strides = array<i64: 1>, padding = "same", activation = "none", groups = 1 : i64} : tensor<1x2x4x4xf32>
  func.return %0 : tensor<1x2x4x4xf32>
}

// -----

// CHECK: {{^}}'graph.conv2d': padding must be 'same', 'valid' or 4 integers, got 'diagonal'
func.func @conv2d_padding_mode(%x: tensor<1x2x4x4xf32>, %w: tensor<2x2x3x3xf32>) -> tensor<1x2x4x4xf32> {
  %0 = graph.conv2d %x, %w {strides = array<i64: 1, 1>, padding = "diagonal", activation = "none", groups = 1 : i64} : tensor<1x2x4x4xf32>
  func.return %0 : tensor<1x2x4x4xf32>
}

// -----

// MLIR's dominance rule, which xDSL's verifier does not check (generic form: the
// short form cannot name a value before its definition at all).
// CHECK: {{^}}'graph.relu' uses %b (operand #0) before it is defined
func.func @use_before_definition(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %a = "graph.relu"(%b) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %b = "graph.relu"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %a : tensor<2x3xf32>
}

// -----

// Sizes are checked against the resource limits where they are written.
// CHECK: {{^}}'graph.ones': dimension 9223372036854775807 is over the largest supported, 2147483647 (2^31-1)
func.func @ones_too_large() -> tensor<9223372036854775807xf32> {
  %0 = graph.ones {shape = array<i64: 9223372036854775807>, dtype = f32} : tensor<9223372036854775807xf32>
  func.return %0 : tensor<9223372036854775807xf32>
}

// -----

// CHECK: {{^}}'func.func' has a type over a resource limit: a tensor of 3.5 PiB is over the limit of 16 GiB (set TASOC_MAX_TENSOR_BYTES to raise it)
func.func @argument_too_large(%x: tensor<100000x100000x100000xf32>) -> tensor<100000x100000x100000xf32> {
  func.return %x : tensor<100000x100000x100000xf32>
}
