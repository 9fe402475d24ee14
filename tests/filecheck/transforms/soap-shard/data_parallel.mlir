// Data parallelism on a small MLP's training step: the batch is split, weights are
// replicated, each weight gradient leaves its matmul as partial sums and is
// all-reduced once (after the learning-rate scaling), so every new weight is laid out
// as its argument is; the loss is completed before it is returned.
// RUN: %tasoc opt %s -p 'autodiff{loss=mse optimizer=sgd lr=0.1},soap-shard{mesh=4 search=data-parallel}' | filecheck %s

func.func @main(%x: tensor<16x8xf32>, %w1: tensor<8x32xf32> {graph.param},
                %w2: tensor<32x4xf32> {graph.param}) -> tensor<16x4xf32> {
  %h = graph.matmul %x, %w1 : tensor<16x32xf32>
  %r = graph.relu %h : tensor<16x32xf32>
  %y = graph.matmul %r, %w2 : tensor<16x4xf32>
  func.return %y : tensor<16x4xf32>
}

// CHECK:      parallel.mesh @mesh ["d" = 4]
// CHECK-NEXT: func.func @main(%x: tensor<16x8xf32, #parallel.sharding<@mesh, {{\[\["d"\], \[\]\]}}>>,
// CHECK-SAME: %w1: tensor<8x32xf32, #parallel.sharding<@mesh, [[], []]>> {graph.param}
// CHECK-SAME: %w2: tensor<32x4xf32, #parallel.sharding<@mesh, [[], []]>> {graph.param}
// CHECK-SAME: -> (tensor<f32, #parallel.sharding<@mesh, []>> {graph.loss},
// CHECK-SAME: tensor<8x32xf32, #parallel.sharding<@mesh, [[], []]>> {graph.replaces = 2 : i64}
// CHECK:      graph.matmul %x, %w1 : tensor<16x32xf32, #parallel.sharding<@mesh, {{\[\["d"\], \[\]\]}}>>
// CHECK-NOT:  parallel.all_
// CHECK:      %[[G1:.*]] = graph.matmul {{.*}} : tensor<8x32xf32, #parallel.sharding<@mesh, [[], []], unreduced = ["d"]>>
// CHECK-NEXT: %[[LR:.*]] = graph.constant
// CHECK-NEXT: %[[S1:.*]] = graph.scale %[[G1]], %[[LR]] : tensor<8x32xf32, #parallel.sharding<@mesh, [[], []], unreduced = ["d"]>>
// CHECK-NEXT: %[[R1:.*]] = parallel.all_reduce %[[S1]] : tensor<8x32xf32, #parallel.sharding<@mesh, [[], []]>>
// CHECK-NEXT: %[[W1:.*]] = graph.add %w1, %[[R1]]
// CHECK:      %[[G2:.*]] = graph.matmul {{.*}} : tensor<32x4xf32, #parallel.sharding<@mesh, [[], []], unreduced = ["d"]>>
// CHECK-NEXT: %[[S2:.*]] = graph.scale %[[G2]], %[[LR]]
// CHECK-NEXT: %[[R2:.*]] = parallel.all_reduce %[[S2]] : tensor<32x4xf32, #parallel.sharding<@mesh, [[], []]>>
// CHECK-NEXT: %[[W2:.*]] = graph.add %w2, %[[R2]]
// CHECK-NEXT: %[[LOSS:.*]] = parallel.all_reduce %{{.*}} : tensor<f32, #parallel.sharding<@mesh, []>>
// CHECK-NEXT: func.return %[[LOSS]], %[[W1]], %[[W2]]
// CHECK-NOT:  parallel.all_
