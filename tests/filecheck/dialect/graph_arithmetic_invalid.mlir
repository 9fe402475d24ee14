// Invalid uses of the arithmetic, comparison, logic, cast, broadcast and gather ops,
// with the verifier's one-line message (the rule `tasoc.ir.shapes` states for the op).
// RUN: %tasoc opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: {{^}}'graph.exp': operand must have a float element type, got i32
func.func @exp_of_integers(%x: tensor<3xi32>) -> tensor<3xi32> {
  %0 = graph.exp %x : tensor<3xi32>
  func.return %0 : tensor<3xi32>
}

// -----

// CHECK: {{^}}'graph.sub': operands must be a number (float or integer), got i1
func.func @sub_of_booleans(%x: tensor<3xi1>) -> tensor<3xi1> {
  %0 = graph.sub %x, %x : tensor<3xi1>
  func.return %0 : tensor<3xi1>
}

// -----

// CHECK: {{^}}'graph.compare': element types differ: f32, f64
func.func @compare_types(%a: tensor<3xf32>, %b: tensor<3xf64>) -> tensor<3xi1> {
  %0 = graph.compare %a, %b {predicate = "lt"} : tensor<3xi1>
  func.return %0 : tensor<3xi1>
}

// -----

// CHECK: {{^}}'graph.compare': predicate must be 'eq', 'ne', 'lt', 'le', 'gt' or 'ge', got 'less'
func.func @compare_predicate(%a: tensor<3xf32>) -> tensor<3xi1> {
  %0 = graph.compare %a, %a {predicate = "less"} : tensor<3xi1>
  func.return %0 : tensor<3xi1>
}

// -----

// CHECK: {{^}}'graph.where': condition must be i1 (boolean), got f32
func.func @where_condition(%c: tensor<3xf32>, %a: tensor<3xf32>) -> tensor<3xf32> {
  %0 = graph.where %c, %a, %a : tensor<3xf32>
  func.return %0 : tensor<3xf32>
}

// -----

// CHECK: {{^}}'graph.and': rhs must be i1 (boolean), got i8
func.func @and_of_integers(%a: tensor<3xi1>, %b: tensor<3xi8>) -> tensor<3xi1> {
  %0 = graph.and %a, %b : tensor<3xi1>
  func.return %0 : tensor<3xi1>
}

// -----

// CHECK: {{^}}'graph.cast': attribute 'to' must be an element type (f32, f16, bf16, f64, i32, i64, i8, i16, ui8, i1), got "float"
func.func @cast_target(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = graph.cast %x {to = "float"} : tensor<3xf32>
  func.return %0 : tensor<3xf32>
}

// -----

// CHECK: {{^}}'graph.broadcast': cannot broadcast 2x3 to 3x3
func.func @broadcast_shape(%x: tensor<2x3xf32>) -> tensor<3x3xf32> {
  %0 = graph.broadcast %x {shape = array<i64: 3, 3>} : tensor<3x3xf32>
  func.return %0 : tensor<3x3xf32>
}

// -----

// CHECK: {{^}}'graph.gather': indices must be i32 or i64, got f32
func.func @gather_indices(%x: tensor<2x3xf32>, %i: tensor<4xf32>) -> tensor<2x4xf32> {
  %0 = graph.gather %x, %i {axis = 1 : i64} : tensor<2x4xf32>
  func.return %0 : tensor<2x4xf32>
}

// -----

// CHECK: {{^}}'graph.gather': axis 2 out of range for rank 2
func.func @gather_axis(%x: tensor<2x3xf32>, %i: tensor<4xi64>) -> tensor<2x4xf32> {
  %0 = graph.gather %x, %i {axis = 2 : i64} : tensor<2x4xf32>
  func.return %0 : tensor<2x4xf32>
}

// -----

// CHECK: {{^}}'graph.reduce': kind must be 'sum', 'mean', 'max', 'min' or 'prod', got 'any'
func.func @reduce_kind(%x: tensor<2x3xf32>) -> tensor<2xf32> {
  %0 = graph.reduce %x {kind = "any", axes = array<i64: 1>, keepdims = false} : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

// CHECK: {{^}}'graph.reduce_grad': kind must be 'sum', 'mean' or 'max', got 'prod'
func.func @reduce_grad_kind(%x: tensor<2x3xf32>, %dy: tensor<2xf32>) -> tensor<2x3xf32> {
  %0 = graph.reduce_grad %x, %dy {kind = "prod", axes = array<i64: 1>, keepdims = false} : tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}
