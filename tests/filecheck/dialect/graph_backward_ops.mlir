// Every backward `graph` op of autodiff (docs/autodiff.md), every loss and the Adam
// update parse, verify and print back; printing is stable (a second round trip prints
// the same text).
// RUN: %tasoc opt %s | filecheck %s
// RUN: %tasoc opt %s | %tasoc opt - | filecheck %s

// The activation derivatives take the forward op's output (relu, sigmoid, tanh) or
// its input (gelu), and dy.
// CHECK-LABEL: func.func @activation_grads
// CHECK-NEXT:    %0 = graph.relu_grad %y, %dy : tensor<2x3xf32>
// CHECK-NEXT:    %1 = graph.sigmoid_grad %y, %dy : tensor<2x3xf32>
// CHECK-NEXT:    %2 = graph.tanh_grad %y, %dy : tensor<2x3xf32>
// CHECK-NEXT:    %3 = graph.gelu_grad %y, %dy : tensor<2x3xf32>
// CHECK-NEXT:    func.return %0, %1, %2, %3 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
func.func @activation_grads(%y: tensor<2x3xf32>, %dy: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %0 = graph.relu_grad %y, %dy : tensor<2x3xf32>
  %1 = graph.sigmoid_grad %y, %dy : tensor<2x3xf32>
  %2 = graph.tanh_grad %y, %dy : tensor<2x3xf32>
  %3 = graph.gelu_grad %y, %dy : tensor<2x3xf32>
  func.return %0, %1, %2, %3 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// Convolution gradients: grouped, strided, with a padding mode and explicit pads.
// CHECK-LABEL: func.func @convolution_grads
// CHECK-NEXT:    %0 = graph.conv2d_grad_input %dy, %w {strides = array<i64: 2, 2>, padding = "same", groups = 2 : i64, input_shape = array<i64: 1, 4, 8, 8>} : tensor<1x4x8x8xf16>
// CHECK-NEXT:    %1 = graph.conv2d_grad_weight %x, %dy {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 0, 0>, groups = 2 : i64, kernel = array<i64: 3, 3>} : tensor<6x2x3x3xf16>
// CHECK-NEXT:    func.return %0, %1 : tensor<1x4x8x8xf16>, tensor<6x2x3x3xf16>
func.func @convolution_grads(%x: tensor<1x4x8x8xf16>, %w: tensor<6x2x3x3xf16> {graph.param}, %dy: tensor<1x6x4x4xf16>) -> (tensor<1x4x8x8xf16>, tensor<6x2x3x3xf16>) {
  %0 = graph.conv2d_grad_input %dy, %w {strides = array<i64: 2, 2>, padding = "same", groups = 2 : i64, input_shape = array<i64: 1, 4, 8, 8>} : tensor<1x4x8x8xf16>
  %1 = graph.conv2d_grad_weight %x, %dy {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 0, 0>, groups = 2 : i64, kernel = array<i64: 3, 3>} : tensor<6x2x3x3xf16>
  func.return %0, %1 : tensor<1x4x8x8xf16>, tensor<6x2x3x3xf16>
}

// Pooling and reduction gradients take the forward op's attributes.
// CHECK-LABEL: func.func @window_and_reduce_grads
// CHECK-NEXT:    %0 = graph.pool2d_grad %x, %dp {kind = "max", kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = "valid"} : tensor<1x4x8x8xf32>
// CHECK-NEXT:    %1 = graph.pool2d_grad %x, %dp {kind = "avg", kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 0, 0>} : tensor<1x4x8x8xf32>
// CHECK-NEXT:    %2 = graph.reduce_grad %x, %dr {kind = "max", axes = array<i64: 1>, keepdims = false} : tensor<1x4x8x8xf32>
// CHECK-NEXT:    func.return %0, %1, %2 : tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>
func.func @window_and_reduce_grads(%x: tensor<1x4x8x8xf32>, %dp: tensor<1x4x4x4xf32>, %dr: tensor<1x8x8xf32>) -> (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) {
  %0 = graph.pool2d_grad %x, %dp {kind = "max", kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = "valid"} : tensor<1x4x8x8xf32>
  %1 = graph.pool2d_grad %x, %dp {kind = "avg", kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 0, 0>} : tensor<1x4x8x8xf32>
  %2 = graph.reduce_grad %x, %dr {kind = "max", axes = array<i64: 1>, keepdims = false} : tensor<1x4x8x8xf32>
  func.return %0, %1, %2 : tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>
}

// CHECK-LABEL: func.func @embedding_grad
// CHECK-NEXT:    %0 = graph.scatter_add %ids, %updates {rows = 10 : i64} : tensor<10x4xbf16>
// CHECK-NEXT:    func.return %0 : tensor<10x4xbf16>
func.func @embedding_grad(%ids: tensor<2x3xi32>, %updates: tensor<2x3x4xbf16>) -> tensor<10x4xbf16> {
  %0 = graph.scatter_add %ids, %updates {rows = 10 : i64} : tensor<10x4xbf16>
  func.return %0 : tensor<10x4xbf16>
}

// The multi-result ops print their result types comma-separated.
// CHECK-LABEL: func.func @normalization
// CHECK-NEXT:    %0, %1, %2 = graph.layernorm_grad %x, %g, %x {axis = 1 : i64, epsilon = 1.000000e-05 : f64} : tensor<2x3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>
// CHECK-NEXT:    %3, %4, %5 = graph.batchnorm_train %x, %c, %c {epsilon = 1.000000e-03 : f64} : tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>
// CHECK-NEXT:    %6, %7, %8 = graph.batchnorm_grad %x, %c, %3 {epsilon = 1.000000e-03 : f64} : tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>
// CHECK-NEXT:    func.return %0, %1, %2, %4, %5, %6, %7, %8 : tensor<2x3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>
func.func @normalization(%x: tensor<2x3x4xf32>, %g: tensor<3x4xf32> {graph.param}, %c: tensor<3xf32> {graph.param}) -> (tensor<2x3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>) {
  %0, %1, %2 = graph.layernorm_grad %x, %g, %x {axis = 1 : i64, epsilon = 1.000000e-05 : f64} : tensor<2x3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>
  %3, %4, %5 = graph.batchnorm_train %x, %c, %c {epsilon = 1.000000e-03 : f64} : tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>
  %6, %7, %8 = graph.batchnorm_grad %x, %c, %3 {epsilon = 1.000000e-03 : f64} : tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>
  func.return %0, %1, %2, %4, %5, %6, %7, %8 : tensor<2x3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>
}

// CHECK-LABEL: func.func @loss
// CHECK-NEXT:    %0 = graph.softmax_cross_entropy %logits, %labels : tensor<2x3xf32>
// CHECK-NEXT:    %1 = graph.softmax_cross_entropy_grad %logits, %labels, %dloss : tensor<2x3x5xf32>
// CHECK-NEXT:    func.return %0, %1 : tensor<2x3xf32>, tensor<2x3x5xf32>
func.func @loss(%logits: tensor<2x3x5xf32>, %labels: tensor<2x3xi64>, %dloss: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3x5xf32>) {
  %0 = graph.softmax_cross_entropy %logits, %labels : tensor<2x3xf32>
  %1 = graph.softmax_cross_entropy_grad %logits, %labels, %dloss : tensor<2x3x5xf32>
  func.return %0, %1 : tensor<2x3xf32>, tensor<2x3x5xf32>
}

// CHECK-LABEL: func.func @optimizer
// CHECK-NEXT:    %0, %1, %2 = graph.adam_update %p, %g, %m, %v, %step {lr = 1.000000e-03 : f64, beta1 = 9.000000e-01 : f64, beta2 = 0.000000e+00 : f64, epsilon = 1.000000e-08 : f64} : tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>
// CHECK-NEXT:    func.return %0, %1, %2 : tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>
func.func @optimizer(%p: tensor<4x3xf32> {graph.param}, %g: tensor<4x3xf32>, %m: tensor<4x3xf32>, %v: tensor<4x3xf32>, %step: tensor<f32>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>) {
  %0, %1, %2 = graph.adam_update %p, %g, %m, %v, %step {lr = 1.000000e-03 : f64, beta1 = 9.000000e-01 : f64, beta2 = 0.000000e+00 : f64, epsilon = 1.000000e-08 : f64} : tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>
  func.return %0, %1, %2 : tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>
}
