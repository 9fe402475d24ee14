// Every `parallel` op and attribute parses, verifies and prints back unchanged, and
// printing is stable (a second round trip prints the same text): meshes with and
// without devices, 1-D and 2-D, shardings with partial sums, and each collective.
// RUN: %tasoc opt %s | filecheck %s
// RUN: %tasoc opt %s | %tasoc opt - | filecheck %s

// CHECK:      parallel.mesh @line ["d" = 4]
// CHECK-NEXT: parallel.mesh @grid ["x" = 2, "y" = 2]
// CHECK-NEXT: parallel.mesh @group ["d" = 2] devices [2, 3]
// CHECK-NEXT: parallel.mesh @wide ["x" = 2, "y" = 2] devices [7, 6, 5, 4]
parallel.mesh @line ["d" = 4]
parallel.mesh @grid ["x" = 2, "y" = 2]
parallel.mesh @group ["d" = 2] devices [2, 3]
parallel.mesh @wide ["x" = 2, "y" = 2] devices [7, 6, 5, 4]

// CHECK-LABEL: func.func @one_dim
// CHECK-SAME:    %x: tensor<16x8xf32, #parallel.sharding<@line, [["d"], []]>>
// CHECK-SAME:    %w: tensor<8x4xf32, #parallel.sharding<@line, [[], []]>>
// CHECK-NEXT:    %y = graph.matmul %x, %w : tensor<16x4xf32, #parallel.sharding<@line, [["d"], []]>>
// CHECK-NEXT:    %z = parallel.all_gather %y : tensor<16x4xf32, #parallel.sharding<@line, [[], []]>>
// CHECK-NEXT:    %s = parallel.all_slice %z : tensor<16x4xf32, #parallel.sharding<@line, [[], ["d"]]>>
// CHECK-NEXT:    %t = parallel.all_to_all %s : tensor<16x4xf32, #parallel.sharding<@line, [["d"], []]>>
// CHECK-NEXT:    func.return %t : tensor<16x4xf32, #parallel.sharding<@line, [["d"], []]>>
func.func @one_dim(%x: tensor<16x8xf32, #parallel.sharding<@line, [["d"], []]>>,
                   %w: tensor<8x4xf32, #parallel.sharding<@line, [[], []]>>)
    -> tensor<16x4xf32, #parallel.sharding<@line, [["d"], []]>> {
  %y = graph.matmul %x, %w : tensor<16x4xf32, #parallel.sharding<@line, [["d"], []]>>
  %z = parallel.all_gather %y : tensor<16x4xf32, #parallel.sharding<@line, [[], []]>>
  %s = parallel.all_slice %z : tensor<16x4xf32, #parallel.sharding<@line, [[], ["d"]]>>
  %t = parallel.all_to_all %s : tensor<16x4xf32, #parallel.sharding<@line, [["d"], []]>>
  func.return %t : tensor<16x4xf32, #parallel.sharding<@line, [["d"], []]>>
}

// A matmul split along its contracting dim leaves partial sums, which an all_reduce
// or a reduce_scatter completes.
// CHECK-LABEL: func.func @partial_sums
// CHECK-NEXT:    %y = graph.matmul %x, %w : tensor<16x4xf32, #parallel.sharding<@grid, [[], []], unreduced = ["x", "y"]>>
// CHECK-NEXT:    %r = parallel.all_reduce %y : tensor<16x4xf32, #parallel.sharding<@grid, [[], []], unreduced = ["y"]>>
// CHECK-NEXT:    %s = parallel.reduce_scatter %r : tensor<16x4xf32, #parallel.sharding<@grid, [["y"], []]>>
// CHECK-NEXT:    func.return %s : tensor<16x4xf32, #parallel.sharding<@grid, [["y"], []]>>
func.func @partial_sums(%x: tensor<16x8xf32, #parallel.sharding<@grid, [[], ["x", "y"]]>>,
                        %w: tensor<8x4xf32, #parallel.sharding<@grid, [["x", "y"], []]>>)
    -> tensor<16x4xf32, #parallel.sharding<@grid, [["y"], []]>> {
  %y = graph.matmul %x, %w : tensor<16x4xf32, #parallel.sharding<@grid, [[], []], unreduced = ["x", "y"]>>
  %r = parallel.all_reduce %y : tensor<16x4xf32, #parallel.sharding<@grid, [[], []], unreduced = ["y"]>>
  %s = parallel.reduce_scatter %r : tensor<16x4xf32, #parallel.sharding<@grid, [["y"], []]>>
  func.return %s : tensor<16x4xf32, #parallel.sharding<@grid, [["y"], []]>>
}

