// Through the driver, a use of an undefined value is one line at its file:line:col,
// exit status 1, no traceback.
// RUN: not %tasoc opt %s 2>&1 | filecheck %s

// CHECK-NOT:  Traceback
// CHECK:      {{^}}tasoc: error: {{.*}}graph_undefined_operand.mlir:[[# @LINE + 3]]:22: use of undefined value %y (graph ops take operand types from their definitions, which must come first){{$}}
// CHECK-NOT:  {{.}}
func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = graph.add %x, %y : tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}
