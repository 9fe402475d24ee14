// DLRM's hybrid parallelism: the embedding table splits by its columns over the
// devices (model parallel), the lookup's result reaches the batch-split layers by an
// all-to-all, and its gradient comes back to the table's columns by another.
// RUN: %tasoc opt %s -p 'autodiff{loss=mse optimizer=sgd lr=0.1},soap-shard{mesh=4 search=dlrm-hybrid}' | filecheck %s
// A program without a lookup: search=dlrm-hybrid writes data parallel, with a warning.
// RUN: %tasoc opt %S/expert.mlir -p 'soap-shard{mesh=4 search=dlrm-hybrid}' 2>&1 >/dev/null | filecheck %s --check-prefix=NONE

func.func @main(%ids: tensor<8x1xi32>, %x: tensor<8x1x4xf32>, %t: tensor<16x4xf32> {graph.param},
                %w: tensor<8x2xf32> {graph.param}) -> tensor<8x2xf32> {
  %e = graph.embedding %ids, %t : tensor<8x1x4xf32>
  %c = graph.concat %x, %e {axis = 1 : i64} : tensor<8x2x4xf32>
  %f = graph.reshape %c {shape = array<i64: 8, 8>} : tensor<8x8xf32>
  %y = graph.matmul %f, %w : tensor<8x2xf32>
  func.return %y : tensor<8x2xf32>
}

// CHECK:      func.func @main(
// CHECK-SAME: %t: tensor<16x4xf32, #parallel.sharding<@mesh, {{\[\[\], \["d"\]\]}}>> {graph.param}
// CHECK-NEXT: %[[E:.*]] = graph.embedding %ids, %t : tensor<8x1x4xf32, #parallel.sharding<@mesh, {{\[\[\], \[\], \["d"\]\]}}>>
// CHECK-NEXT: %[[B:.*]] = parallel.all_to_all %[[E]] : tensor<8x1x4xf32, #parallel.sharding<@mesh, {{\[\["d"\], \[\], \[\]\]}}>>
// CHECK-NEXT: graph.concat %x, %[[B]] {axis = 1 : i64} : tensor<8x2x4xf32, #parallel.sharding<@mesh, {{\[\["d"\], \[\], \[\]\]}}>>
// CHECK:      %[[G:.*]] = parallel.all_to_all %{{.*}} : tensor<8x1x4xf32, #parallel.sharding<@mesh, {{\[\[\], \[\], \["d"\]\]}}>>
// CHECK-NEXT: graph.scatter_add %ids, %[[G]] {rows = 16 : i64} : tensor<16x4xf32, #parallel.sharding<@mesh, {{\[\[\], \["d"\]\]}}>>

// NONE: tasoc: warning: soap-shard: search=dlrm-hybrid does not apply (no embedding lookup (graph.embedding of a weight table) whose columns the mesh splits): the plan written is data parallel's
