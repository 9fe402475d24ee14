// Text the `graph` ops' parser rejects, and a result type only the verifier can
// catch, each with its message. `--parsing-diagnostics` and `--verify-diagnostics`
// print the message of each case and go on with the next.
// RUN: %tasoc opt %s --split-input-file --parsing-diagnostics --verify-diagnostics | filecheck %s

// A use before the definition: the short form has no operand type to go on.
// CHECK: use of undefined value %b (graph ops take operand types from their definitions, which must come first)
func.func @use_before_definition(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = graph.relu %b : tensor<2x3xf32>
  %b = graph.relu %a : tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

// CHECK: use of undefined value %0#2 (graph ops take operand types from their definitions, which must come first)
func.func @result_index_out_of_range(%a: tensor<2x4xf32>) -> tensor<2x2xf32> {
  %0:2 = graph.split %a {axis = 1 : i64, sizes = array<i64: 2, 2>} : tensor<2x2xf32>, tensor<2x2xf32>
  %1 = graph.relu %0#2 : tensor<2x2xf32>
  func.return %1 : tensor<2x2xf32>
}

// -----

// CHECK: Operation has 2 results, but was given 1 to bind.
func.func @too_many_result_types(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = graph.relu %a : tensor<2x3xf32>, tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

// CHECK: Operation has 1 results, but was given 2 to bind.
func.func @too_few_result_types(%a: tensor<2x4xf32>) -> tensor<2x2xf32> {
  %0, %1 = graph.split %a {axis = 1 : i64, sizes = array<i64: 2, 2>} : tensor<2x2xf32>
  func.return %0 : tensor<2x2xf32>
}

// -----

// CHECK: Expected ':'
func.func @no_result_type(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = graph.relu %a
  func.return %0 : tensor<2x3xf32>
}

// -----

// CHECK: 'graph.add' has 2 operand(s) but its functional type lists 1
func.func @older_form_operand_count(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = graph.add %a, %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

// CHECK: operand is used with type tensor<2x4xf32>, but has been previously used or defined with type tensor<2x3xf32>
func.func @older_form_operand_type(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = graph.relu %a : (tensor<2x4xf32>) -> tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

// A result type that parses but is not what the op computes.
// CHECK: {{^}}'graph.relu': result types 3x2xf32 do not match the inferred 2x3xf32
func.func @wrong_result_type(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %0 = graph.relu %a : tensor<3x2xf32>
  func.return %0 : tensor<3x2xf32>
}
