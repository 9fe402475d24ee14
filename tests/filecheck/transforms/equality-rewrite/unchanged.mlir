// The input comes back op for op when no graph the rules reach is cheaper, and when
// no rule matches at all (the report then carries a note).
// RUN: %tasoc opt %s --split-input-file -p 'equality-rewrite{retime=0}' | filecheck %s
// RUN: %tasoc opt %s --split-input-file -p 'equality-rewrite{retime=0 search=backtrack}' | filecheck %s

// Rules match the transposes and the relu, but every equal graph costs as much.
func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = graph.transpose %x {perm = array<i64: 1, 0>} : tensor<8x4xf32>
  %1 = graph.transpose %0 {perm = array<i64: 1, 0>} : tensor<4x8xf32>
  %2 = graph.relu %1 : tensor<4x8xf32>
  func.return %2 : tensor<4x8xf32>
}

// CHECK:      func.func @main(%x: tensor<4x8xf32>)
// CHECK-NEXT: %0 = graph.transpose %x {perm = array<i64: 1, 0>} {{.*}}tensor<8x4xf32>
// CHECK-NEXT: %1 = graph.transpose %0 {perm = array<i64: 1, 0>} {{.*}}tensor<4x8xf32>
// CHECK-NEXT: %2 = graph.relu %1 {{.*}}tensor<4x8xf32>
// CHECK-NEXT: func.return %2

// -----

// No rule mentions softmax.
func.func @main(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %0 = graph.softmax %x {axis = 1 : i64} : tensor<2x8xf32>
  func.return %0 : tensor<2x8xf32>
}

// CHECK:      func.func @main(%x: tensor<2x8xf32>)
// CHECK-NEXT: %0 = graph.softmax %x {axis = 1 : i64} {{.*}}tensor<2x8xf32>
// CHECK-NEXT: func.return %0
