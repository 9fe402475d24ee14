// A `parallel.mesh` that names no device grid, with the verifier's message.
// RUN: %tasoc opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: {{^}}'parallel.mesh': mesh @m repeats axis 'x'
parallel.mesh @m ["x" = 2, "y" = 2, "x" = 2]

// -----

// CHECK: {{^}}'parallel.mesh': mesh @m has axis 'y' of size 0 < 1
parallel.mesh @m ["x" = 2, "y" = 0]

// -----

// CHECK: {{^}}'parallel.mesh': mesh @m has 4 positions but lists 3 devices
parallel.mesh @m ["x" = 2, "y" = 2] devices [0, 1, 2]

// -----

// CHECK: {{^}}'parallel.mesh': mesh @m lists a device twice or below 0
parallel.mesh @m ["x" = 2] devices [1, 1]

// -----

// CHECK: {{^}}'parallel.mesh': axes and shape differ in length
"parallel.mesh"() <{sym_name = "m", axes = ["x", "y"], shape = array<i64: 2>}> : () -> ()

// -----

// CHECK: Redefinition of symbol "m"
parallel.mesh @m ["x" = 2]
parallel.mesh @m ["y" = 2]
