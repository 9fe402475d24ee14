// The expert strategy splits a dense layer's weight by its output features (model
// parallel): the weights arrive split, each layer's output is split by features, the
// next layer gathers the whole activation, and the new weights leave split as they came.
// RUN: %tasoc opt %s -p 'soap-shard{mesh=4 search=expert}' | filecheck %s
// Without recurrent layers expert is one weird trick (Krizhevsky, 2014):
// RUN: %tasoc opt %s -p 'soap-shard{mesh=4 search=owt}' | filecheck %s
// RUN: %tasoc opt %s -p 'autodiff{loss=mse optimizer=sgd lr=0.1},soap-shard{mesh=2x2 search=expert}' | filecheck %s --check-prefix=STEP

func.func @main(%x: tensor<16x8xf32>, %w1: tensor<8x32xf32> {graph.param},
                %w2: tensor<32x4xf32> {graph.param}) -> tensor<16x4xf32> {
  %h = graph.matmul %x, %w1 : tensor<16x32xf32>
  %r = graph.relu %h : tensor<16x32xf32>
  %y = graph.matmul %r, %w2 : tensor<16x4xf32>
  func.return %y : tensor<16x4xf32>
}

// CHECK:      parallel.mesh @mesh ["d" = 4]
// CHECK-NEXT: func.func @main(%x: tensor<16x8xf32, #parallel.sharding<@mesh, [[], []]>>,
// CHECK-SAME: %w1: tensor<8x32xf32, #parallel.sharding<@mesh, {{\[\[\], \["d"\]\]}}>> {graph.param}
// CHECK-SAME: %w2: tensor<32x4xf32, #parallel.sharding<@mesh, {{\[\[\], \["d"\]\]}}>> {graph.param}
// CHECK-NEXT: %0 = graph.matmul %x, %w1 : tensor<16x32xf32, #parallel.sharding<@mesh, {{\[\[\], \["d"\]\]}}>>
// CHECK-NEXT: %1 = graph.relu %0 : tensor<16x32xf32, #parallel.sharding<@mesh, {{\[\[\], \["d"\]\]}}>>
// CHECK-NEXT: %2 = parallel.all_gather %1 : tensor<16x32xf32, #parallel.sharding<@mesh, [[], []]>>
// CHECK-NEXT: %3 = graph.matmul %2, %w2 : tensor<16x4xf32, #parallel.sharding<@mesh, {{\[\[\], \["d"\]\]}}>>
// CHECK-NEXT: func.return %3

// STEP:      parallel.mesh @mesh ["x" = 2, "y" = 2]
// STEP:      %w1: tensor<8x32xf32, #parallel.sharding<@mesh, {{\[\[\], \["x", "y"\]\]}}>> {graph.param}
// STEP-SAME: %w2: tensor<32x4xf32, #parallel.sharding<@mesh, {{\[\[\], \["x", "y"\]\]}}>> {graph.param}
// STEP-SAME: tensor<8x32xf32, #parallel.sharding<@mesh, {{\[\[\], \["x", "y"\]\]}}>> {graph.replaces = 2 : i64}
// STEP-SAME: tensor<32x4xf32, #parallel.sharding<@mesh, {{\[\[\], \["x", "y"\]\]}}>> {graph.replaces = 3 : i64}
// STEP:      graph.matmul %x, %w1 : tensor<16x32xf32, #parallel.sharding<@mesh, {{\[\[\], \["x", "y"\]\]}}>>
