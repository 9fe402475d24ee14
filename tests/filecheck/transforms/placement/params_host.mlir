// params=host: the weights live in host memory between steps. Each is swapped in one
// op before its first reader, and its new value is swapped out as soon as it is made
// and returned in host memory, the space the next step reads it from. prefetch=0
// puts the swap-ins right before their readers; min-bytes keeps the small error term.
// RUN: %tasoc opt %s --verify-each -p 'autodiff{loss=mse optimizer=sgd lr=0.1},placement{search=offload-all params=host prefetch=0 min-bytes=1KiB}' | filecheck %s

func.func @main(%x: tensor<16x8xf32>, %w1: tensor<8x32xf32> {graph.param},
                %w2: tensor<32x4xf32> {graph.param}) -> tensor<16x4xf32> {
  %h = graph.matmul %x, %w1 : tensor<16x32xf32>
  %r = graph.relu %h : tensor<16x32xf32>
  %y = graph.matmul %r, %w2 : tensor<16x4xf32>
  func.return %y : tensor<16x4xf32>
}

// CHECK:      func.func @main(%x: tensor<16x8xf32>, %labels: tensor<16x4xf32> {graph.labels}, %w1: tensor<8x32xf32, #memory.space<host>> {graph.param}, %w2: tensor<32x4xf32, #memory.space<host>> {graph.param})
// CHECK-SAME: -> (tensor<f32> {graph.loss}, tensor<8x32xf32, #memory.space<host>> {graph.replaces = 2 : i64}, tensor<32x4xf32, #memory.space<host>> {graph.replaces = 3 : i64})
// CHECK-NEXT:   %[[W1:.*]] = memory.swap_in %w1 : tensor<8x32xf32>
// CHECK-NEXT:   graph.matmul %x, %[[W1]]
// CHECK:        %[[W2:.*]] = memory.swap_in %w2 : tensor<32x4xf32>
// CHECK-NEXT:   graph.matmul %{{.*}}, %[[W2]]
// CHECK-NOT:    memory.swap_out %{{.*}} : tensor<16x4xf32
// CHECK:        %[[N2:.*]] = graph.add %[[W2]], %{{.*}} : tensor<32x4xf32>
// CHECK-NEXT:   %[[N2H:.*]] = memory.swap_out %[[N2]] : tensor<32x4xf32, #memory.space<host>>
// CHECK:        %[[N1:.*]] = graph.add %[[W1]], %{{.*}} : tensor<8x32xf32>
// CHECK-NEXT:   %[[N1H:.*]] = memory.swap_out %[[N1]] : tensor<8x32xf32, #memory.space<host>>
// CHECK-NEXT:   func.return %{{.*}}, %[[N1H]], %[[N2H]]
