// The older text form, with operand and result types as a functional type, still
// parses (files written before the short form), and prints in the short form.
// RUN: %tasoc opt %s | filecheck %s

// CHECK-LABEL: func.func @older_form
// CHECK-NEXT:    %0 = graph.matmul %a, %b : tensor<2x5xf32>
// CHECK-NEXT:    %1, %2 = graph.split %0 {axis = 1 : i64, sizes = array<i64: 2, 3>} : tensor<2x2xf32>, tensor<2x3xf32>
// CHECK-NEXT:    %3 = graph.concat %2, %1 {axis = 1 : i64} : tensor<2x5xf32>
// CHECK-NEXT:    %4 = graph.ones {shape = array<i64: 2, 5>, dtype = f32} : tensor<2x5xf32>
// CHECK-NEXT:    %5 = graph.add %3, %4 : tensor<2x5xf32>
func.func @older_form(%a: tensor<2x3xf32>, %b: tensor<3x5xf32>) -> tensor<2x5xf32> {
  %0 = graph.matmul %a, %b : (tensor<2x3xf32>, tensor<3x5xf32>) -> tensor<2x5xf32>
  %1, %2 = graph.split %0 {axis = 1 : i64, sizes = array<i64: 2, 3>} : (tensor<2x5xf32>) -> (tensor<2x2xf32>, tensor<2x3xf32>)
  %3 = graph.concat %2, %1 {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x2xf32>) -> tensor<2x5xf32>
  %4 = graph.ones {shape = array<i64: 2, 5>, dtype = f32} : () -> tensor<2x5xf32>
  %5 = graph.add %3, %4 : tensor<2x5xf32>
  func.return %5 : tensor<2x5xf32>
}
