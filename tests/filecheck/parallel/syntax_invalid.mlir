// Malformed `parallel` text, each case with the parser's message
// (`--parsing-diagnostics` prints it and goes on with the next case); and the driver
// without it stops at the first with one line naming the place, never a traceback.
// RUN: %tasoc opt %s --split-input-file --parsing-diagnostics | filecheck %s
// RUN: not %tasoc opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=ONE-LINE

// ONE-LINE: {{^}}tasoc: error: {{.*}}syntax_invalid.mlir:11:81: Expected 'unreduced'
// ONE-LINE-NOT: Traceback
// CHECK: Expected 'unreduced'
parallel.mesh @m ["x" = 2]
func.func @replicated_keyword(%x: tensor<8xf32, #parallel.sharding<@m, [["x"]], replicated = ["x"]>>) {
  func.return
}

// -----

// CHECK: string literal expected
parallel.mesh @m ["x" = 2]
func.func @bare_axis(%x: tensor<8xf32, #parallel.sharding<@m, [[x]]>>) {
  func.return
}

// -----

// CHECK: Expected integer literal
parallel.mesh @m ["x" = -2]

// -----

// CHECK: expect symbol name
parallel.mesh ["x" = 2]
