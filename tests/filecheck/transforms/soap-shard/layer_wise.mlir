// The expert strategy on an RNN: layer-wise model parallelism (FlexFlow's Operator
// dimension). The two recurrent layers are found from the graph alone (a weight read
// at every time step, each step depending on the one before), whatever the names:
// mesh=4 becomes two device groups of two devices, a layer on each, its ops data
// parallel inside its group; the first layer's hidden states are copied onto the
// second's group by parallel.replicate before that group's run of ops begins.
// RUN: %tasoc opt %s -p 'soap-shard{mesh=4 search=expert}' | filecheck %s
// RUN: %tasoc opt %s -p 'autodiff{loss=mse optimizer=sgd lr=0.1},soap-shard{mesh=4 search=expert}' | filecheck %s --check-prefix=STEP

func.func @main(%x0: tensor<4x8xf32>, %x1: tensor<4x8xf32>, %h0: tensor<4x8xf32>,
                %p: tensor<8x8xf32> {graph.param}, %q: tensor<8x8xf32> {graph.param},
                %r: tensor<8x8xf32> {graph.param}, %s: tensor<8x8xf32> {graph.param})
    -> tensor<4x8xf32> {
  // first layer (input weight %p, recurrent weight %q), two time steps
  %a0 = graph.matmul %x0, %p : tensor<4x8xf32>
  %b0 = graph.matmul %h0, %q : tensor<4x8xf32>
  %c0 = graph.add %a0, %b0 : tensor<4x8xf32>
  %h1 = graph.tanh %c0 : tensor<4x8xf32>
  %a1 = graph.matmul %x1, %p : tensor<4x8xf32>
  %b1 = graph.matmul %h1, %q : tensor<4x8xf32>
  %c1 = graph.add %a1, %b1 : tensor<4x8xf32>
  %h2 = graph.tanh %c1 : tensor<4x8xf32>
  // second layer (input weight %r, recurrent weight %s) on the first one's states
  %d0 = graph.matmul %h1, %r : tensor<4x8xf32>
  %e0 = graph.matmul %h0, %s : tensor<4x8xf32>
  %f0 = graph.add %d0, %e0 : tensor<4x8xf32>
  %g1 = graph.tanh %f0 : tensor<4x8xf32>
  %d1 = graph.matmul %h2, %r : tensor<4x8xf32>
  %e1 = graph.matmul %g1, %s : tensor<4x8xf32>
  %f1 = graph.add %d1, %e1 : tensor<4x8xf32>
  %g2 = graph.tanh %f1 : tensor<4x8xf32>
  func.return %g2 : tensor<4x8xf32>
}

// CHECK:      parallel.mesh @g0 ["d" = 2] devices [0, 1]
// CHECK-NEXT: parallel.mesh @g1 ["d" = 2] devices [2, 3]
// CHECK-NEXT: func.func @main(%x0: tensor<4x8xf32, #parallel.sharding<@g0, {{\[\["d"\], \[\]\]}}>>
// CHECK-SAME: %p: tensor<8x8xf32, #parallel.sharding<@g0, [[], []]>> {graph.param}
// CHECK-SAME: %q: tensor<8x8xf32, #parallel.sharding<@g0, [[], []]>> {graph.param}
// CHECK-SAME: %r: tensor<8x8xf32, #parallel.sharding<@g1, [[], []]>> {graph.param}
// CHECK-SAME: %s: tensor<8x8xf32, #parallel.sharding<@g1, [[], []]>> {graph.param}
// CHECK-SAME: -> tensor<4x8xf32, #parallel.sharding<@g1, {{\[\["d"\], \[\]\]}}>>
// The first layer, both steps, on @g0, data parallel:
// CHECK-NEXT: %0 = graph.matmul %x1, %p : tensor<4x8xf32, #parallel.sharding<@g0, {{\[\["d"\], \[\]\]}}>>
// CHECK:      %[[H1:.*]] = graph.tanh %3 : tensor<4x8xf32, #parallel.sharding<@g0, {{\[\["d"\], \[\]\]}}>>
// CHECK:      %[[H2:.*]] = graph.tanh %6 : tensor<4x8xf32, #parallel.sharding<@g0, {{\[\["d"\], \[\]\]}}>>
// The values the second layer reads, copied onto its group before it starts:
// CHECK-NEXT: %[[C2:.*]] = parallel.replicate %[[H2]] : tensor<4x8xf32, #parallel.sharding<@g1, {{\[\["d"\], \[\]\]}}>>
// CHECK-NEXT: %[[C1:.*]] = parallel.replicate %[[H1]] : tensor<4x8xf32, #parallel.sharding<@g1, {{\[\["d"\], \[\]\]}}>>
// CHECK-NEXT: %[[C0:.*]] = parallel.replicate %h0 : tensor<4x8xf32, #parallel.sharding<@g1, {{\[\["d"\], \[\]\]}}>>
// The second layer on @g1:
// CHECK-NEXT: graph.matmul %[[C2]], %r : tensor<4x8xf32, #parallel.sharding<@g1, {{\[\["d"\], \[\]\]}}>>
// CHECK-NEXT: graph.matmul %[[C1]], %r : tensor<4x8xf32, #parallel.sharding<@g1, {{\[\["d"\], \[\]\]}}>>
// CHECK-NEXT: graph.matmul %[[C0]], %s : tensor<4x8xf32, #parallel.sharding<@g1, {{\[\["d"\], \[\]\]}}>>
// CHECK-NOT:  parallel.{{[a-z_]+}} %
// CHECK:      func.return

// The training step: each layer's weights are updated on its group and leave as they
// came; the weight gradients are all-reduced inside the group.
// STEP:      parallel.mesh @g0 ["d" = 2] devices [0, 1]
// STEP-NEXT: parallel.mesh @g1 ["d" = 2] devices [2, 3]
// STEP:      {graph.loss}
// STEP-SAME: tensor<8x8xf32, #parallel.sharding<@g0, [[], []]>> {graph.replaces = 4 : i64}
// STEP-SAME: tensor<8x8xf32, #parallel.sharding<@g0, [[], []]>> {graph.replaces = 5 : i64}
// STEP-SAME: tensor<8x8xf32, #parallel.sharding<@g1, [[], []]>> {graph.replaces = 6 : i64}
// STEP-SAME: tensor<8x8xf32, #parallel.sharding<@g1, [[], []]>> {graph.replaces = 7 : i64}
// STEP:      parallel.replicate {{.*}} : tensor<4x8xf32, #parallel.sharding<@g1,
// STEP:      parallel.all_reduce {{.*}} : tensor<8x8xf32, #parallel.sharding<@g1, [[], []]>>
// STEP-NEXT: graph.add %r,
// STEP:      parallel.all_reduce {{.*}} : tensor<8x8xf32, #parallel.sharding<@g1, [[], []]>>
// STEP-NEXT: graph.add %s,
// STEP:      parallel.replicate {{.*}} : tensor<4x8xf32, #parallel.sharding<@g0,
// STEP:      parallel.all_reduce {{.*}} : tensor<8x8xf32, #parallel.sharding<@g0, [[], []]>>
// STEP-NEXT: graph.add %p,
// STEP:      parallel.all_reduce {{.*}} : tensor<8x8xf32, #parallel.sharding<@g0, [[], []]>>
// STEP-NEXT: graph.add %q,
