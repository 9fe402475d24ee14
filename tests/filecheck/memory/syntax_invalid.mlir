// Malformed `memory` text, each case with the parser's message; without
// `--parsing-diagnostics` the driver stops at the first with one line naming the place.
// RUN: %tasoc opt %s --split-input-file --parsing-diagnostics | filecheck %s
// RUN: not %tasoc opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=ONE-LINE

// Device memory is the default: one spelling per type.
// ONE-LINE: {{^}}tasoc: error: {{.*}}syntax_invalid.mlir:10:49: device memory is the default: write the tensor type without an encoding
// ONE-LINE-NOT: Traceback
// CHECK: device memory is the default: write the tensor type without an encoding
func.func @main(%x: tensor<4xf32, #memory.space<device>>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}

// -----

// CHECK: unknown memory space 'disk' (expected host)
func.func @main(%x: tensor<4xf32, #memory.space<disk>>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}

// -----

// A pool class needs a size and an object count.
// CHECK: Expected 'x'
module attributes {memory.pool = #memory.pool<[4096]>} {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    func.return %x : tensor<4xf32>
  }
}

// -----

// A swap-in of a value defined later: the schedule is a topological order.
// CHECK: use of undefined value %h (graph ops take operand types from their definitions, which must come first)
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %d = memory.swap_in %h : tensor<4xf32>
  %h = memory.swap_out %x : tensor<4xf32, #memory.space<host>>
  func.return %d : tensor<4xf32>
}
