// A `#parallel.sharding` that does not fit its mesh or its tensor, with the verifier's
// message (xdsl-opt's `--verify-diagnostics` prints it and exits 0).
// RUN: %tasoc opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: {{^}}'graph.relu': no parallel.mesh @nowhere in the module
parallel.mesh @m ["d" = 4]
func.func @unknown_mesh(%x: tensor<8xf32, #parallel.sharding<@nowhere, [["d"]]>>) -> tensor<8xf32, #parallel.sharding<@nowhere, [["d"]]>> {
  %y = graph.relu %x : tensor<8xf32, #parallel.sharding<@nowhere, [["d"]]>>
  func.return %y : tensor<8xf32, #parallel.sharding<@nowhere, [["d"]]>>
}

// -----

// A constant takes the sharding it declares, which is checked the same way.
// CHECK: {{^}}'graph.ones': no parallel.mesh @q in the module
parallel.mesh @m ["x" = 2]
func.func @constant_unknown_mesh() -> tensor<8x4xf32, #parallel.sharding<@q, [["x"], []]>> {
  %y = graph.ones {shape = array<i64: 8, 4>, dtype = f32} : tensor<8x4xf32, #parallel.sharding<@q, [["x"], []]>>
  func.return %y : tensor<8x4xf32, #parallel.sharding<@q, [["x"], []]>>
}

// -----

// CHECK: {{^}}'graph.relu': mesh @m has no axis 'q' (axes: d)
parallel.mesh @m ["d" = 4]
func.func @unknown_axis(%x: tensor<8xf32, #parallel.sharding<@m, [["q"]]>>) -> tensor<8xf32, #parallel.sharding<@m, [["q"]]>> {
  %y = graph.relu %x : tensor<8xf32, #parallel.sharding<@m, [["q"]]>>
  func.return %y : tensor<8xf32, #parallel.sharding<@m, [["q"]]>>
}

// -----

// CHECK: {{^}}a mesh axis is used twice in #parallel.sharding<@m, [["d"], ["d"]]>
parallel.mesh @m ["d" = 4]
func.func @axis_on_two_dims(%x: tensor<8x8xf32, #parallel.sharding<@m, [["d"], ["d"]]>>) -> tensor<8x8xf32, #parallel.sharding<@m, [["d"], ["d"]]>> {
  func.return %x : tensor<8x8xf32, #parallel.sharding<@m, [["d"], ["d"]]>>
}

// -----

// CHECK: {{^}}a mesh axis is used twice in #parallel.sharding<@m, [["d"]], unreduced = ["d"]>
parallel.mesh @m ["d" = 4]
func.func @axis_split_and_unreduced(%x: tensor<8xf32, #parallel.sharding<@m, [["d"]], unreduced = ["d"]>>) -> tensor<8xf32, #parallel.sharding<@m, [["d"]], unreduced = ["d"]>> {
  func.return %x : tensor<8xf32, #parallel.sharding<@m, [["d"]], unreduced = ["d"]>>
}

// -----

// CHECK: {{^}}'graph.relu': dim 0 of size 6 does not split into 4 pieces (axes d) in #parallel.sharding<@m, [["d"]]>
parallel.mesh @m ["d" = 4]
func.func @not_dividing(%x: tensor<6xf32, #parallel.sharding<@m, [["d"]]>>) -> tensor<6xf32, #parallel.sharding<@m, [["d"]]>> {
  %y = graph.relu %x : tensor<6xf32, #parallel.sharding<@m, [["d"]]>>
  func.return %y : tensor<6xf32, #parallel.sharding<@m, [["d"]]>>
}

// -----

// CHECK: {{^}}'graph.relu': operand #0: sharding #parallel.sharding<@m, [["d"]]> has 1 dims for a tensor of rank 2
parallel.mesh @m ["d" = 4]
func.func @rank_mismatch(%x: tensor<8x4xf32, #parallel.sharding<@m, [["d"]]>>) -> tensor<8x4xf32, #parallel.sharding<@m, [["d"]]>> {
  %y = graph.relu %x : tensor<8x4xf32, #parallel.sharding<@m, [["d"]]>>
  func.return %y : tensor<8x4xf32, #parallel.sharding<@m, [["d"]]>>
}

// -----

// CHECK: {{^}}'parallel.all_gather': sharding #parallel.sharding<@m, [["x"]]> has 1 dims for a tensor of rank 2
parallel.mesh @m ["x" = 2]
func.func @collective_rank_mismatch(%a: tensor<8x4xf32, #parallel.sharding<@m, [["x"]]>>) -> tensor<8x4xf32, #parallel.sharding<@m, [[], []]>> {
  %y = parallel.all_gather %a : tensor<8x4xf32, #parallel.sharding<@m, [[], []]>>
  func.return %y : tensor<8x4xf32, #parallel.sharding<@m, [[], []]>>
}