// Two axes on one dim (major to minor), and a copy onto another device group.
// CHECK-LABEL: func.func @two_dims
// CHECK-NEXT:    %y = graph.relu %x : tensor<8x4xf32, #parallel.sharding<@grid, [["y", "x"], []]>>
// CHECK-NEXT:    %g = parallel.all_gather %y : tensor<8x4xf32, #parallel.sharding<@grid, [[], []]>>
// CHECK-NEXT:    %c = parallel.replicate %g : tensor<8x4xf32, #parallel.sharding<@wide, [["x"], ["y"]]>>
// CHECK-NEXT:    func.return %c : tensor<8x4xf32, #parallel.sharding<@wide, [["x"], ["y"]]>>
func.func @two_dims(%x: tensor<8x4xf32, #parallel.sharding<@grid, [["y", "x"], []]>>)
    -> tensor<8x4xf32, #parallel.sharding<@wide, [["x"], ["y"]]>> {
  %y = graph.relu %x : tensor<8x4xf32, #parallel.sharding<@grid, [["y", "x"], []]>>
  %g = parallel.all_gather %y : tensor<8x4xf32, #parallel.sharding<@grid, [[], []]>>
  %c = parallel.replicate %g : tensor<8x4xf32, #parallel.sharding<@wide, [["x"], ["y"]]>>
  func.return %c : tensor<8x4xf32, #parallel.sharding<@wide, [["x"], ["y"]]>>
}

// A rank-0 value's sharding has no dims; a constant takes the sharding it declares.
// CHECK-LABEL: func.func @scalar
// CHECK-NEXT:    %s = graph.scale %x, %k : tensor<4xf32, #parallel.sharding<@group, [["d"]]>>
func.func @scalar(%x: tensor<4xf32, #parallel.sharding<@group, [["d"]]>>,
                  %k: tensor<f32, #parallel.sharding<@group, []>>)
    -> tensor<4xf32, #parallel.sharding<@group, [["d"]]>> {
  %s = graph.scale %x, %k : tensor<4xf32, #parallel.sharding<@group, [["d"]]>>
  func.return %s : tensor<4xf32, #parallel.sharding<@group, [["d"]]>>
}

// Partial sums are along a set of axes: written in any order, they print sorted, so a
// sum of two values unreduced along the same axes type-checks whichever order each names.
// CHECK-LABEL: func.func @unreduced_is_a_set
// CHECK-SAME:    %a: tensor<8xf32, #parallel.sharding<@grid, [[]], unreduced = ["x", "y"]>>
// CHECK-SAME:    %b: tensor<8xf32, #parallel.sharding<@grid, [[]], unreduced = ["x", "y"]>>
// CHECK-NEXT:    %s = graph.add %a, %b : tensor<8xf32, #parallel.sharding<@grid, [[]], unreduced = ["x", "y"]>>
func.func @unreduced_is_a_set(%a: tensor<8xf32, #parallel.sharding<@grid, [[]], unreduced = ["y", "x"]>>,
                              %b: tensor<8xf32, #parallel.sharding<@grid, [[]], unreduced = ["x", "y"]>>)
    -> tensor<8xf32, #parallel.sharding<@grid, [[]], unreduced = ["y", "x"]>> {
  %s = graph.add %a, %b : tensor<8xf32, #parallel.sharding<@grid, [[]], unreduced = ["y", "x"]>>
  func.return %s : tensor<8xf32, #parallel.sharding<@grid, [[]], unreduced = ["y", "x"]>>
}
