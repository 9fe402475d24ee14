// Invalid uses of the backward `graph` ops, the losses and the Adam update, with the
// verifier's message (the rule `tasoc.ir.shapes` states for the op; a backward op's
// rule runs its forward op's rule, whose message it quotes).
// RUN: %tasoc opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: {{^}}'graph.relu_grad': dy must have shape 2x3, got 3x2
func.func @relu_grad(%y: tensor<2x3xf32>, %dy: tensor<3x2xf32>) -> tensor<2x3xf32> {
  %0 = graph.relu_grad %y, %dy : tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

// CHECK: {{^}}'graph.gelu_grad': operand must have a float element type, got i32
func.func @gelu_grad(%x: tensor<2x3xi32>, %dy: tensor<2x3xi32>) -> tensor<2x3xi32> {
  %0 = graph.gelu_grad %x, %dy : tensor<2x3xi32>
  func.return %0 : tensor<2x3xi32>
}

// -----

// CHECK: {{^}}'graph.conv2d_grad_input': dy must have the forward conv2d's result shape 1x6x8x8, got 1x6x4x4
func.func @conv2d_grad_input_dy(%w: tensor<6x4x3x3xf32>, %dy: tensor<1x6x4x4xf32>) -> tensor<1x4x8x8xf32> {
  %0 = graph.conv2d_grad_input %dy, %w {strides = array<i64: 1, 1>, padding = "same", groups = 1 : i64, input_shape = array<i64: 1, 4, 8, 8>} : tensor<1x4x8x8xf32>
  func.return %0 : tensor<1x4x8x8xf32>
}

// -----

// CHECK: {{^}}'graph.conv2d_grad_input': forward conv2d: groups=3 must divide input channels 4 and output channels 6
func.func @conv2d_grad_input_groups(%w: tensor<6x4x3x3xf32>, %dy: tensor<1x6x8x8xf32>) -> tensor<1x4x8x8xf32> {
  %0 = graph.conv2d_grad_input %dy, %w {strides = array<i64: 1, 1>, padding = "same", groups = 3 : i64, input_shape = array<i64: 1, 4, 8, 8>} : tensor<1x4x8x8xf32>
  func.return %0 : tensor<1x4x8x8xf32>
}

// -----

// CHECK: {{^}}'graph.conv2d_grad_weight': dy must have the forward conv2d's result shape 1x6x4x4, got 1x6x6x6
func.func @conv2d_grad_weight_kernel(%x: tensor<1x4x8x8xf32>, %dy: tensor<1x6x6x6xf32>) -> tensor<6x4x5x5xf32> {
  %0 = graph.conv2d_grad_weight %x, %dy {strides = array<i64: 1, 1>, padding = "valid", groups = 1 : i64, kernel = array<i64: 5, 5>} : tensor<6x4x5x5xf32>
  func.return %0 : tensor<6x4x5x5xf32>
}

// -----

// CHECK: {{^}}'graph.pool2d_grad': forward pool2d: kind must be 'avg' or 'max', got 'min'
func.func @pool2d_grad(%x: tensor<1x4x8x8xf32>, %dy: tensor<1x4x4x4xf32>) -> tensor<1x4x8x8xf32> {
  %0 = graph.pool2d_grad %x, %dy {kind = "min", kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = "valid"} : tensor<1x4x8x8xf32>
  func.return %0 : tensor<1x4x8x8xf32>
}

// -----

// CHECK: {{^}}'graph.reduce_grad': dy must have the forward reduce's result shape 2x1, got 2
func.func @reduce_grad(%x: tensor<2x3xf32>, %dy: tensor<2xf32>) -> tensor<2x3xf32> {
  %0 = graph.reduce_grad %x, %dy {kind = "sum", axes = array<i64: 1>, keepdims = true} : tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

// CHECK: {{^}}'graph.scatter_add': ids must be i32 or i64, got f32
func.func @scatter_add_ids(%ids: tensor<2x3xf32>, %updates: tensor<2x3x4xf32>) -> tensor<10x4xf32> {
  %0 = graph.scatter_add %ids, %updates {rows = 10 : i64} : tensor<10x4xf32>
  func.return %0 : tensor<10x4xf32>
}

// -----

// CHECK: {{^}}'graph.scatter_add': updates must have the shape of ids (2x3) plus a feature axis, got 3x2x4
func.func @scatter_add_updates(%ids: tensor<2x3xi32>, %updates: tensor<3x2x4xf32>) -> tensor<10x4xf32> {
  %0 = graph.scatter_add %ids, %updates {rows = 10 : i64} : tensor<10x4xf32>
  func.return %0 : tensor<10x4xf32>
}

// -----

// CHECK: {{^}}'graph.layernorm_grad': forward layernorm: gamma must have shape 8, got 4
func.func @layernorm_grad(%x: tensor<2x8xf32>, %g: tensor<4xf32>, %dy: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<4xf32>, tensor<4xf32>) {
  %0, %1, %2 = graph.layernorm_grad %x, %g, %dy {axis = -1 : i64, epsilon = 1.000000e-05 : f64} : tensor<2x8xf32>, tensor<4xf32>, tensor<4xf32>
  func.return %0, %1, %2 : tensor<2x8xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// CHECK: {{^}}'graph.batchnorm_train': result types 2x3x4xf32, 4xf32, 4xf32 do not match the inferred 2x3x4xf32, 3xf32, 3xf32
func.func @batchnorm_train(%x: tensor<2x3x4xf32>, %c: tensor<3xf32>) -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %0, %1, %2 = graph.batchnorm_train %x, %c, %c {epsilon = 1.000000e-05 : f64} : tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>
  func.return %0, %1, %2 : tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// CHECK: {{^}}'graph.batchnorm_grad': dy must have shape 2x3x4, got 2x3
func.func @batchnorm_grad(%x: tensor<2x3x4xf32>, %c: tensor<3xf32>, %dy: tensor<2x3xf32>) -> (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>) {
  %0, %1, %2 = graph.batchnorm_grad %x, %c, %dy {epsilon = 1.000000e-05 : f64} : tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>
  func.return %0, %1, %2 : tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>
}

// -----

// CHECK: {{^}}'graph.softmax_cross_entropy': labels must have shape 4, got 4x10
func.func @cross_entropy_labels(%logits: tensor<4x10xf32>, %labels: tensor<4x10xi64>) -> tensor<4xf32> {
  %0 = graph.softmax_cross_entropy %logits, %labels : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// CHECK: {{^}}'graph.softmax_cross_entropy': logits must have a float element type, got i32
func.func @cross_entropy_logits(%logits: tensor<4x10xi32>, %labels: tensor<4xi32>) -> tensor<4xi32> {
  %0 = graph.softmax_cross_entropy %logits, %labels : tensor<4xi32>
  func.return %0 : tensor<4xi32>
}

// -----

// CHECK: {{^}}'graph.softmax_cross_entropy_grad': dloss must have the forward softmax_cross_entropy's result shape 4, got 4x10
func.func @cross_entropy_grad(%logits: tensor<4x10xf32>, %labels: tensor<4xi32>, %dloss: tensor<4x10xf32>) -> tensor<4x10xf32> {
  %0 = graph.softmax_cross_entropy_grad %logits, %labels, %dloss : tensor<4x10xf32>
  func.return %0 : tensor<4x10xf32>
}

// -----

// CHECK: {{^}}'graph.adam_update': lr must be a finite number > 0, got 0.0
func.func @adam_lr(%p: tensor<3xf32>, %step: tensor<f32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) {
  %0, %1, %2 = graph.adam_update %p, %p, %p, %p, %step {lr = 0.000000e+00 : f64, beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64, epsilon = 1.000000e-08 : f64} : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
  func.return %0, %1, %2 : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
}

// -----

// CHECK: {{^}}'graph.adam_update': beta2 must be a number in [0, 1), got 1.0
func.func @adam_beta(%p: tensor<3xf32>, %step: tensor<f32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) {
  %0, %1, %2 = graph.adam_update %p, %p, %p, %p, %step {lr = 1.000000e-03 : f64, beta1 = 9.000000e-01 : f64, beta2 = 1.000000e+00 : f64, epsilon = 1.000000e-08 : f64} : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
  func.return %0, %1, %2 : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
}

// -----

// CHECK: {{^}}'graph.adam_update': step must be a rank-0 f32 tensor, got 1xf32
func.func @adam_step(%p: tensor<3xf32>, %step: tensor<1xf32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) {
  %0, %1, %2 = graph.adam_update %p, %p, %p, %p, %step {lr = 1.000000e-03 : f64, beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64, epsilon = 1.000000e-08 : f64} : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
  func.return %0, %1, %2 : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
}

// -----

// CHECK: {{^}}'graph.adam_update': m must have shape 3, got 4
func.func @adam_moments(%p: tensor<3xf32>, %m: tensor<4xf32>, %step: tensor<f32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) {
  %0, %1, %2 = graph.adam_update %p, %p, %m, %p, %step {lr = 1.000000e-03 : f64, beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64, epsilon = 1.000000e-08 : f64} : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
  func.return %0, %1, %2 : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
}
