// The generic form of every `parallel` op and attribute parses back to the same
// program: printing generically, reading that back and printing custom gives the
// custom text again.
// RUN: %tasoc opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC
// RUN: %tasoc opt %s --print-op-generic | %tasoc opt - | filecheck %s

// GENERIC:      "parallel.mesh"() <{sym_name = "grid", axes = ["x", "y"], shape = array<i64: 2, 2>}> : () -> ()
// GENERIC-NEXT: "parallel.mesh"() <{sym_name = "group", axes = ["d"], shape = array<i64: 2>, devices = array<i64: 5, 4>}> : () -> ()
// GENERIC:      "parallel.all_reduce"(%y) : (tensor<16x4xf32, #parallel.sharding<@grid, [[], []], unreduced = ["x", "y"]>>) -> tensor<16x4xf32, #parallel.sharding<@grid, [[], []], unreduced = ["y"]>>
// GENERIC:      "parallel.replicate"

// CHECK:      parallel.mesh @grid ["x" = 2, "y" = 2]
// CHECK-NEXT: parallel.mesh @group ["d" = 2] devices [5, 4]
// CHECK:      %y = graph.matmul %x, %w : tensor<16x4xf32, #parallel.sharding<@grid, [[], []], unreduced = ["x", "y"]>>
// CHECK-NEXT: %r = parallel.all_reduce %y : tensor<16x4xf32, #parallel.sharding<@grid, [[], []], unreduced = ["y"]>>
// CHECK-NEXT: %s = parallel.reduce_scatter %r : tensor<16x4xf32, #parallel.sharding<@grid, [["y"], []]>>
// CHECK-NEXT: %t = parallel.all_to_all %s : tensor<16x4xf32, #parallel.sharding<@grid, [[], ["y"]]>>
// CHECK-NEXT: %u = parallel.all_slice %t : tensor<16x4xf32, #parallel.sharding<@grid, [["x"], ["y"]]>>
// CHECK-NEXT: %v = parallel.all_gather %u : tensor<16x4xf32, #parallel.sharding<@grid, [[], []]>>
// CHECK-NEXT: %c = parallel.replicate %v : tensor<16x4xf32, #parallel.sharding<@group, [["d"], []]>>
// CHECK-NEXT: func.return %c : tensor<16x4xf32, #parallel.sharding<@group, [["d"], []]>>
parallel.mesh @grid ["x" = 2, "y" = 2]
parallel.mesh @group ["d" = 2] devices [5, 4]
func.func @main(%x: tensor<16x8xf32, #parallel.sharding<@grid, [[], ["x", "y"]]>>,
                %w: tensor<8x4xf32, #parallel.sharding<@grid, [["x", "y"], []]>>)
    -> tensor<16x4xf32, #parallel.sharding<@group, [["d"], []]>> {
  %y = graph.matmul %x, %w : tensor<16x4xf32, #parallel.sharding<@grid, [[], []], unreduced = ["x", "y"]>>
  %r = parallel.all_reduce %y : tensor<16x4xf32, #parallel.sharding<@grid, [[], []], unreduced = ["y"]>>
  %s = parallel.reduce_scatter %r : tensor<16x4xf32, #parallel.sharding<@grid, [["y"], []]>>
  %t = parallel.all_to_all %s : tensor<16x4xf32, #parallel.sharding<@grid, [[], ["y"]]>>
  %u = parallel.all_slice %t : tensor<16x4xf32, #parallel.sharding<@grid, [["x"], ["y"]]>>
  %v = parallel.all_gather %u : tensor<16x4xf32, #parallel.sharding<@grid, [[], []]>>
  %c = parallel.replicate %v : tensor<16x4xf32, #parallel.sharding<@group, [["d"], []]>>
  func.return %c : tensor<16x4xf32, #parallel.sharding<@group, [["d"], []]>>
}
