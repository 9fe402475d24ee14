// ZeRO (stages 1-2): data parallel, but each Adam update splits its weight's rows over
// the devices: the gradient's partial sums arrive by a reduce-scatter, Adam's moments
// lie split (1/4 of the state per device), the weights stay replicated (a free slice
// feeds the update) and the new weights are all-gathered back.
// RUN: %tasoc opt %s -p 'autodiff{loss=mse optimizer=adam lr=0.1},soap-shard{mesh=4 search=zero}' | filecheck %s
// A forward program has no optimizer update: search=zero writes data parallel, and says so.
// RUN: %tasoc opt %s -p 'soap-shard{mesh=4 search=zero}' 2>&1 >/dev/null | filecheck %s --check-prefix=FORWARD

func.func @main(%x: tensor<16x8xf32>, %w1: tensor<8x32xf32> {graph.param},
                %w2: tensor<32x4xf32> {graph.param}) -> tensor<16x4xf32> {
  %h = graph.matmul %x, %w1 : tensor<16x32xf32>
  %r = graph.relu %h : tensor<16x32xf32>
  %y = graph.matmul %r, %w2 : tensor<16x4xf32>
  func.return %y : tensor<16x4xf32>
}

// CHECK:      func.func @main(
// CHECK-SAME: %w1: tensor<8x32xf32, #parallel.sharding<@mesh, {{\[\[\], \[\]\]}}>> {graph.param}
// CHECK-SAME: %w1.m: tensor<8x32xf32, #parallel.sharding<@mesh, {{\[\["d"\], \[\]\]}}>> {graph.state}
// CHECK-SAME: %w1.v: tensor<8x32xf32, #parallel.sharding<@mesh, {{\[\["d"\], \[\]\]}}>> {graph.state}
// CHECK-SAME: %w2.m: tensor<32x4xf32, #parallel.sharding<@mesh, {{\[\["d"\], \[\]\]}}>> {graph.state}
// CHECK:      %[[SLICE:.*]] = parallel.all_slice %w1 : tensor<8x32xf32, #parallel.sharding<@mesh, {{\[\["d"\], \[\]\]}}>>
// CHECK-NEXT: %[[GRAD:.*]] = parallel.reduce_scatter %{{.*}} : tensor<8x32xf32, #parallel.sharding<@mesh, {{\[\["d"\], \[\]\]}}>>
// CHECK-NEXT: %[[NEW:.*]], %{{.*}}, %{{.*}} = graph.adam_update %[[SLICE]], %[[GRAD]], %w1.m, %w1.v
// CHECK:      parallel.all_gather %[[NEW]] : tensor<8x32xf32, #parallel.sharding<@mesh, [[], []]>>
// CHECK-NOT:  parallel.all_reduce %{{.*}} : tensor<8x32xf32

// FORWARD:      soap-shard: zero on mesh d=4 (cpu-4):
// FORWARD:      baselines simulated: data-parallel {{.*}}; not applying: {{.*}}zero
// FORWARD:      tasoc: warning: soap-shard: search=zero does not apply (no optimizer update (not a training step)): the plan written is data parallel's
