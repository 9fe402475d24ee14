// A verifier failure is one line on stderr at the op's file:line:col, exit status 1,
// no traceback. With `--split-input-file` the line is still the line in the whole file.
// RUN: not %tasoc opt %s 2>&1 | filecheck %s
// RUN: not %tasoc opt %s --split-input-file -o %t 2>&1 | filecheck %s

func.func @valid(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = graph.relu %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

// CHECK-NOT:  Traceback
// CHECK:      {{^}}tasoc: error: {{.*}}errors.mlir:[[# @LINE + 3]]:3: 'graph.matmul': contraction sizes differ: 2x3 @ 4x5 (3 != 4){{$}}
// CHECK-NOT:  {{.}}
func.func @invalid(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) -> tensor<2x5xf32> {
  %0 = graph.matmul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  func.return %0 : tensor<2x5xf32>
}
