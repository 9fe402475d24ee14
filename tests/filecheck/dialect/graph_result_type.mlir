// Through the driver, a result type the op does not compute is the verifier's one
// line at the op's file:line:col, exit status 1, no traceback.
// RUN: not %tasoc opt %s 2>&1 | filecheck %s

// CHECK-NOT:  Traceback
// CHECK:      {{^}}tasoc: error: {{.*}}graph_result_type.mlir:[[# @LINE + 3]]:3: 'graph.matmul': result types 2x4xf32 do not match the inferred 2x5xf32{{$}}
// CHECK-NOT:  {{.}}
func.func @main(%a: tensor<2x3xf32>, %b: tensor<3x5xf32>) -> tensor<2x4xf32> {
  %0 = graph.matmul %a, %b : tensor<2x4xf32>
  func.return %0 : tensor<2x4xf32>
}
