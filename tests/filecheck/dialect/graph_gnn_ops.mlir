// The GNN ops (tasoc/ir/ops/gnn.py, docs/ir.md): edge arrays [blocks, edges], targets
// local to their block (-1: padding), parse, verify and print back; a second round trip
// prints the same text. Edge constants parse from hex (as large ones print) or lists.
// RUN: %tasoc opt %s | filecheck %s
// RUN: %tasoc opt %s | %tasoc opt - | filecheck %s

// CHECK-LABEL: func.func @aggregations
// CHECK-NEXT:    %src = graph.constant {value = dense<{{\[\[}}0, 4, 0], [3, 2, 0]]> : tensor<2x3xi32>} : tensor<2x3xi32>
// CHECK-NEXT:    %dst = graph.constant {value = dense<{{\[\[}}0, 1, -1], [0, 0, 1]]> : tensor<2x3xi32>} : tensor<2x3xi32>
// CHECK-NEXT:    %0 = graph.aggregate %x, %src, %dst {reduce = "mean", block_rows = 2 : i64} : tensor<4x8xf32>
// CHECK-NEXT:    %1 = graph.aggregate %x, %src, %dst, %w {reduce = "sum", block_rows = 2 : i64} : tensor<4x8xf32>
// CHECK-NEXT:    %2 = graph.aggregate_grad %x, %src, %dst, %w, %1 {reduce = "max", block_rows = 2 : i64} : tensor<5x8xf32>
// CHECK-NEXT:    %3 = graph.aggregate_weight_grad %x, %src, %dst, %1 {reduce = "sum", block_rows = 2 : i64} : tensor<2x3xf32>
// CHECK-NEXT:    %4 = graph.edge_softmax %w, %dst {block_rows = 2 : i64} : tensor<2x3xf32>
// CHECK-NEXT:    %5 = graph.edge_softmax_grad %4, %dst, %3 {block_rows = 2 : i64} : tensor<2x3xf32>
// CHECK-NEXT:    %6 = graph.edge_scores %a, %b, %src, %dst {block_rows = 2 : i64} : tensor<2x3xf32>
func.func @aggregations(%x: tensor<5x8xf32>, %w: tensor<2x3xf32>, %a: tensor<5x1xf32>, %b: tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<5x8xf32>, tensor<2x3xf32>) {
  %src = graph.constant {value = dense<"0x000000000400000000000000030000000200000000000000"> : tensor<2x3xi32>} : tensor<2x3xi32>
  %dst = graph.constant {value = dense<[[0, 1, -1], [0, 0, 1]]> : tensor<2x3xi32>} : tensor<2x3xi32>
  %0 = graph.aggregate %x, %src, %dst {reduce = "mean", block_rows = 2 : i64} : tensor<4x8xf32>
  %1 = graph.aggregate %x, %src, %dst, %w {reduce = "sum", block_rows = 2 : i64} : tensor<4x8xf32>
  %2 = graph.aggregate_grad %x, %src, %dst, %w, %1 {reduce = "max", block_rows = 2 : i64} : tensor<5x8xf32>
  %3 = graph.aggregate_weight_grad %x, %src, %dst, %1 {reduce = "sum", block_rows = 2 : i64} : tensor<2x3xf32>
  %4 = graph.edge_softmax %w, %dst {block_rows = 2 : i64} : tensor<2x3xf32>
  %5 = graph.edge_softmax_grad %4, %dst, %3 {block_rows = 2 : i64} : tensor<2x3xf32>
  %6 = graph.edge_scores %a, %b, %src, %dst {block_rows = 2 : i64} : tensor<2x3xf32>
  %7 = graph.add %0, %1 : tensor<4x8xf32>
  %8 = graph.add %5, %6 : tensor<2x3xf32>
  func.return %7, %2, %8 : tensor<4x8xf32>, tensor<5x8xf32>, tensor<2x3xf32>
}
