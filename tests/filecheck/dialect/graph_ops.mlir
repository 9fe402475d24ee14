// Every `graph` op parses, verifies and prints back; printing is stable (a second
// round trip prints the same text). Ops write their result types only (`split`'s
// comma-separated); operand types come from the operands' definitions.
// RUN: %tasoc opt %s | filecheck %s
// RUN: %tasoc opt %s | %tasoc opt - | filecheck %s

// CHECK-LABEL: func.func @elementwise
// CHECK-NEXT:    %0 = graph.add %a, %b : tensor<2x3xf32>
// CHECK-NEXT:    %1 = graph.mul %0, %a : tensor<2x3xf32>
// CHECK-NEXT:    %2 = graph.scale %1, %s : tensor<2x3xf32>
// CHECK-NEXT:    %3 = graph.relu %2 : tensor<2x3xf32>
// CHECK-NEXT:    %4 = graph.sigmoid %3 : tensor<2x3xf32>
// CHECK-NEXT:    %5 = graph.tanh %4 : tensor<2x3xf32>
// CHECK-NEXT:    %6 = graph.gelu %5 : tensor<2x3xf32>
// CHECK-NEXT:    func.return %6 : tensor<2x3xf32>
func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %s: tensor<f32>) -> tensor<2x3xf32> {
  %0 = graph.add %a, %b : tensor<2x3xf32>
  %1 = graph.mul %0, %a : tensor<2x3xf32>
  %2 = graph.scale %1, %s : tensor<2x3xf32>
  %3 = graph.relu %2 : tensor<2x3xf32>
  %4 = graph.sigmoid %3 : tensor<2x3xf32>
  %5 = graph.tanh %4 : tensor<2x3xf32>
  %6 = graph.gelu %5 : tensor<2x3xf32>
  func.return %6 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @linear
// CHECK-SAME:    %w: tensor<4x3x5xf16> {graph.param}
// CHECK-NEXT:    %0 = graph.transpose %x {perm = array<i64: 0, 2, 1>} : tensor<4x3x2xf16>
// CHECK-NEXT:    %1 = graph.matmul %x, %w : tensor<4x2x5xf16>
func.func @linear(%x: tensor<4x2x3xf16>, %w: tensor<4x3x5xf16> {graph.param}) -> (tensor<4x3x2xf16>, tensor<4x2x5xf16>) {
  %0 = graph.transpose %x {perm = array<i64: 0, 2, 1>} : tensor<4x3x2xf16>
  %1 = graph.matmul %x, %w : tensor<4x2x5xf16>
  func.return %0, %1 : tensor<4x3x2xf16>, tensor<4x2x5xf16>
}

// CHECK-LABEL: func.func @convolution
// CHECK-NEXT:    %0 = graph.enlarge %w {kernel = array<i64: 3, 3>} : tensor<4x4x3x3xf32>
// CHECK-NEXT:    %1 = graph.conv2d %x, %0 {strides = array<i64: 1, 1>, padding = "same", activation = "relu", groups = 1 : i64} : tensor<1x4x8x8xf32>
// CHECK-NEXT:    %2 = graph.pool2d %1 {kind = "max", kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = "valid"} : tensor<1x4x4x4xf32>
// CHECK-NEXT:    %3 = graph.pool2d %2 {kind = "avg", kernel = array<i64: 3, 3>, strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>} : tensor<1x4x4x4xf32>
// CHECK-NEXT:    %4 = graph.batchnorm %3, %c, %c, %c, %c {epsilon = 1.000000e-05 : f64} : tensor<1x4x4x4xf32>
func.func @convolution(%x: tensor<1x4x8x8xf32>, %w: tensor<4x4x1x1xf32> {graph.param}, %c: tensor<4xf32> {graph.param}) -> tensor<1x4x4x4xf32> {
  %0 = graph.enlarge %w {kernel = array<i64: 3, 3>} : tensor<4x4x3x3xf32>
  %1 = graph.conv2d %x, %0 {strides = array<i64: 1, 1>, padding = "same", activation = "relu", groups = 1 : i64} : tensor<1x4x8x8xf32>
  %2 = graph.pool2d %1 {kind = "max", kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = "valid"} : tensor<1x4x4x4xf32>
  %3 = graph.pool2d %2 {kind = "avg", kernel = array<i64: 3, 3>, strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>} : tensor<1x4x4x4xf32>
  %4 = graph.batchnorm %3, %c, %c, %c, %c {epsilon = 1.000000e-05 : f64} : tensor<1x4x4x4xf32>
  func.return %4 : tensor<1x4x4x4xf32>
}

// CHECK-LABEL: func.func @structure
// CHECK-NEXT:    %0 = graph.concat %a, %a, %a {axis = 0 : i64} : tensor<6x3xf32>
// CHECK-NEXT:    %1, %2 = graph.split %0 {axis = 1 : i64, sizes = array<i64: 1, 2>} : tensor<6x1xf32>, tensor<6x2xf32>
// CHECK-NEXT:    %3 = graph.reshape %2 {shape = array<i64: 3, 4>} : tensor<3x4xf32>
// CHECK-NEXT:    %4 = graph.softmax %3 {axis = -1 : i64} : tensor<3x4xf32>
// CHECK-NEXT:    %5 = graph.reduce %4 {kind = "mean", axes = array<i64: 1>, keepdims = false} : tensor<3xf32>
// CHECK-NEXT:    %6 = graph.layernorm %1, %g, %g {axis = 1 : i64, epsilon = 1.000000e-05 : f64} : tensor<6x1xf32>
func.func @structure(%a: tensor<2x3xf32>, %g: tensor<1xf32> {graph.param}) -> (tensor<3xf32>, tensor<6x1xf32>) {
  %0 = graph.concat %a, %a, %a {axis = 0 : i64} : tensor<6x3xf32>
  %1, %2 = graph.split %0 {axis = 1 : i64, sizes = array<i64: 1, 2>} : tensor<6x1xf32>, tensor<6x2xf32>
  %3 = graph.reshape %2 {shape = array<i64: 3, 4>} : tensor<3x4xf32>
  %4 = graph.softmax %3 {axis = -1 : i64} : tensor<3x4xf32>
  %5 = graph.reduce %4 {kind = "mean", axes = array<i64: 1>, keepdims = false} : tensor<3xf32>
  %6 = graph.layernorm %1, %g, %g {axis = 1 : i64, epsilon = 1.000000e-05 : f64} : tensor<6x1xf32>
  func.return %5, %6 : tensor<3xf32>, tensor<6x1xf32>
}

// CHECK-LABEL: func.func @constants
// CHECK-NEXT:    %0 = graph.ones {shape = array<i64: 2, 3>, dtype = f32} : tensor<2x3xf32>
// CHECK-NEXT:    %1 = graph.zeros {shape = array<i64: 2, 3>, dtype = bf16} : tensor<2x3xbf16>
// CHECK-NEXT:    %2 = graph.c_pool {channels = 4 : i64, kernel = array<i64: 3, 3>, dtype = f32} : tensor<4x1x3x3xf32>
// CHECK-NEXT:    %3 = graph.i_conv {channels = 4 : i64, kernel = array<i64: 3, 3>, dtype = f32} : tensor<4x4x3x3xf32>
// CHECK-NEXT:    %4 = graph.i_matmul {size = 3 : i64, dtype = f16} : tensor<3x3xf16>
// CHECK-NEXT:    %5 = graph.constant {value = dense<[1.000000e+00, 2.500000e+00]> : tensor<2xf32>} : tensor<2xf32>
func.func @constants() -> (tensor<2x3xf32>, tensor<2x3xbf16>, tensor<4x1x3x3xf32>, tensor<4x4x3x3xf32>, tensor<3x3xf16>, tensor<2xf32>) {
  %0 = graph.ones {shape = array<i64: 2, 3>, dtype = f32} : tensor<2x3xf32>
  %1 = graph.zeros {shape = array<i64: 2, 3>, dtype = bf16} : tensor<2x3xbf16>
  %2 = graph.c_pool {channels = 4 : i64, kernel = array<i64: 3, 3>, dtype = f32} : tensor<4x1x3x3xf32>
  %3 = graph.i_conv {channels = 4 : i64, kernel = array<i64: 3, 3>, dtype = f32} : tensor<4x4x3x3xf32>
  %4 = graph.i_matmul {size = 3 : i64, dtype = f16} : tensor<3x3xf16>
  %5 = graph.constant {value = dense<[1.0, 2.5]> : tensor<2xf32>} : tensor<2xf32>
  func.return %0, %1, %2, %3, %4, %5 : tensor<2x3xf32>, tensor<2x3xbf16>, tensor<4x1x3x3xf32>, tensor<4x4x3x3xf32>, tensor<3x3xf16>, tensor<2xf32>
}

// CHECK-LABEL: func.func @lookup
// CHECK-NEXT:    %0 = graph.embedding %ids, %table : tensor<2x3x4xf32>
func.func @lookup(%ids: tensor<2x3xi64>, %table: tensor<10x4xf32> {graph.param}) -> tensor<2x3x4xf32> {
  %0 = graph.embedding %ids, %table : tensor<2x3x4xf32>
  func.return %0 : tensor<2x3x4xf32>
}

// Properties print in the op's declaration order whatever the order written; other
// attributes are kept beside them.
// CHECK-LABEL: func.func @attribute_order
// CHECK-NEXT:    %0 = graph.conv2d %x, %w {strides = array<i64: 1, 1>, padding = "valid", activation = "none", groups = 1 : i64, tag = "stem"} : tensor<1x4x6x6xf32>
func.func @attribute_order(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32> {
  %0 = graph.conv2d %x, %w {groups = 1 : i64, tag = "stem", activation = "none", padding = "valid", strides = array<i64: 1, 1>} : tensor<1x4x6x6xf32>
  func.return %0 : tensor<1x4x6x6xf32>
}
