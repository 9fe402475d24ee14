// search=ft on a small MLP's training step on 4 of TensorOpt's V100s: the frontier's
// least-memory point splits both weights (and so their updates) as Megatron does, the
// first by its output features (the hidden activations stay split through the relu)
// and the second by its contracting rows, its matmul leaving partial sums that a
// reduce-scatter completes; its fastest
// point, like the ILP's optimum, replicates everything: at this size a collective's
// latency costs more than the compute it would save.
// RUN: %tasoc opt %s -p 'autodiff{loss=mse optimizer=sgd lr=0.1},soap-shard{mesh=4 machine=v100-tensoropt search=ft objective=frontier pick=smallest compare=none}' | filecheck %s --check-prefix=SMALL
// RUN: %tasoc opt %s -p 'autodiff{loss=mse optimizer=sgd lr=0.1},soap-shard{mesh=4 machine=v100-tensoropt search=ft objective=frontier compare=none}' | filecheck %s --check-prefix=FAST
// RUN: %tasoc opt %s -p 'autodiff{loss=mse optimizer=sgd lr=0.1},soap-shard{mesh=4 machine=v100-tensoropt search=ilp}' | filecheck %s --check-prefix=FAST

func.func @main(%x: tensor<16x8xf32>, %w1: tensor<8x32xf32> {graph.param},
                %w2: tensor<32x4xf32> {graph.param}) -> tensor<16x4xf32> {
  %h = graph.matmul %x, %w1 : tensor<16x32xf32>
  %r = graph.relu %h : tensor<16x32xf32>
  %y = graph.matmul %r, %w2 : tensor<16x4xf32>
  func.return %y : tensor<16x4xf32>
}

// SMALL:      parallel.mesh @mesh ["d" = 4]
// SMALL:      %w1: tensor<8x32xf32, #parallel.sharding<@mesh, {{\[\[\], \["d"\]\]}}>> {graph.param}
// SMALL-SAME: %w2: tensor<32x4xf32, #parallel.sharding<@mesh, {{\[\["d"\], \[\]\]}}>> {graph.param}
// SMALL:      %[[H:.*]] = graph.matmul %x, %w1 : tensor<16x32xf32, #parallel.sharding<@mesh, [[], ["d"]]>>
// SMALL:      %[[Y:.*]] = graph.matmul %{{.*}}, %w2 : tensor<16x4xf32, #parallel.sharding<@mesh, [[], []], unreduced = ["d"]>>
// SMALL:      parallel.reduce_scatter %[[Y]]

// FAST:       parallel.mesh @mesh ["d" = 4]
// FAST:       %w1: tensor<8x32xf32, #parallel.sharding<@mesh, [[], []]>> {graph.param}
// FAST-SAME:  %w2: tensor<32x4xf32, #parallel.sharding<@mesh, [[], []]>> {graph.param}
// FAST-NOT:   parallel.{{all_|reduce_scatter|replicate}}
