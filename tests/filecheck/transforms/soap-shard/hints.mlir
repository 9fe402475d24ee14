// A mesh and an argument sharding written by hand are kept: the weight stays split as
// the user said, the rest is completed around it, and the module keeps its one mesh.
// RUN: %tasoc opt %s -p 'soap-shard' | filecheck %s
// RUN: %tasoc opt %s -p 'soap-shard{mesh=2x2}' | filecheck %s

parallel.mesh @m ["x" = 2, "y" = 2]
func.func @main(%x: tensor<16x8xf32>,
                %w: tensor<8x32xf32> {graph.param, parallel.sharding = #parallel.sharding<@m, [[], ["y"]]>})
    -> tensor<16x32xf32> {
  %h = graph.matmul %x, %w : tensor<16x32xf32>
  func.return %h : tensor<16x32xf32>
}

// CHECK:      parallel.mesh @m ["x" = 2, "y" = 2]
// CHECK-NOT:  parallel.mesh
// CHECK:      %w: tensor<8x32xf32, #parallel.sharding<@m, {{\[\[\], \["y"\]\]}}>> {graph.param, parallel.sharding = #parallel.sharding<@m, {{\[\[\], \["y"\]\]}}>}
