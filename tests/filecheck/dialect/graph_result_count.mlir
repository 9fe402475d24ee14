// Through the driver, result types that do not match the results bound is one line
// at the op's file:line:col, exit status 1, no traceback.
// RUN: not %tasoc opt %s 2>&1 | filecheck %s

// CHECK-NOT:  Traceback
// CHECK:      {{^}}tasoc: error: {{.*}}graph_result_count.mlir:[[# @LINE + 3]]:3: Operation has 1 results, but was given 2 to bind.{{$}}
// CHECK-NOT:  {{.}}
func.func @main(%x: tensor<2x4xf32>) -> tensor<2x2xf32> {
  %0, %1 = graph.split %x {axis = 1 : i64, sizes = array<i64: 2, 2>} : tensor<2x2xf32>
  func.return %0 : tensor<2x2xf32>
}
