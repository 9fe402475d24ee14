// Invalid uses of the GNN ops, with the verifier's message.
// RUN: %tasoc opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: {{^}}'graph.aggregate': reduce must be 'sum', 'mean' or 'max', got 'min'
func.func @bad_reduce(%x: tensor<5x8xf32>, %e: tensor<2x3xi32>) -> tensor<4x8xf32> {
  %0 = graph.aggregate %x, %e, %e {reduce = "min", block_rows = 2 : i64} : tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

// CHECK: {{^}}'graph.aggregate': src and dst must be [blocks, edges] of one shape, got 2x3 and 3x2
func.func @edges_differ(%x: tensor<5x8xf32>, %s: tensor<2x3xi32>, %d: tensor<3x2xi32>) -> tensor<4x8xf32> {
  %0 = graph.aggregate %x, %s, %d {reduce = "sum", block_rows = 2 : i64} : tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

// CHECK: {{^}}'graph.aggregate_weight_grad': the weights of a max aggregation are not differentiated
func.func @max_weights(%x: tensor<5x8xf32>, %e: tensor<2x3xi32>, %dy: tensor<4x8xf32>) -> tensor<2x3xf32> {
  %0 = graph.aggregate_weight_grad %x, %e, %e, %dy {reduce = "max", block_rows = 2 : i64} : tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}
