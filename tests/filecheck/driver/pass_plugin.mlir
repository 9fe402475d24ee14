// A user's pass loaded from a file: examples/my_passes.py's fold-transposes
// (docs/custom-pass.md), one case per function.
// RUN: %tasoc opt %s --split-input-file --load-pass-plugin %S/../../../examples/my_passes.py \
// RUN:   -p fold-transposes | filecheck %s

// Two transposes that cancel: the relu reads the argument.
func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = graph.transpose %x {perm = array<i64: 1, 0>} : tensor<3x2xf32>
  %1 = graph.transpose %0 {perm = array<i64: 1, 0>} : tensor<2x3xf32>
  %2 = graph.relu %1 : tensor<2x3xf32>
  func.return %2 : tensor<2x3xf32>
}
// CHECK:      func.func @main(%x: tensor<2x3xf32>)
// CHECK-NEXT:   %0 = graph.relu %x {{.*}}tensor<2x3xf32>
// CHECK-NEXT:   func.return %0

// -----

// Two that do not cancel become one, with the composed permutation.
func.func @main(%x: tensor<2x3x4xf32>) -> tensor<3x4x2xf32> {
  %0 = graph.transpose %x {perm = array<i64: 1, 0, 2>} : tensor<3x2x4xf32>
  %1 = graph.transpose %0 {perm = array<i64: 0, 2, 1>} : tensor<3x4x2xf32>
  func.return %1 : tensor<3x4x2xf32>
}
// CHECK:      func.func @main(%x: tensor<2x3x4xf32>)
// CHECK-NEXT:   %0 = graph.transpose %x {perm = array<i64: 1, 2, 0>} {{.*}}tensor<3x4x2xf32>
// CHECK-NEXT:   func.return %0

// -----

// A chain of three folds to one.
func.func @main(%x: tensor<2x3x4xf32>) -> tensor<4x2x3xf32> {
  %0 = graph.transpose %x {perm = array<i64: 1, 2, 0>} : tensor<3x4x2xf32>
  %1 = graph.transpose %0 {perm = array<i64: 1, 2, 0>} : tensor<4x2x3xf32>
  %2 = graph.transpose %1 {perm = array<i64: 1, 2, 0>} : tensor<2x3x4xf32>
  %3 = graph.transpose %2 {perm = array<i64: 2, 0, 1>} : tensor<4x2x3xf32>
  func.return %3 : tensor<4x2x3xf32>
}
// CHECK:      func.func @main(%x: tensor<2x3x4xf32>)
// CHECK-NEXT:   %0 = graph.transpose %x {perm = array<i64: 2, 0, 1>} {{.*}}tensor<4x2x3xf32>
// CHECK-NEXT:   func.return %0

// -----

// A transpose of anything else stays.
func.func @main(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %0 = graph.relu %x : tensor<2x3xf32>
  %1 = graph.transpose %0 {perm = array<i64: 1, 0>} : tensor<3x2xf32>
  func.return %1 : tensor<3x2xf32>
}
// CHECK:      func.func @main(%x: tensor<2x3xf32>)
// CHECK-NEXT:   %0 = graph.relu %x
// CHECK-NEXT:   %1 = graph.transpose %0 {perm = array<i64: 1, 0>} {{.*}}tensor<3x2xf32>
// CHECK-NEXT:   func.return %1
