// `--print-op-generic` prints graph ops in MLIR's generic form, attributes as properties,
// and the generic form parses back to the same program.
// RUN: %tasoc opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC
// RUN: %tasoc opt %s --print-op-generic | %tasoc opt - | filecheck %s --check-prefix=CUSTOM
// RUN: %tasoc opt %s --print-op-generic | %tasoc opt - --print-op-generic | filecheck %s --check-prefix=GENERIC

func.func @main(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32> {graph.param}) -> (tensor<1x4x2x2xf32>, tensor<1x4x2x1xf32>) {
  %0 = graph.conv2d %x, %w {strides = array<i64: 2, 2>, padding = "same", activation = "relu", groups = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x4x4xf32>
  %1 = graph.pool2d %0 {kind = "avg", kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = "valid"} : (tensor<1x4x4x4xf32>) -> tensor<1x4x2x2xf32>
  %2, %3 = graph.split %1 {axis = 3 : i64, sizes = array<i64: 1, 1>} : (tensor<1x4x2x2xf32>) -> (tensor<1x4x2x1xf32>, tensor<1x4x2x1xf32>)
  %4 = graph.add %2, %3 : (tensor<1x4x2x1xf32>, tensor<1x4x2x1xf32>) -> tensor<1x4x2x1xf32>
  func.return %1, %4 : tensor<1x4x2x2xf32>, tensor<1x4x2x1xf32>
}

// GENERIC:      "builtin.module"() ({
// GENERIC-NEXT:   "func.func"() <{sym_name = "main", function_type = (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> (tensor<1x4x2x2xf32>, tensor<1x4x2x1xf32>), arg_attrs = [{}, {graph.param}]}> ({
// GENERIC-NEXT:   ^bb0(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>):
// GENERIC-NEXT:     %0 = "graph.conv2d"(%x, %w) <{strides = array<i64: 2, 2>, padding = "same", activation = "relu", groups = 1 : i64}> : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x4x4xf32>
// GENERIC-NEXT:     %1 = "graph.pool2d"(%0) <{kind = "avg", kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = "valid"}> : (tensor<1x4x4x4xf32>) -> tensor<1x4x2x2xf32>
// GENERIC-NEXT:     %2, %3 = "graph.split"(%1) <{axis = 3 : i64, sizes = array<i64: 1, 1>}> : (tensor<1x4x2x2xf32>) -> (tensor<1x4x2x1xf32>, tensor<1x4x2x1xf32>)
// GENERIC-NEXT:     %4 = "graph.add"(%2, %3) : (tensor<1x4x2x1xf32>, tensor<1x4x2x1xf32>) -> tensor<1x4x2x1xf32>
// GENERIC-NEXT:     "func.return"(%1, %4) : (tensor<1x4x2x2xf32>, tensor<1x4x2x1xf32>) -> ()

// CUSTOM:      func.func @main(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32> {graph.param})
// CUSTOM-NEXT:   %0 = graph.conv2d %x, %w {strides = array<i64: 2, 2>, padding = "same", activation = "relu", groups = 1 : i64} : tensor<1x4x4x4xf32>
// CUSTOM-NEXT:   %1 = graph.pool2d %0 {kind = "avg", kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = "valid"} : tensor<1x4x2x2xf32>
// CUSTOM-NEXT:   %2, %3 = graph.split %1 {axis = 3 : i64, sizes = array<i64: 1, 1>} : tensor<1x4x2x1xf32>, tensor<1x4x2x1xf32>
// CUSTOM-NEXT:   %4 = graph.add %2, %3 : tensor<1x4x2x1xf32>
// CUSTOM-NEXT:   func.return %1, %4 : tensor<1x4x2x2xf32>, tensor<1x4x2x1xf32>
